"""Issue 18 #6 and #7 on the GPU, with one emitted file (`problems/weights_and_streams.py`, one extension):
ModelNew equals Model after every way of changing its parameters (`update_paths.py`), including writes
through `param.data` that no version counter sees, for both caches an emitted file could keep (the 3xTF32
weight split in C++, derived weights in Python); the same ModelNew run on two streams at once is right
on both; and a printed timing of the 3xTF32 split's fingerprint check against the split itself.

Run with `-s` to see the timing."""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch
from side_streams import alternate_on_side_streams
from test_emit import GPU_PROBLEM as PROBLEM
from test_emit import emitted as emit_file
from update_paths import UPDATES

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """(problem, plan, kernel sources, the emitted module): importing it builds the extension.
    `test_emit.py::test_the_gpu_problem_covers_every_kind_of_state` checks the plan on the CPU."""
    problem, plan, kernels, source = emit_file(PROBLEM, rewrite=True)
    path = tmp_path_factory.mktemp("emitted") / "weights_and_streams_new.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("weights_and_streams_new", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._kw_ext is not None
    return problem, plan, kernels, module


def models(problem, module):
    return problem.build_model(0, "cuda"), problem.build_model(0, "cuda", model_class=module.ModelNew)


def assert_outputs_close(got, want, msg: str) -> None:
    names = ["probabilities", "scaled", "loss", "gated", "big"]
    for name, g, w in zip(names, got, want, strict=True):
        atol = 1e-4 * max(1.0, w.abs().max().item())
        torch.testing.assert_close(g, w, rtol=1e-4, atol=atol, msg=lambda m, n=name: f"{msg}, {n}: {m}")


def test_every_update_path_is_seen(emitted):
    problem, _, _, module = emitted
    model, new = models(problem, module)
    inputs = problem.inputs(1, "cuda")

    def check(msg: str) -> None:
        with torch.no_grad():
            for call in ("first call", "second call"):     # the second reads whatever the first kept
                assert_outputs_close(new(*inputs), model(*inputs), f"{msg} ({call})")

    check("before any update")
    for seed, (how, update) in enumerate(UPDATES.items(), start=1):
        update(model, 100 * seed)
        update(new, 100 * seed)
        check(f"after {how}")


def test_the_same_model_new_on_two_streams_at_once(emitted):
    """Different inputs on two side streams, launched alternately without waiting: every output right."""
    problem, _, _, module = emitted
    model, new = models(problem, module)
    batches = [problem.inputs(seed, "cuda") for seed in (1, 2)]
    with torch.no_grad():
        expected = [model(*inputs) for inputs in batches]
        new(*batches[0])            # the weight splits are made on the default stream, then shared
        results = alternate_on_side_streams([lambda b=b: new(*b) for b in batches], rounds=6)
    for k in range(2):
        for i, got in enumerate(results[k]):
            assert_outputs_close(got, expected[k], f"stream {k}, call {i}")


def test_split_row_reduction_alone_on_two_streams(emitted):
    """The split-row kernel called directly, many short launches per stream: they overlap, and each keeps
    its own partials and counters."""
    _, plan, kernels, module = emitted
    (name,) = [k.name for g, k in zip(plan.groups, kernels, strict=True)
               if g.family == "reduction" and g.config[0].split]
    kernel = getattr(module._kw_ext, name)
    generator = torch.Generator(device="cuda").manual_seed(5)
    ys = [torch.randn(4194304, device="cuda", generator=generator) * (k + 1) for k in range(2)]
    want = [((y.double() - 0.25) ** 2).mean().float() for y in ys]
    results = alternate_on_side_streams([lambda y=y: kernel([y])[0] for y in ys], rounds=200)
    for k in range(2):
        got = torch.stack(results[k])
        assert torch.equal(got, got[0].expand_as(got)), f"stream {k}: results vary from launch to launch"
        torch.testing.assert_close(got[0], want[k], rtol=1e-5, atol=0)


def test_timing_of_the_fingerprint_check_against_the_split(emitted):
    """Not an assertion: prints the 3xTF32 split kernel's time on the 8192x8192 weight when its values are
    unchanged (the fingerprint check: one read) and when every tile changed (check and split), beside the
    split of the activation and the whole forward."""
    problem, _, _, module = emitted
    _, new = models(problem, module)
    inputs = problem.inputs(1, "cuda")

    def after_a_change():
        new.big.weight.data.mul_(-1.0)     # every tile of the big weight changes
        new(*inputs)

    with torch.no_grad():
        new(*inputs)
        unchanged = _kernel_times(lambda: new(*inputs))
        changed = _kernel_times(after_a_change)
    weight = new.big.weight
    megabytes = weight.numel() * 4 / 1e6
    check = max(t for n, t in unchanged if _split(n, fingerprints=True))
    resplit = max(t for n, t in changed if _split(n, fingerprints=True))
    activation = max(t for n, t in unchanged if _split(n, fingerprints=False))
    total = sum(t for _, t in unchanged)
    device = torch.cuda.get_device_name()
    print(f"\n3xTF32 weight {tuple(weight.shape)} ({megabytes:.0f} MB), per call, {device}:"
          f"\n  fingerprint check, unchanged: {check * 1e3:8.1f} us ({megabytes / check:.0f} GB/s read)"
          f"\n  check + split, all changed:   {resplit * 1e3:8.1f} us "
          f"({4 * megabytes / resplit:.0f} GB/s read + written)"
          f"\n  activation split {tuple(inputs[3].shape)}: {activation * 1e3:8.1f} us"
          f"\n  every kernel of the forward:  {total * 1e3:8.1f} us")


def _split(kernel_name: str, fingerprints: bool) -> bool:
    found = re.search(r"split_kernel<\d+, (true|false)", kernel_name)
    return found is not None and (found[1] == "true") == fingerprints


def _kernel_times(call, repeats: int = 5) -> list[tuple[str, float]]:
    """(kernel name, milliseconds) of one call, each the median over `repeats` profiled calls."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    runs = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA),
                         key=lambda e: e.time_range.start)
        runs.append([(e.name, e.time_range.elapsed_us() / 1e3) for e in kernels])
    runs = [r for r in runs if len(r) == len(runs[0])]
    return [(runs[0][i][0], sorted(r[i][1] for r in runs)[len(runs) // 2]) for i in range(len(runs[0]))]
