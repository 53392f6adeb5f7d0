"""Pool kernels against PyTorch on the GPU: every case of `pool_cases.CASES` (1d/2d/3d, padding, dilation,
ceil_mode, count_include_pad, divisor_override, adaptive windows, both layouts, prologues and epilogues),
a sweep over kernel sizes 1/2/3/5 and strides 1/2/3 in every rank, NaN and infinities, non-contiguous
and misaligned inputs, 64-bit indexing, and the bundled problems' full sizes (timed against ATen, printed,
not asserted). The cases and the sweep share one extension build."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from pool_cases import CASES, adaptive, avg_pool, max_pool, random_inputs, with_rows

from kernelwright.capture import capture
from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion
from kernelwright.ir.graph import Graph
from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import input_node
from kernelwright.problem import load_problem
from kernelwright.verify.execute import execute_plan, run_group_with_aten
from kernelwright.verify.measure import time_ms

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda")


# ------------------------------------------------------------------------------------------------ the sweep

@dataclass(frozen=True)
class SweepPoint:
    """One pool with its attributes; `graph()` builds it as IR, `torch_call(x)` calls torch's own."""

    kind: str                    # "max", "avg", "adaptive_max", "adaptive_avg"
    shape: tuple[int, ...]
    kernel: int = 1
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    output_size: tuple[int, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.shape) - 2

    @property
    def name(self) -> str:
        if self.kind.startswith("adaptive"):
            sizes = "x".join(map(str, self.shape[2:])), "x".join(map(str, self.output_size))
            return f"sweep_{self.kind}{self.rank}d_{sizes[0]}_to_{sizes[1]}"
        text = f"sweep_{self.kind}{self.rank}d_k{self.kernel}_s{self.stride}_p{self.padding}"
        if self.kind == "max":
            text += f"_d{self.dilation}"
        else:
            text += "_pad" if self.count_include_pad else "_nopad"
        text += "_ceil" if self.ceil_mode else ""
        return text + (f"_div{self.divisor_override}" if self.divisor_override else "")

    def graph(self) -> Graph:
        x = input_node("x", 0, self.shape)
        n = self.rank
        if self.kind == "max":
            y = max_pool(x, n, self.kernel, self.stride, self.padding, self.dilation, self.ceil_mode)
        elif self.kind == "avg":
            y = avg_pool(x, n, self.kernel, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                         self.divisor_override)
        else:
            y = adaptive(self.kind.split("_")[1], x, self.output_size)
        return Graph((x,), (), (y,))

    def torch_call(self, x: torch.Tensor) -> torch.Tensor:
        n = self.rank
        if self.kind == "max":
            return getattr(F, f"max_pool{n}d")(x, self.kernel, self.stride, self.padding, self.dilation,
                                                self.ceil_mode)
        if self.kind == "avg":
            extra = {"divisor_override": self.divisor_override} if self.divisor_override else {}
            return getattr(F, f"avg_pool{n}d")(x, self.kernel, self.stride, self.padding, self.ceil_mode,
                                                self.count_include_pad, **extra)
        return getattr(F, f"{self.kind}_pool{n}d")(x, self.output_size)


def sweep() -> dict[str, SweepPoint]:
    """Ranks 1-3, max and average, kernel 1/2/3/5, stride 1/2/3; padding, dilation, ceil_mode,
    count_include_pad and divisor_override drawn at random (seeded), odd sizes, batch 1 or 2; then
    adaptive pools over non-divisible, equal and upsampled sizes."""
    rng = random.Random(2024)
    points = []
    for n, extra_size in ((1, 40), (2, 14), (3, 6)):
        for kind in ("max", "avg"):
            for k in (1, 2, 3, 5):
                for s in (1, 2, 3):
                    dilation = rng.choice((1, 2)) if kind == "max" and k > 1 else 1
                    reach = dilation * (k - 1) + 1
                    spatial = tuple(rng.randint(max(reach, 3), reach + extra_size) for _ in range(n))
                    shape = (rng.choice((1, 2)), rng.choice((1, 3))) + spatial
                    padding, ceil_mode, count = rng.randint(0, k // 2), rng.random() < 0.5, rng.random() < 0.5
                    # avg_pool1d has no divisor_override
                    divisor = 3 if kind == "avg" and n > 1 and rng.random() < 0.25 else None
                    points.append(SweepPoint(kind, shape, k, s, padding, dilation, ceil_mode, count, divisor))
    adaptive_sizes = [((37,), (5,)), ((8,), (8,)), ((5,), (9,)),
                      ((19, 23), (4, 7)), ((9, 9), (9, 3)), ((5, 6), (7, 11)),
                      ((7, 10, 9), (3, 4, 2)), ((4, 4, 4), (4, 2, 4)), ((3, 5, 4), (5, 6, 7))]
    for kind in ("adaptive_max", "adaptive_avg"):
        points += [SweepPoint(kind, (2, 3) + spatial, output_size=out) for spatial, out in adaptive_sizes]
    return {point.name: point for point in points}


SWEEP = sweep()
BUILDERS = {**CASES, **{name: point.graph for name, point in SWEEP.items()}}
# the cases and sweep points that `with_rows` gives several output rows a thread
ROWS_NAMES = sorted(name for name, build in BUILDERS.items()
                    if any(with_rows(g) is not None for g in plan_fusion(build()).groups))


# ------------------------------------------------------------------------------------------------ harness

@pytest.fixture(scope="module")
def built():
    """The extension with every case's and sweep point's kernel, and per name (graph, group, kernel
    name): groups hold the node objects of the graph they were planned from, so tests use that graph.
    Those whose windows overlap along H also as "<name>+rows" (3 output rows a thread, `with_rows`)."""
    found, kernels = {}, {}
    for name, build in BUILDERS.items():
        graph = build()
        (group,) = [g for g in plan_fusion(graph).groups if g.family == "pool"]
        for label, variant in ((name, group), (name + "+rows", with_rows(group))):
            if variant is not None:
                kernel = render_group(variant)
                kernels.setdefault(kernel.name, kernel)
                found[label] = (graph, variant, kernel.name)
    extension = build_extension(assemble(list(kernels.values())))
    print(f"\nbuilt {len(kernels)} pool kernels in {extension.seconds:.1f} s")
    return extension.module, found


def run_kernel(module, graph: Graph, group, kernel_name: str, inputs, params) -> torch.Tensor:
    leaves = {id(n): v for n, v in zip(graph.inputs, inputs, strict=True)}
    leaves.update({id(p): params[p.name] for p in graph.params})
    (out,) = getattr(module, kernel_name)([leaves[id(n)] for n in group.inputs])
    return out


def reference(graph: Graph, group, inputs, params) -> torch.Tensor:
    """The group's output in float64 on the CPU."""
    sub = Graph(graph.inputs, graph.params, group.outputs)
    (value,), _ = interpret(sub, [x.double().cpu() for x in inputs],
                            {k: v.double().cpu() for k, v in params.items()})
    return value


def assert_matches(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == torch.float32 and got.device.type == "cuda", name
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    got = got.double().cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(want)), f"{name}: NaN positions differ"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, msg=lambda m: f"{name}: {m}")


def is_pure_max(group) -> bool:
    return [n.op for n in group.nodes] in (["max_pool"], ["adaptive_max_pool"])


# ------------------------------------------------------------------------------------------------ tests

@pytest.mark.parametrize("name", sorted(CASES))
def test_case_matches_pytorch(built, name):
    module, found = built
    graph, group, kernel_name = found[name]
    inputs, params = random_inputs(graph, seed=1, device=DEVICE)
    ours = run_kernel(module, graph, group, kernel_name, inputs, params)
    assert_matches(name, ours, reference(graph, group, inputs, params))
    if is_pure_max(group):
        # max selects an input element: bit-identical to ATen's float32 result
        (aten,) = run_group_with_aten(group, [inputs[0]], DEVICE)
        assert torch.equal(ours, aten), name


@pytest.mark.parametrize("name", sorted(SWEEP))
def test_sweep_matches_torch_functional(built, name):
    module, found = built
    graph, group, kernel_name = found[name]
    (x,), _ = random_inputs(graph, seed=2, device=DEVICE)
    ours = run_kernel(module, graph, group, kernel_name, [x], {})
    want = SWEEP[name].torch_call(x)
    assert ours.shape == want.shape, f"{name}: shape {tuple(ours.shape)} != {tuple(want.shape)}"
    if "max" in name:
        assert torch.equal(ours, want), name
    else:
        torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert_matches(name, ours, reference(graph, group, [x], {}))


@pytest.mark.parametrize("name", ROWS_NAMES)
def test_several_output_rows_a_thread_match_pytorch(built, name):
    """3 output rows a thread (a partial last tile where the rows are not a multiple of 3): the float64
    reference, and for a plain max pool the planner's kernel bit for bit."""
    module, found = built
    graph, group, kernel_name = found[name + "+rows"]
    inputs, params = random_inputs(graph, seed=3, device=DEVICE)
    ours = run_kernel(module, graph, group, kernel_name, inputs, params)
    assert_matches(name + "+rows", ours, reference(graph, group, inputs, params))
    if is_pure_max(group):
        _, planned, planned_name = found[name]
        assert torch.equal(ours, run_kernel(module, graph, planned, planned_name, inputs, params)), name


MAX_CASES = sorted(name for name in [*CASES, *SWEEP] if "max" in name)


@pytest.mark.parametrize("name", MAX_CASES)
def test_max_pools_propagate_nan_and_keep_infinities(built, name):
    """A NaN anywhere in a window makes its max NaN (ATen's rule), whatever else the window holds and
    wherever the NaN sits in it; windows of -inf only give -inf; +inf wins over everything but NaN."""
    module, found = built
    graph, group, kernel_name = found[name]
    inputs, params = random_inputs(graph, seed=3, device=DEVICE)
    x = inputs[0]
    g = torch.Generator(device="cuda").manual_seed(5)
    flat = x.view(-1)
    flat[torch.rand(flat.shape, device=DEVICE, generator=g) < 0.02] = float("nan")
    flat[torch.rand(flat.shape, device=DEVICE, generator=g) < 0.02] = float("inf")
    x.view(x.shape[0], -1)[0, : x[0].numel() // 3] = -float("inf")
    ours = run_kernel(module, graph, group, kernel_name, inputs, params)
    assert_matches(name + " with NaN/inf", ours, reference(graph, group, inputs, params))
    if is_pure_max(group):
        (aten,) = run_group_with_aten(group, [x], DEVICE)
        assert torch.equal(torch.isnan(ours), torch.isnan(aten)), name
        assert torch.equal(ours.nan_to_num(), aten.nan_to_num()), name


@pytest.mark.parametrize("name", sorted(name for name in CASES if "avg" in name))
def test_average_pools_with_infinities_match_aten(built, name):
    """inf - inf = NaN inside a window sum: the same NaNs as ATen."""
    module, found = built
    graph, group, kernel_name = found[name]
    inputs, params = random_inputs(graph, seed=4, device=DEVICE)
    flat = inputs[0].view(-1)
    flat[::41] = float("inf")
    flat[::53] = -float("inf")
    ours = run_kernel(module, graph, group, kernel_name, inputs, params)
    assert_matches(name + " with inf", ours, reference(graph, group, inputs, params))


def odd_layouts(t: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same values as `t` in other layouts: transposed storage, a strided slice, one element off
    alignment (4-byte offset)."""
    layouts = {}
    if t.dim() >= 2:
        layouts["transposed"] = t.transpose(0, -1).contiguous().transpose(0, -1)
    wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    wide[..., ::2] = t
    layouts["every other column"] = wide[..., ::2]
    storage = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    shifted = storage[1:].view(t.shape)
    shifted.copy_(t)
    layouts["misaligned"] = shifted
    return layouts


@pytest.mark.parametrize("name", ["max2d_k3_s2_p1_vec4", "avg2d_k3_s1_p1_vec4", "max3d_ceil", "avg1d_k4_s3",
                                  "adaptive_avg2d", "adaptive_avg2d_warp", "max2d_warp",
                                  "bias_scale_relu_max_pool", "two_inputs_avg_pool", "avg_pool_epilogue",
                                  "residual_epilogue", "gelu_max_pool1d_unsqueezed", "max2d_unbatched"])
def test_non_contiguous_and_misaligned_inputs(built, name):
    module, found = built
    graph, group, kernel_name = found[name]
    inputs, params = random_inputs(graph, seed=6, device=DEVICE)
    want = reference(graph, group, inputs, params)
    for position, value in enumerate(inputs):
        for label, layout in odd_layouts(value).items():
            moved = list(inputs)
            moved[position] = layout
            ours = run_kernel(module, graph, group, kernel_name, moved, params)
            assert_matches(f"{name}: input {position} {label} (strides {layout.stride()})", ours, want)


def launched_pool_kernels(fn: Callable[[], object]) -> list[str]:
    """Names of the pool kernels one call of `fn` launched (`...::pool_kernel<true>` when the launcher
    chose the 16-byte loads), as the profiler records them."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [event.name for event in prof.events() if "pool_kernel<" in event.name]


@pytest.mark.parametrize("name", ["max2d_k3_s2_p1_vec4", "avg2d_k3_s1_p1_vec4", "bias_scale_relu_max_pool",
                                  "gelu_max_pool1d_unsqueezed", "prologue_and_epilogue_3d"])
def test_aligned_rows_take_16_byte_loads_and_misaligned_ones_do_not(built, name):
    module, found = built
    graph, group, kernel_name = found[name]
    assert group.config[0].wide_loads, f"{name}: planned without 16-byte loads"
    inputs, params = random_inputs(graph, seed=7, device=DEVICE)
    want = reference(graph, group, inputs, params)
    for layout, expected in ((inputs[0], "pool_kernel<true>"),
                             (odd_layouts(inputs[0])["misaligned"], "pool_kernel<false>")):
        moved = [layout, *inputs[1:]]
        outputs = []
        launched = launched_pool_kernels(
            lambda moved=moved, outputs=outputs: outputs.append(
                run_kernel(module, graph, group, kernel_name, moved, params)))
        assert launched and all(expected in n for n in launched), f"{name}: launched {launched}"
        assert_matches(f"{name} ({expected})", outputs[0], want)


def test_wrong_input_is_a_clear_error(built):
    module, found = built
    graph, group, kernel_name = found["max2d_k3_s2_p1"]
    with pytest.raises(RuntimeError, match="must have shape"):
        getattr(module, kernel_name)([torch.randn(3, 3, device=DEVICE)])
    with pytest.raises(RuntimeError, match="must be a CUDA tensor"):
        getattr(module, kernel_name)([torch.randn(graph.inputs[0].shape)])


def test_input_over_two_billion_elements_uses_64_bit_indexing():
    shape = (1, 2, 32768, 32769)          # 2^31 + 65536 elements: offsets past int32 (8.6 GB)
    if torch.cuda.get_device_properties(0).total_memory < 16 * 2**30:
        pytest.skip("needs about 12 GB of GPU memory")
    x_node = input_node("x", 0, shape)
    graph = Graph((x_node,), (), (max_pool(x_node, 2, 3, 2, 1),))
    (group,) = plan_fusion(graph).groups
    kernel = render_group(group)
    assert "using idx_t = long long;" in kernel.cuda
    module = build_extension(assemble([kernel])).module
    x = torch.randn(shape, device=DEVICE)
    (ours,) = getattr(module, kernel.name)([x])
    # ATen plane by plane: each plane alone stays below 2^31 elements
    want = torch.cat([F.max_pool2d(x[:, c:c + 1], 3, 2, 1) for c in range(shape[1])], dim=1)
    assert torch.equal(ours, want)


# ------------------------------------------------------------------------------------------------ full sizes

POOL_PROBLEMS = ["level1/60_MaxPool2d", "level1/61_AvgPool2d", "level1/62_AdaptiveAvgPool2d",
                 "level1/63_MaxPool1d", "level2/14_Conv3dReLUAvgPool", "level2/17_Conv1dGeluMaxPool"]


@pytest.mark.parametrize("problem_id", POOL_PROBLEMS)
def test_bundled_sizes_match_the_model_and_report_time(problem_id):
    """The problems at their real sizes (the launch shapes planned for them: vec 4, the warp layout for
    level1/62's 32 x 32 windows): the plan with our pool kernel computes what Model computes; the kernel
    and ATen's execution of the same group are timed and printed with the bandwidth each achieves."""
    problem = load_problem(problem_id)
    plan = plan_fusion(capture(problem))
    (group,) = [g for g in plan.groups if g.family == "pool"]
    kernel = render_group(group)
    module = build_extension(assemble([kernel])).module
    call = getattr(module, kernel.name)
    model = problem.build_model(0, DEVICE)
    inputs = problem.inputs(0, DEVICE)

    def run_group(g, values):
        return call(list(values)) if g is group else run_group_with_aten(g, values, DEVICE)

    with torch.no_grad():
        (ours,), _, values = execute_plan(plan, inputs, model, DEVICE, run_group)
        want = model(*inputs)
        torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-5)
        args = [values[id(i)] for i in group.inputs]
        kernel_ms = time_ms(lambda: call(args))
        aten_ms = time_ms(lambda: run_group_with_aten(group, args, DEVICE))
    moved = (sum(a.numel() for a in args) + group.outputs[0].numel) * 4 / 1e9
    spec = group.config[0]
    print(f"\n{problem_id} [{' → '.join(n.op for n in group.nodes)}; {spec.layout}, vec {spec.vec}]: "
          f"kernel {kernel_ms:.3f} ms ({moved / kernel_ms * 1e3:.0f} GB/s), "
          f"ATen {aten_ms:.3f} ms ({moved / aten_ms * 1e3:.0f} GB/s), {aten_ms / kernel_ms:.2f}x")
