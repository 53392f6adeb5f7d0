"""The GEMM matcher on hand-built graphs: anchors, absorbed transposes, epilogue growth and its limits,
operand broadcast kinds, and the shape rules that pick a kernel variant."""

from __future__ import annotations

from pathlib import Path

import pytest

import kernelwright.fuse.gemm as fuse_gemm
from kernelwright.fuse import plan_fusion
from kernelwright.fuse.gemm import (
    BIG_TILE,
    SMALL_TILE,
    GemmConfig,
    describe,
    match,
    split_k_factor,
    tile_config,
)
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import const_node, input_node, make_node, param_node


@pytest.fixture(autouse=True)
def cutlass_headers(monkeypatch):
    """Matching does not read the headers, only asks whether they exist."""
    monkeypatch.setattr(fuse_gemm, "cutlass_include_dir", lambda: Path("/cutlass/include"))


def single_group(graph: Graph) -> FusedGroup:
    groups = match(graph, frozenset())
    assert len(groups) == 1
    return groups[0]


def ops(group: FusedGroup) -> list[str]:
    return [n.op for n in group.nodes]


def test_linear_bias_activation_chain_is_one_group():
    x = input_node("x", 0, (1024, 512))
    w, b = param_node("fc.weight", (256, 512)), param_node("fc.bias", (256,))
    scale = param_node("scale", (1024, 1))
    activated = make_node("gelu", [make_node("linear", [x, w, b])], approximate="none")
    y = make_node("clamp", [make_node("mul", [activated, scale])], min=-1.0, max=1.0)
    group = single_group(Graph(inputs=(x,), params=(w, b, scale), outputs=(y,)))
    assert ops(group) == ["linear", "gelu", "mul", "clamp"]
    assert [n.name for n in group.inputs] == ["x", "fc.weight", "fc.bias", "scale"]
    assert group.outputs == (y,)
    view = describe(group)
    assert (view.m, view.n, view.k, view.batch) == (1024, 256, 512, 1)
    assert not view.a_col_major and view.b_col_major
    assert [(o.node.name, o.kind) for o in view.operands] == [("fc.bias", "row"), ("scale", "col")]


def test_rank3_linear_flattens_rows():
    x = input_node("x", 0, (8, 64, 128))
    w = param_node("w", (96, 128))
    residual = input_node("r", 1, (8, 64, 96))
    y = make_node("add", [make_node("linear", [x, w]), residual])
    view = describe(single_group(Graph(inputs=(x, residual), params=(w,), outputs=(y,))))
    assert (view.m, view.n, view.k) == (512, 96, 128)
    assert [(o.kind, o.extents) for o in view.operands] == [("full", (1, 512, 96))]


def test_rank3_linear_stops_before_an_operand_broadcast_inside_the_row_dims():
    x = input_node("x", 0, (8, 64, 128))
    w = param_node("w", (96, 128))
    per_position = param_node("pos", (64, 96))      # broadcast over dim 0 but not dim 1 of the rows
    lin = make_node("linear", [x, w])
    y = make_node("add", [lin, per_position])
    assert ops(single_group(Graph(inputs=(x,), params=(w, per_position), outputs=(y,)))) == ["linear"]


def test_transposes_of_operands_become_layouts():
    a, b = input_node("a", 0, (300, 200)), input_node("b", 1, (100, 300))
    at, bt = make_node("permute", [a], dims=(1, 0)), make_node("permute", [b], dims=(1, 0))
    y = make_node("mm", [at, bt])
    group = single_group(Graph(inputs=(a, b), params=(), outputs=(y,)))
    assert ops(group) == ["permute", "permute", "mm"]
    view = describe(group)
    assert view.a is a and view.b is b and view.a_col_major and view.b_col_major
    assert (view.m, view.n, view.k) == (200, 100, 300)


def test_transpose_read_elsewhere_is_not_absorbed():
    a, b = input_node("a", 0, (300, 200)), input_node("b", 1, (300, 100))
    at = make_node("permute", [a], dims=(1, 0))
    y = make_node("mm", [at, b])
    group = single_group(Graph(inputs=(a, b), params=(), outputs=(y, at), output_kind="tuple"))
    assert ops(group) == ["mm"]
    assert not describe(group).a_col_major


def test_batched_transpose_and_per_batch_operands():
    a, b = input_node("a", 0, (4, 64, 96)), input_node("b", 1, (4, 80, 96))
    bias = input_node("bias", 2, (4, 1, 80))
    gate = input_node("gate", 3, (64, 1))
    y = make_node("bmm", [a, make_node("permute", [b], dims=(0, 2, 1))])
    y = make_node("mul", [make_node("add", [y, bias]), gate])
    view = describe(single_group(Graph(inputs=(a, b, bias, gate), params=(), outputs=(y,))))
    assert view.b_col_major and view.batch == 4
    assert [(o.kind, o.extents) for o in view.operands] == [("row", (4, 1, 80)), ("col", (1, 64, 1))]


def test_epilogue_keeps_one_output():
    a, b = input_node("a", 0, (256, 256)), input_node("b", 1, (256, 256))
    hidden = make_node("relu", [make_node("mm", [a, b])])
    doubled = make_node("mul", [hidden, const_node(2.0)])
    group = single_group(Graph(inputs=(a, b), params=(), outputs=(hidden, doubled), output_kind="tuple"))
    assert ops(group) == ["mm", "relu"]
    assert group.outputs[0].op == "relu"


def test_dag_epilogue_silu_written_out():
    a, b = input_node("a", 0, (256, 256)), input_node("b", 1, (256, 256))
    y = make_node("mm", [a, b])
    out = make_node("mul", [y, make_node("sigmoid", [y])])
    assert ops(single_group(Graph(inputs=(a, b), params=(), outputs=(out,)))) == ["mm", "sigmoid", "mul"]


def test_value_derived_from_the_product_outside_the_epilogue_is_not_an_operand():
    a, b = input_node("a", 0, (256, 256)), input_node("b", 1, (256, 256))
    y = make_node("mm", [a, b])
    total = make_node("sum", [y], dims=(1,), keepdim=True)
    out = make_node("sub", [y, total])
    assert ops(single_group(Graph(inputs=(a, b), params=(), outputs=(out,)))) == ["mm"]


def test_addmm_bias_and_scalars():
    bias, a, b = param_node("bias", (1, 512)), input_node("a", 0, (512, 128)), input_node("b", 1, (128, 512))
    y = make_node("addmm", [bias, a, b], beta=0.5, alpha=2.0)
    view = describe(single_group(Graph(inputs=(a, b), params=(bias,), outputs=(y,))))
    assert [(o.node.name, o.kind) for o in view.operands] == [("bias", "row")]


def test_tiny_and_half_precision_products_stay_aten():
    a, b = input_node("a", 0, (16, 16)), input_node("b", 1, (16, 16))
    assert match(Graph(inputs=(a, b), params=(), outputs=(make_node("mm", [a, b]),)), frozenset()) == []
    import torch

    ah, bh = input_node("a", 0, (512, 512), torch.float16), input_node("b", 1, (512, 512), torch.float16)
    assert match(Graph(inputs=(ah, bh), params=(), outputs=(make_node("mm", [ah, bh]),)), frozenset()) == []


def test_softmax_after_linear_gelu_is_left_to_its_family():
    x, w, b = input_node("x", 0, (1024, 8192)), param_node("w", (8192, 8192)), param_node("b", (8192,))
    y = make_node("softmax", [make_node("gelu", [make_node("linear", [x, w, b])], approximate="none")], dim=1)
    plan = plan_fusion(Graph(inputs=(x,), params=(w, b), outputs=(y,)))
    gemm_groups = [g for g in plan.groups if g.family == "gemm"]
    assert len(gemm_groups) == 1 and ops(gemm_groups[0]) == ["linear", "gelu"]


@pytest.mark.parametrize(("m", "n", "k", "batch", "expected"), [
    # large in every dim: 3xTF32 on cuBLAS, the big x big terms in runs of at most 1024
    (4096, 4096, 4096, 1, GemmConfig(kernel="tf32x3", split_k=4)),
    (1024, 8192, 8192, 1, GemmConfig(kernel="tf32x3", split_k=8)),
    (512, 512, 512, 16, GemmConfig(kernel="tf32x3", split_k=1)),
    # many tiles but a short K, or a narrow N: CUTLASS
    (4096, 4096, 256, 1, GemmConfig(block=(128, 64, 16), warp=(64, 32, 16), stages=3, swizzle="identity")),
    (16384, 256, 4096, 1, GemmConfig(block=(128, 64, 16), warp=(64, 32, 16), stages=3, swizzle="identity")),
    (128, 4096, 4096, 1, GemmConfig(block=(64, 64, 16), warp=(32, 32, 16), stages=4, swizzle="streamk",
                                    split_k=2)),
    (256, 512, 64, 1, GemmConfig(block=(64, 64, 16), warp=(32, 32, 16), stages=4, swizzle="identity")),
])
def test_shape_rules(m, n, k, batch, expected):
    shape_a, shape_b = ((batch, m, k), (batch, k, n)) if batch > 1 else ((m, k), (k, n))
    a, b = input_node("a", 0, shape_a), input_node("b", 1, shape_b)
    y = make_node("bmm" if batch > 1 else "mm", [a, b])
    assert single_group(Graph(inputs=(a, b), params=(), outputs=(y,))).config == expected


@pytest.mark.parametrize(("m", "n", "k", "batch", "expected"), [
    # many tiles: 128x64, data-parallel, whatever K
    (1024, 4096, 4096, 1, BIG_TILE),
    (8192, 8192, 8192, 1, BIG_TILE),
    # 256x8192: 256 big tiles (< 2 waves), 512 small ones (> one per SM): small tiles, no split
    (256, 8192, 8192, 1, SMALL_TILE),
    # 128 small tiles: 2 splits of 2048 fill 256 CTAs
    (128, 4096, 4096, 1, SMALL_TILE._replace(swizzle="streamk", split_k=2)),
    # 32 tiles would take 8 splits; K = 1024 allows 4 of 256
    (128, 1024, 1024, 1, SMALL_TILE._replace(swizzle="streamk", split_k=4)),
    # a level2-style Linear, batch 128, 1024 -> 512: 16 tiles, K allows 4
    (128, 512, 1024, 1, SMALL_TILE._replace(swizzle="streamk", split_k=4)),
    # 2 tiles and a long K: capped at MAX_SPLIT_K
    (64, 128, 65536, 1, SMALL_TILE._replace(swizzle="streamk", split_k=16)),
    # K too short to cut, and batched products: no split
    (128, 1024, 511, 1, SMALL_TILE),
    (128, 1024, 4096, 4, SMALL_TILE),
])
def test_tile_rule(m, n, k, batch, expected):
    assert tile_config(m, n, k, batch) == expected


@pytest.mark.parametrize("sm_count", [108, 132, 144])
def test_split_k_keeps_one_wave_of_two_ctas_per_sm_and_a_long_enough_k(sm_count):
    for tiles in range(1, 3 * sm_count):
        for k in (64, 255, 256, 300, 1000, 4096, 8192, 1 << 20):
            split = split_k_factor(tiles, k, sm_count=sm_count)
            assert 1 <= split <= 16
            assert split == 1 or (tiles * split <= 2 * sm_count and k // split >= 256)
            # maximal: one more split would break a bound
            assert tiles * (split + 1) > 2 * sm_count or k // (split + 1) < 256 or split == 16
    assert split_k_factor(8, 8192, batch=2) == 1


def test_alignment_follows_contiguous_extents():
    a, b = input_node("a", 0, (257, 130)), input_node("b", 1, (130, 67))
    config = single_group(Graph(inputs=(a, b), params=(), outputs=(make_node("mm", [a, b]),))).config
    assert (config.align_a, config.align_b, config.align_c) == (2, 1, 1)


def test_matrix_vector_shapes_get_the_gemv_kernel():
    a, v = input_node("a", 0, (4096, 1024)), input_node("v", 1, (1024, 1))
    group = single_group(Graph(inputs=(a, v), params=(), outputs=(make_node("mm", [a, v]),)))
    assert group.config.kernel == "gemv"


def test_without_cutlass_headers_only_matrix_vector_products_are_claimed(monkeypatch):
    monkeypatch.setattr(fuse_gemm, "cutlass_include_dir", lambda: None)
    a, b, v = input_node("a", 0, (512, 512)), input_node("b", 1, (512, 512)), input_node("v", 2, (512, 1))
    graph = Graph(inputs=(a, b, v), params=(), outputs=(make_node("mm", [a, b]), make_node("mm", [a, v])),
                  output_kind="tuple")
    assert [g.config.kernel for g in match(graph, frozenset())] == ["gemv"]


def test_convolution_stays_aten_and_its_epilogue_goes_to_the_pointwise_family():
    x, w, b = input_node("x", 0, (8, 16, 32, 32)), param_node("conv.weight", (32, 16, 3, 3)), param_node(
        "conv.bias", (32,))
    conv = make_node("conv", [x, w, b], stride=(1, 1), padding=(1, 1), dilation=(1, 1), transposed=False,
                     output_padding=(0, 0), groups=1)
    y = make_node("relu", [conv])
    plan = plan_fusion(Graph(inputs=(x,), params=(w, b), outputs=(y,)))
    assert [g.family for g in plan.groups] == ["pointwise"] and ops(plan.groups[0]) == ["relu"]
