"""Shape/dtype inference and attribute normalization of the op table, and the ATen source it emits."""

from __future__ import annotations

import math

import pytest
import torch

from kernelwright.ir.ops import (
    CATEGORIES,
    OPS,
    aten_source,
    category,
    const_node,
    input_node,
    literal,
    make_node,
    param_node,
)


def x_of(*shape: int, dtype: torch.dtype = torch.float32, index: int = 0):
    return input_node(f"x{index}", index, shape, dtype)


def test_every_op_has_a_known_category():
    assert all(op.category in CATEGORIES for op in OPS.values())
    assert category("softmax") == "softmax" and category("input") == "other"


@pytest.mark.parametrize(
    ("a", "b", "shape"),
    [((4, 1, 3), (5, 1), (4, 5, 3)), ((3,), (2, 3), (2, 3)), ((), (2, 2), (2, 2)), ((1,), (1,), (1,))],
)
def test_pointwise_broadcasting(a, b, shape):
    assert make_node("add", [x_of(*a), x_of(*b, index=1)]).shape == shape


def test_pointwise_dtype_promotion_follows_torch():
    ints = x_of(4, dtype=torch.int64)
    assert make_node("mul", [ints, const_node(2.5)]).dtype == torch.float32  # Python float: default dtype
    assert make_node("mul", [ints, const_node(2)]).dtype == torch.int64
    assert make_node("add", [x_of(4), x_of(dtype=torch.float64, index=1)]).dtype == torch.float32  # 0-d
    assert make_node("lt", [x_of(4), const_node(0.0)]).dtype == torch.bool
    assert make_node("sub", [const_node(1.0), x_of(4)]).shape == (4,)  # a const on the left works
    assert make_node("exp", [ints]).dtype == torch.float32


def test_where_broadcasts_all_three():
    cond = x_of(4, 1, dtype=torch.bool)
    node = make_node("where", [cond, x_of(1, 5, index=1), const_node(0.0)])
    assert node.shape == (4, 5) and node.dtype == torch.float32


def test_reductions_keepdim_negative_dims_and_all_dims():
    x = x_of(2, 3, 4)
    node = make_node("sum", [x], dims=-1, keepdim=True)
    assert node.attr("dims") == (2,) and node.shape == (2, 3, 1)
    node = make_node("mean", [x], dims=(-1, 0))
    assert node.attr("dims") == (0, 2) and node.shape == (3,)
    assert make_node("amax", [x], dims=None).shape == ()
    assert make_node("var", [x], dims=(1,), correction=1, keepdim=False).shape == (2, 4)
    arg = make_node("argmax", [x], dim=-2, keepdim=True)
    assert arg.attr("dim") == 1 and arg.shape == (2, 1, 4) and arg.dtype == torch.int64
    assert make_node("argmin", [x]).shape == ()  # dim=None: over the flattened tensor
    assert make_node("prod", [x], dims=(0, 2), keepdim=True).shape == (1, 3, 1)


def test_softmax_scan_and_norm_dims_are_normalized():
    x = x_of(2, 3, 4)
    assert make_node("softmax", [x], dim=-1).attr("dim") == 2
    assert make_node("cumsum", [x], dim=-3).attr("dim") == 0
    weight = param_node("ln.weight", (4,))
    norm = make_node(
        "layer_norm",
        [x, weight],
        normalized_ndim=1,
        normalized_shape=(4,),
        eps=1e-5,
        has_weight=True,
        has_bias=False,
    )
    assert norm.shape == (2, 3, 4)


def test_norm_channel_dim_is_the_pytorch_norm_with_that_dim_as_dim_1():
    """`channel_dim` (set by the layout pass) means the op on the view with that dim moved to position 1;
    1 is PyTorch's own meaning and is not stored, so unmoved norms keep their attributes."""
    from kernelwright.ir.interpret import run_node

    x = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    weight, bias = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    nchw = x.permute(0, 3, 1, 2)
    leaves = [x_of(2, 5, 3, 8), param_node("w", (8,)), param_node("b", (8,))]
    group = make_node("group_norm", leaves, groups=4, eps=1e-5, has_weight=True, has_bias=True,
                      channel_dim=-1)
    batch = make_node("batch_norm", leaves, training=True, momentum=0.1, eps=1e-5, has_weight=True,
                      has_bias=True, has_running=False, channel_dim=3)
    assert group.attr("channel_dim") == 3 and group.shape == batch.shape == (2, 5, 3, 8)
    want = torch.nn.functional.group_norm(nchw, 4, weight, bias, 1e-5).permute(0, 2, 3, 1)
    torch.testing.assert_close(run_node(group, [x, weight, bias]), want)
    want = torch.nn.functional.batch_norm(nchw, None, None, weight, bias, training=True).permute(0, 2, 3, 1)
    torch.testing.assert_close(run_node(batch, [x, weight, bias]), want)
    # the batch dim may be BatchNorm's channels ([C, N] data); never GroupNorm's
    first = make_node("batch_norm", [x_of(8, 5)], training=True, momentum=0.1, eps=1e-5, has_weight=False,
                      has_bias=False, has_running=False, channel_dim=0)
    values = torch.randn(8, 5, dtype=torch.float64)
    torch.testing.assert_close(run_node(first, [values]),
                               torch.nn.functional.batch_norm(values.t(), None, None, training=True).t())
    with pytest.raises(ValueError, match="channel_dim"):
        make_node("group_norm", [x_of(8, 5)], groups=1, eps=1e-5, has_weight=False, has_bias=False,
                  channel_dim=0)
    unmoved = make_node("group_norm", [x_of(2, 8, 3)], groups=4, eps=1e-5, has_weight=False, has_bias=False,
                        channel_dim=1)
    assert "channel_dim" not in unmoved.attr_dict
    assert "movedim" not in aten_source("group_norm", ["x"], unmoved.attrs)


def test_views_permutes_and_expand():
    x = x_of(2, 3, 4)
    reshaped = make_node("reshape", [x], shape=(-1, 4))
    assert reshaped.shape == (6, 4) and reshaped.attr("shape") == (6, 4)  # -1 made concrete
    permuted = make_node("permute", [x], dims=(-1, 0, 1))
    assert permuted.attr("dims") == (2, 0, 1) and permuted.shape == (4, 2, 3)
    expanded = make_node("expand", [x_of(3, 1)], shape=(2, -1, 5))
    assert expanded.shape == (2, 3, 5) and expanded.attr("shape") == (2, 3, 5)
    assert make_node("flip", [x], dims=(-1, 0)).attr("dims") == (0, 2)
    assert make_node("cat", [x, x_of(2, 3, 1, index=1)], dim=-1).shape == (2, 3, 5)


def test_slicing_and_select():
    x = x_of(10, 6)
    node = make_node("slice", [x], dim=-2, start=-4, end=None, step=2)
    assert (node.attr("dim"), node.attr("start"), node.attr("end"), node.attr("step")) == (0, 6, 10, 2)
    assert node.shape == (2, 6)
    assert make_node("slice", [x], dim=1, start=2, end=100).shape == (10, 4)  # end clamped
    assert make_node("slice", [x], dim=1, start=5, end=2).shape == (10, 0)
    select = make_node("select", [x], dim=-1, index=-1)
    assert (select.attr("dim"), select.attr("index"), select.shape) == (1, 5, (10,))
    with pytest.raises(ValueError):
        make_node("sum", [x], dims=2)


def test_matmul_conv_and_pool_shapes():
    assert make_node("mm", [x_of(3, 4), x_of(4, 5, index=1)]).shape == (3, 5)
    assert make_node("bmm", [x_of(2, 3, 4), x_of(2, 4, 5, index=1)]).shape == (2, 3, 5)
    linear = make_node(
        "linear", [x_of(2, 7, 4), param_node("w", (5, 4)), param_node("b", (5,))], has_bias=True
    )
    assert linear.shape == (2, 7, 5)
    conv = make_node(
        "conv",
        [x_of(1, 3, 9, 9), param_node("w", (8, 3, 3, 3))],
        stride=(2, 2),
        padding=(1, 1),
        dilation=(1, 1),
        transposed=False,
        output_padding=(0, 0),
        groups=1,
        has_bias=False,
    )
    assert conv.shape == (1, 8, 5, 5)
    pool = make_node(
        "max_pool",
        [x_of(1, 3, 9, 9)],
        kernel=(2, 2),
        stride=(2, 2),
        padding=(0, 0),
        dilation=(1, 1),
        ceil_mode=True,
    )
    assert pool.shape == (1, 3, 5, 5)


def test_factories_and_fallbacks():
    assert make_node("full", shape=(2, 3), value=1.5, dtype=torch.float32).shape == (2, 3)
    arange = make_node("arange", start=0, end=7, step=2, dtype=torch.int64)
    assert arange.shape == (4,) and arange.dtype == torch.int64
    index = make_node("full", shape=(4, 1), value=0, dtype=torch.int64)
    gather = make_node(
        "aten_fallback",
        [x_of(4, 6), index],
        target="aten.gather.default",
        args=(("$in", 0), 1, ("$in", 1)),
        kwargs=(),
    )
    assert gather.shape == (4, 1)
    assert (
        aten_source("aten_fallback", ["x", "idx"], gather.attrs) == "torch.ops.aten.gather.default(x, 1, idx)"
    )


def test_aten_source_is_plain_torch():
    softmax = make_node("softmax", [x_of(4, 8)], dim=-1)
    assert aten_source("softmax", ["x"], softmax.attrs) == "torch.softmax(x, dim=1)"
    clamp = make_node("clamp", [x_of(3)], min=float("-inf"), max=6.0)
    assert aten_source("clamp", ["x"], clamp.attrs) == "torch.clamp(x, float('-inf'), 6.0)"
    assert aten_source("cast", ["x"], {"dtype": torch.float16}) == "x.to(torch.float16)"


@pytest.mark.parametrize("value", [1.5, float("inf"), -float("inf"), None, True, (1, 2), (3,), torch.int64])
def test_literals_evaluate_back(value):
    assert eval(literal(value), {"torch": torch}) == value  # noqa: S307


def test_literal_nan():
    assert math.isnan(eval(literal(float("nan")))) and literal(()) == "()"  # noqa: S307


def test_unknown_op_is_an_error():
    with pytest.raises(ValueError, match="unknown IR op"):
        make_node("frobnicate", [x_of(2)])
