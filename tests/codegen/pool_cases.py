"""Hand-built IR graphs for the pool family, shared by the matcher tests, the nvcc tests (compile-only and
the host run of the generated code) and the GPU tests: 1d/2d/3d, odd sizes, every window attribute, both
launch layouts, prologues and epilogues. `random_inputs` makes a case's tensors."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import const_node, input_node, make_node, param_node


def _spatial(value, n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def max_pool(x: Node, n: int, kernel, stride=None, padding=0, dilation=1, ceil_mode=False) -> Node:
    kernel = _spatial(kernel, n)
    return make_node("max_pool", [x], kernel=kernel, stride=_spatial(stride, n) if stride else kernel,
                     padding=_spatial(padding, n), dilation=_spatial(dilation, n), ceil_mode=ceil_mode)


def avg_pool(x: Node, n: int, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None) -> Node:
    kernel = _spatial(kernel, n)
    return make_node("avg_pool", [x], kernel=kernel, stride=_spatial(stride, n) if stride else kernel,
                     padding=_spatial(padding, n), ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                     divisor_override=divisor_override)


def adaptive(kind: str, x: Node, size: tuple[int, ...]) -> Node:
    return make_node(f"adaptive_{kind}_pool", [x], output_size=size)


def _one(shape: tuple[int, ...], pool: Callable[[Node], Node]) -> Callable[[], Graph]:
    def build() -> Graph:
        x = input_node("x", 0, shape)
        return Graph((x,), (), (pool(x),))

    return build


def relu_max_pool() -> Graph:
    """level3/04: conv (ATen) → relu → max_pool 2x2."""
    x = input_node("x", 0, (2, 5, 12, 10))
    return Graph((x,), (), (max_pool(make_node("relu", [x]), 2, 2),))


def bias_scale_relu_max_pool() -> Graph:
    """A per-channel bias, scales (one per column) and relu before a padded max pool: padding is -inf
    after them. 16 columns: read 4 at a time, the bias broadcast along them."""
    x = input_node("x", 0, (2, 3, 11, 16))
    bias, columns = param_node("bias", (3, 1, 1)), param_node("columns", (16,))
    y = make_node("mul", [make_node("mul", [make_node("add", [x, bias]), const_node(0.5)]), columns])
    return Graph((x,), (bias, columns), (max_pool(make_node("relu", [y]), 2, 3, 2, 1),))


def negate_avg_pool_padded() -> Graph:
    """A prologue that turns every value negative before a zero-padded average (padding stays 0)."""
    x = input_node("x", 0, (1, 2, 9, 8))
    y = make_node("sub", [make_node("neg", [make_node("abs", [x])]), const_node(1.0)])
    return Graph((x,), (), (avg_pool(y, 2, 3, 2, 1, count_include_pad=True),))


def gelu_max_pool1d_unsqueezed() -> Graph:
    """level2/17: gelu → unsqueeze (a reshape) → 2d max pool (1, 2) → squeeze, as max_pool1d is captured."""
    x = input_node("x", 0, (2, 4, 24))
    y = make_node("reshape", [make_node("gelu", [x], approximate="none")], shape=(2, 4, 1, 24))
    pooled = max_pool(y, 2, (1, 2), (1, 2), 0)
    return Graph((x,), (), (make_node("reshape", [pooled], shape=(2, 4, 12)),))


def two_inputs_avg_pool() -> Graph:
    x, y = input_node("x", 0, (2, 3, 10, 7)), input_node("y", 1, (2, 3, 10, 7))
    return Graph((x, y), (), (avg_pool(make_node("add", [x, y]), 2, 3, 1, 1),))


def avg_pool_epilogue() -> Graph:
    """avg pool → * 2 → + bias[C, 1, 1] → sigmoid, all in the kernel."""
    x = input_node("x", 0, (2, 3, 12, 13))
    bias = param_node("bias", (3, 1, 1))
    y = make_node("mul", [avg_pool(x, 2, 2, 2), const_node(2.0)])
    y = make_node("sigmoid", [make_node("add", [y, bias])])
    return Graph((x,), (bias,), (y,))


def max_pool1d_squeezed_epilogue() -> Graph:
    """2d pool on an unsqueezed 1d input → squeeze → tanh (the epilogue crosses the reshape)."""
    x = input_node("x", 0, (3, 2, 1, 21))
    pooled = max_pool(x, 2, (1, 3), (1, 2), (0, 1))
    return Graph((x,), (), (make_node("tanh", [make_node("reshape", [pooled], shape=(3, 2, 11))]),))


def residual_epilogue() -> Graph:
    """max pool + a residual of the output's shape, times a per-sample scale [N, 1, 1, 1]."""
    x, r = input_node("x", 0, (2, 3, 14, 16)), input_node("r", 1, (2, 3, 7, 8))
    s = param_node("s", (2, 1, 1, 1))
    return Graph((x, r), (s,), (make_node("mul", [make_node("add", [max_pool(x, 2, 2), r]), s]),))


def prologue_and_epilogue_3d() -> Graph:
    """level2/14's relu → 3d average pool, then an epilogue with a per-width operand."""
    x = input_node("x", 0, (1, 3, 6, 7, 8))
    w = param_node("scale", (4,))
    pooled = avg_pool(make_node("relu", [x]), 3, 2, 2)
    return Graph((x,), (w,), (make_node("mul", [pooled, w]),))


CASES: dict[str, Callable[[], Graph]] = {
    # fixed windows, thread layout
    "max2d_k3_s2_p1": _one((2, 3, 11, 13), lambda x: max_pool(x, 2, 3, 2, 1)),
    "max2d_ceil": _one((2, 3, 10, 9), lambda x: max_pool(x, 2, 3, 2, 1, ceil_mode=True)),
    "max2d_k3_s2_p1_vec4": _one((2, 3, 15, 16), lambda x: max_pool(x, 2, 3, 2, 1)),
    "max2d_dilated": _one((1, 2, 13, 17), lambda x: max_pool(x, 2, 3, 1, 1, dilation=2)),
    "max2d_asymmetric": _one((2, 2, 15, 16), lambda x: max_pool(x, 2, (2, 5), (3, 1), (1, 2), (2, 1), True)),
    "max2d_k1_s3": _one((2, 3, 10, 11), lambda x: max_pool(x, 2, 1, 3)),
    "max2d_unbatched": _one((3, 11, 13), lambda x: max_pool(x, 2, 3, 2, 1)),
    "max1d_k5_s2_p2": _one((2, 3, 37), lambda x: max_pool(x, 1, 5, 2, 2)),
    "max1d_batch1_ceil": _one((1, 1, 22), lambda x: max_pool(x, 1, 4, 3, 1, ceil_mode=True)),
    "max3d_ceil": _one((2, 2, 5, 7, 9), lambda x: max_pool(x, 3, 3, 2, 1, ceil_mode=True)),
    "avg2d_k3_s1_p1": _one((2, 3, 9, 11), lambda x: avg_pool(x, 2, 3, 1, 1)),
    "avg2d_k3_s1_p1_vec4": _one((2, 3, 9, 12), lambda x: avg_pool(x, 2, 3, 1, 1)),
    "avg2d_ceil_vec2": _one((1, 2, 11, 10), lambda x: avg_pool(x, 2, 3, 2, 1, True, False)),
    "avg2d_no_pad_count_ceil": _one((2, 3, 10, 9), lambda x: avg_pool(x, 2, 3, 2, 1, True, False)),
    "avg2d_pad_count_ceil": _one((2, 3, 10, 9), lambda x: avg_pool(x, 2, 3, 2, 1, True, True)),
    "avg2d_divisor": _one((1, 2, 7, 8), lambda x: avg_pool(x, 2, 2, 2, 1, divisor_override=5)),
    "avg2d_k5_s3_ceil": _one((2, 2, 17, 14), lambda x: avg_pool(x, 2, 5, 3, 2, True, False)),
    "avg1d_k4_s3": _one((3, 2, 23), lambda x: avg_pool(x, 1, 4, 3, 2, True, False)),
    "avg3d_mixed": _one((1, 2, 6, 7, 8), lambda x: avg_pool(x, 3, (2, 3, 2), (2, 1, 2), (1, 1, 0), True)),
    "avg3d_divisor": _one((2, 1, 5, 6, 7), lambda x: avg_pool(x, 3, 3, 2, 1, divisor_override=7)),
    # adaptive windows
    "adaptive_avg2d": _one((2, 3, 17, 13), lambda x: adaptive("avg", x, (7, 5))),
    "adaptive_max2d": _one((2, 3, 17, 13), lambda x: adaptive("max", x, (4, 6))),
    "adaptive_avg1d": _one((2, 3, 29), lambda x: adaptive("avg", x, (6,))),
    "adaptive_max1d_upsample": _one((1, 2, 5), lambda x: adaptive("max", x, (8,))),
    "adaptive_avg3d": _one((1, 2, 7, 9, 5), lambda x: adaptive("avg", x, (3, 4, 2))),
    "adaptive_max3d": _one((2, 1, 6, 5, 7), lambda x: adaptive("max", x, (4, 3, 3))),
    # large windows: the warp layout
    "adaptive_avg2d_warp": _one((2, 3, 67, 61), lambda x: adaptive("avg", x, (2, 3))),
    "adaptive_max2d_warp": _one((1, 2, 64, 70), lambda x: adaptive("max", x, (3, 2))),
    "max2d_warp": _one((2, 2, 40, 41), lambda x: max_pool(x, 2, 12, 8, 4, ceil_mode=True)),
    "avg2d_warp_no_pad_count": _one((1, 3, 30, 31), lambda x: avg_pool(x, 2, (12, 11), (5, 4), (3, 2), True,
                                                                       False)),
    "max3d_warp_dilated": _one((1, 2, 14, 15, 16), lambda x: max_pool(x, 3, (5, 6, 5), 3, 2, dilation=2)),
    # prologue and epilogue
    "relu_max_pool": relu_max_pool,
    "bias_scale_relu_max_pool": bias_scale_relu_max_pool,
    "negate_avg_pool_padded": negate_avg_pool_padded,
    "gelu_max_pool1d_unsqueezed": gelu_max_pool1d_unsqueezed,
    "two_inputs_avg_pool": two_inputs_avg_pool,
    "avg_pool_epilogue": avg_pool_epilogue,
    "max_pool1d_squeezed_epilogue": max_pool1d_squeezed_epilogue,
    "residual_epilogue": residual_epilogue,
    "prologue_and_epilogue_3d": prologue_and_epilogue_3d,
}


def random_inputs(graph: Graph, seed: int = 0, device: str | torch.device = "cpu"
                  ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)

    def make(node: Node) -> torch.Tensor:
        return torch.randn(node.shape, generator=generator, dtype=torch.float32).to(device)

    return [make(n) for n in graph.inputs], {p.name: make(p) for p in graph.params}


def with_rows(group, rows: int = 3):
    """A thread-layout pool group whose windows overlap along H, given `rows` output rows per thread (the
    planner gives 4 where the work still fills the GPU, which these small cases never do; 3 leaves a
    partial last tile), or None for other groups: the form the host run and the GPU tests also check."""
    import dataclasses

    spec = group.config[0] if group.family == "pool" and group.config else None
    if spec is None or spec.layout != "thread" or spec.adaptive or spec.dilation[1] != 1 \
            or spec.stride[1] >= spec.kernel[1] or spec.out_size[1] < 2:
        return None
    return dataclasses.replace(group, config=(dataclasses.replace(spec, rows=rows),))
