"""The channels-last layout pass (rewrite/layout.py): convolutions on NHWC data, permutes pushed down through
pointwise ops, reductions, softmax and BatchNorm/GroupNorm; every result checked by the interpreter against
the original."""

from __future__ import annotations

import pytest
import torch
from rewrite_checks import KINDS, assert_honest, graph_of, leaf_values, p, x_in

from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import aten_source, buffer_node, const_node, make_node
from kernelwright.rewrite.layout import channels_last, has_layout_choice


def conv(x, out_channels: int = 6, bias: bool = True, groups: int = 1, stride: int = 1):
    rank = len(x.shape)
    n = rank - 2
    weight = p("conv.weight", (out_channels, x.shape[1] // groups, *(3,) * n))
    return make_node("conv", [x, weight] + ([p("conv.bias", (out_channels,))] if bias else []),
                     stride=(stride,) * n, padding=(1,) * n, dilation=(1,) * n, transposed=False,
                     output_padding=(0,) * n, groups=groups, has_bias=bias)


def ops_of(graph):
    return [n.op for n in graph.nodes() if not n.is_leaf]


def the_conv(graph):
    return next(n for n in graph.nodes() if n.op == "conv")


def test_conv_bias_relu_runs_channels_last_with_the_bias_as_an_add_before_one_final_permute():
    before = graph_of([make_node("relu", [conv(x_in((2, 4, 7, 5)))])])
    after, _ = channels_last(before)
    c = the_conv(after)
    assert c.attr("channels_last") and not c.attr("has_bias") and c.shape == (2, 7, 5, 6)
    out = after.outputs[0]
    assert out.op == "permute" and out.attr("dims") == (0, 3, 1, 2)
    assert out.inputs[0].op == "relu" and out.inputs[0].inputs[0].op == "add"
    # the weight is re-laid out once: a copy of a permute of the parameter (a derived weight)
    assert c.inputs[1].op == "copy" and c.inputs[1].inputs[0].op == "permute"
    assert_honest(before, after, kinds=KINDS)


@pytest.mark.parametrize("dims, keepdim", [((2, 3), False), ((2, 3), True), ((1,), False), ((0, 2, 3), True)])
def test_reductions_after_a_conv_reduce_the_mapped_dims(dims, keepdim):
    y = make_node("gelu", [conv(x_in((2, 3, 6, 5)), groups=3, out_channels=6)], approximate="none")
    before = graph_of([make_node("mean", [y], dims=dims, keepdim=keepdim)])
    after, _ = channels_last(before)
    mean = next(n for n in after.nodes() if n.op == "mean")
    assert mean.inputs[0].op == "gelu" and mean.inputs[0].inputs[0].op == "add"
    assert_honest(before, after, kinds=KINDS)


def test_softmax_over_channels_becomes_a_softmax_over_the_last_dim():
    before = graph_of([make_node("softmax", [conv(x_in((2, 4, 5, 5)))], dim=1)])
    after, _ = channels_last(before)
    softmax = next(n for n in after.nodes() if n.op == "softmax")
    assert softmax.attr("dim") == 3 and softmax.inputs[0].op == "add"
    assert_honest(before, after, kinds=KINDS)


def test_broadcast_operands_and_other_inputs_follow_the_layout():
    x = x_in((2, 4, 6, 6))
    y = conv(x, out_channels=4, stride=2)
    scale = p("scale", (4, 1, 1))
    residual = x_in((2, 4, 3, 3), index=1)
    before = graph_of([make_node("add", [make_node("mul", [y, scale]), residual])])
    after, _ = channels_last(before)
    # the per-channel scale is a reshape of the parameter (no strided permute); the residual input is
    # read through a permuted view
    mul = next(n for n in after.nodes() if n.op == "mul")
    assert {i.op for i in mul.inputs} == {"add", "reshape"}
    assert_honest(before, after, kinds=KINDS)


def batch_norm_train(y, *, affine: bool = True, momentum: float = 0.1):
    """Training-mode BatchNorm as capture writes it: the normalizing node (batch statistics, no running
    stats) and the running-stat updates as mean/var reductions blended into the buffers (mutations)."""
    c = y.shape[1]
    params = [p("bn.weight", (c,)), p("bn.bias", (c,))] if affine else []
    out = make_node("batch_norm", [y, *params], training=True, momentum=momentum, eps=1e-5,
                    has_weight=affine, has_bias=affine, has_running=False)
    dims = (0, *range(2, len(y.shape)))
    updates = []
    for stat, batch in (("mean", make_node("mean", [y], dims=dims)),
                        ("var", make_node("var", [y], dims=dims, correction=1))):
        old = buffer_node(f"bn.running_{stat}", (c,))
        blend = make_node("add", [make_node("mul", [old, const_node(1 - momentum)]),
                                  make_node("mul", [batch, const_node(momentum)])])
        updates.append((f"bn.running_{stat}", blend))
    probe = graph_of([out], training=True)
    buffers = tuple(update.inputs[0].inputs[0] for _, update in updates)
    return probe.with_(params=probe.params + buffers, mutations=tuple(updates))


@pytest.mark.parametrize("affine", [True, False])
def test_training_batch_norm_after_a_conv_normalizes_the_channels_last_data(affine):
    y = conv(x_in((3, 4, 7, 5)), out_channels=6)
    before = batch_norm_train(make_node("relu", [y]), affine=affine)
    after, _ = channels_last(before)
    norm = next(n for n in after.nodes() if n.op == "batch_norm")
    assert norm.attr("channel_dim") == 3 and norm.inputs[0].op == "relu"
    assert norm.inputs[0].inputs[0].op == "add" and the_conv(after).attr("channels_last")
    # the running statistics reduce the same NHWC data over its non-channel dims
    stats = [n for n in after.nodes() if n.op in ("mean", "var")]
    assert [n.attr("dims") for n in stats] == [(0, 1, 2)] * 2
    assert all(n.inputs[0] is norm.inputs[0] for n in stats)
    assert after.outputs[0].op == "permute" and after.outputs[0].inputs[0] is norm
    assert_honest(before, after, kinds=KINDS)


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_after_a_conv_normalizes_the_channels_last_data(groups, affine):
    y = conv(x_in((2, 3, 7, 5)), out_channels=6)
    params = [p("gn.weight", (6,)), p("gn.bias", (6,))] if affine else []
    norm = make_node("group_norm", [y, *params], groups=groups, eps=1e-5, has_weight=affine, has_bias=affine)
    before = graph_of([make_node("sigmoid", [norm])])
    after, _ = channels_last(before)
    moved = next(n for n in after.nodes() if n.op == "group_norm")
    assert moved.attr("channel_dim") == 3 and moved.inputs[0].op == "add"
    assert moved.inputs[1:] == tuple(params)
    out = after.outputs[0]
    assert out.op == "permute" and out.inputs[0].op == "sigmoid" and out.inputs[0].inputs[0] is moved
    assert_honest(before, after, kinds=KINDS)


def test_group_norm_after_a_conv3d_has_its_channels_in_dim_4():
    y = conv(x_in((2, 3, 3, 5, 4)), out_channels=4)
    before = graph_of([make_node("group_norm", [y, p("gn.weight", (4,)), p("gn.bias", (4,))], groups=2,
                                 eps=1e-5, has_weight=True, has_bias=True)])
    after, _ = channels_last(before)
    assert next(n for n in after.nodes() if n.op == "group_norm").attr("channel_dim") == 4
    assert_honest(before, after, kinds=KINDS)


def test_norms_pass_a_permute_that_moves_the_batch_dim_only_when_batch_statistics_allow():
    """BatchNorm reduces every dim but its channels, so any permutation passes (here the channels land in
    dim 0 of the data); GroupNorm normalizes each sample, so a permute moving the batch dim stays."""
    y = make_node("permute", [conv(x_in((2, 4, 5, 3)), out_channels=5)], dims=(1, 0, 2, 3))
    channels_first = batch_norm_train(y)
    after, _ = channels_last(channels_first)
    assert next(n for n in after.nodes() if n.op == "batch_norm").attr("channel_dim") == 0
    assert_honest(channels_first, after, kinds=KINDS)
    grouped = graph_of([make_node("group_norm", [y], groups=2, eps=1e-5, has_weight=False, has_bias=False)])
    after, _ = channels_last(grouped)
    norm = after.outputs[0]
    assert norm.op == "group_norm" and norm.inputs[0].op == "permute" and "channel_dim" not in norm.attr_dict
    assert_honest(grouped, after, kinds=KINDS)


def test_an_op_the_permute_cannot_pass_reads_the_permuted_view():
    op = "layer_norm"          # over the spatial dims, which NHWC data does not hold innermost
    y = conv(x_in((2, 4, 5, 5)), out_channels=8)
    out = make_node("layer_norm", [y], normalized_ndim=2, normalized_shape=(5, 5), eps=1e-5,
                    has_weight=False, has_bias=False)
    before = graph_of([out])
    after, _ = channels_last(before)
    stopped = after.outputs[0]
    assert stopped.op == op and stopped.inputs[0].op == "permute"
    assert_honest(before, after, kinds=KINDS)


def test_conv3d_and_what_is_left_alone():
    before = graph_of([make_node("relu", [conv(x_in((1, 2, 4, 5, 3)), bias=False)])])
    after, _ = channels_last(before)
    assert the_conv(after).attr("channels_last") and the_conv(after).shape == (1, 4, 5, 3, 6)
    assert_honest(before, after, kinds=KINDS)
    # a conv already channels-last offers no choice
    assert not has_layout_choice(after)


@pytest.mark.parametrize("transposed, stride, dilation, groups, bias", [
    (False, 1, 1, 1, True), (False, 2, 3, 3, False), (True, 3, 2, 1, True), (True, 2, 1, 3, False)])
def test_1d_convolutions_run_channels_last_as_2d_ones_of_height_1(transposed, stride, dilation, groups, bias):
    x = x_in((2, 6, 11))
    weight = p("w", (6, 9 // groups, 4) if transposed else (9, 6 // groups, 4))
    extra = [p("b", (9,))] if bias else []
    c1 = make_node("conv", [x, weight, *extra], stride=(stride,), padding=(2,), dilation=(dilation,),
                   transposed=transposed, output_padding=(1,) if transposed and stride > 1 else (0,),
                   groups=groups, has_bias=bias)
    before = graph_of([make_node("gelu", [c1], approximate="none")])
    assert has_layout_choice(before)
    after, _ = channels_last(before)
    c = the_conv(after)
    assert c.attr("channels_last") and c.shape == (2, c1.shape[2], 9)
    out = after.outputs[0]
    assert out.op == "permute" and out.attr("dims") == (0, 2, 1) and out.inputs[0].op == "gelu"
    # The rule moves data only: in float64 the two graphs agree on every distribution. In float32 on the
    # CPU, a transposed conv of height 1 on NHWC data (oneDNN) sums in another order than the 1-D one and,
    # on massive cancellation, lands up to 6x further from the oracle (both within FP32's reach of it).
    for kind in KINDS:
        inputs, params = leaf_values(before, kind, 0)
        (want,), _ = interpret(before, inputs, params, dtype=torch.float64)
        (got,), _ = interpret(after, inputs, params, dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-9 * float(want.abs().max()))
    assert_honest(before, after, kinds=[k for k in KINDS if not (transposed and k == "cancel")])


@pytest.mark.parametrize("bias", [False, True])
def test_transposed_convolutions_run_channels_last(bias):
    """cuDNN runs transposed convs on NHWC kernels in either layout; in NCHW it converts the output back."""
    weight = p("w", (6, 3, 3, 3))
    extra = [p("b", (3,))] if bias else []
    t = make_node("conv", [x_in((2, 6, 5, 4)), weight, *extra], stride=(2, 2), padding=(1, 1),
                  dilation=(1, 1), transposed=True, output_padding=(1, 0), groups=1, has_bias=bias)
    before = graph_of([make_node("sigmoid", [t])])
    assert has_layout_choice(before)
    after, _ = channels_last(before)
    c = the_conv(after)
    assert c.attr("channels_last") and c.attr("transposed") and c.shape == (2, 10, 7, 3)
    assert_honest(before, after, kinds=KINDS)


def test_the_input_is_laid_out_by_a_copy_node_and_chained_convs_copy_nothing():
    """The NCHW -> NHWC change of the model's input is a copy node (a pointwise kernel's work); a conv
    reading another channels-last conv's output through pointwise ops reads it as it is."""
    y = make_node("relu", [conv(x_in((2, 4, 6, 6)), out_channels=4)])
    weight2 = p("conv2.weight", (5, 4, 3, 3))
    z = make_node("conv", [y, weight2], stride=(1, 1), padding=(1, 1), dilation=(1, 1), transposed=False,
                  output_padding=(0, 0), groups=1, has_bias=False)
    before = graph_of([z])
    after, _ = channels_last(before)
    first, second = [n for n in after.nodes() if n.op == "conv"]
    assert first.inputs[0].op == "copy" and first.inputs[0].inputs[0].op == "permute"
    assert second.inputs[0].op == "relu"
    assert_honest(before, after, kinds=KINDS)


def test_the_channels_last_conv_source_selects_the_nhwc_memory_format():
    c = make_node("conv", [x_in((2, 5, 5, 4)), p("w", (6, 3, 3, 4))], stride=(1, 1), padding=(1, 1),
                  dilation=(1, 1), transposed=False, output_padding=(0, 0), groups=1, has_bias=False,
                  channels_last=True)
    assert c.shape == (2, 5, 5, 6)
    source = aten_source("conv", ["x", "w"], c.attrs)
    assert "x.permute((0, 3, 1, 2)).contiguous(memory_format=torch.channels_last)" in source
    assert source.endswith(".permute((0, 2, 3, 1))")


def test_the_channels_last_1d_conv_source_is_a_2d_conv_of_height_1():
    c = make_node("conv", [x_in((2, 9, 4)), p("w", (6, 3, 4))], stride=(2,), padding=(1,), dilation=(3,),
                  transposed=False, output_padding=(0,), groups=1, has_bias=False, channels_last=True)
    assert c.shape == (2, 3, 6)
    source = aten_source("conv", ["x", "w"], c.attrs)
    assert "x.unsqueeze(1).permute((0, 3, 1, 2)).contiguous(memory_format=torch.channels_last)" in source
    assert "conv2d(" in source and "stride=(1, 2)" in source and "dilation=(1, 3)" in source
    assert source.endswith(".permute((0, 2, 3, 1)).squeeze(1)")


def test_a_residual_reads_the_inputs_channels_last_copy_not_its_nchw_view():
    """conv(x) + x in channels-last: the add reads the NHWC copy made for the conv (dense), not x through a
    permute (a stride of H*W between neighbouring channels)."""
    x = x_in((2, 4, 6, 5))
    before = graph_of([make_node("relu", [make_node("add", [conv(x, out_channels=4), x])])])
    after, _ = channels_last(before)
    add = next(n for n in after.nodes() if n.op == "relu").inputs[0]
    dense = the_conv(after).inputs[0]
    assert add.op == "add" and dense.op == "copy" and any(i is dense for i in add.inputs)
    assert not any(i.op == "permute" for i in add.inputs)
    assert_honest(before, after, kinds=KINDS)


def test_a_permuted_view_keeps_its_readers_when_no_dense_reader_needs_its_copy():
    from kernelwright.rewrite.pipeline import rewrite_graph

    x = x_in((3, 4, 5))
    view = make_node("permute", [x], dims=(0, 2, 1))
    before = graph_of([make_node("relu", [make_node("copy", [view])]), make_node("sigmoid", [view])])
    after, _ = rewrite_graph(before)
    sigmoid = next(n for n in after.nodes() if n.op == "sigmoid")
    assert sigmoid.inputs[0].op == "permute"


@pytest.mark.parametrize("op, attrs", [
    ("max_pool", dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1), ceil_mode=True)),
    ("avg_pool", dict(kernel=(2, 3), stride=(2, 2), padding=(0, 1), ceil_mode=False, count_include_pad=False,
                      divisor_override=None)),
    ("adaptive_avg_pool", dict(output_size=(1, 1))),
])
def test_pools_run_on_the_channels_last_data_and_the_next_conv_reads_them_as_they_are(op, attrs):
    pooled = make_node(op, [make_node("relu", [conv(x_in((2, 4, 7, 6)), out_channels=4)])], **attrs)
    weight2 = p("conv2.weight", (5, 4, 1, 1))
    z = make_node("conv", [pooled, weight2], stride=(1, 1), padding=(0, 0), dilation=(1, 1), transposed=False,
                  output_padding=(0, 0), groups=1, has_bias=False)
    before = graph_of([z])
    after, _ = channels_last(before)
    pool = next(n for n in after.nodes() if n.op == op)
    assert pool.attr("channels_last") and pool.inputs[0].op == "relu"
    second = [n for n in after.nodes() if n.op == "conv"][1]
    assert second.inputs[0] is pool      # no copy back to NHWC
    assert_honest(before, after, kinds=KINDS)


def test_pools_without_an_nhwc_kernel_in_aten_read_the_permuted_view():
    """3-D pools and adaptive max pooling: ATen would copy NHWC data to NCDHW and back around them."""
    pooled3d = make_node("avg_pool", [conv(x_in((1, 2, 4, 6, 6)), out_channels=3)], kernel=(2, 2, 2),
                         stride=(2, 2, 2), padding=(0, 0, 0), ceil_mode=False, count_include_pad=True,
                         divisor_override=None)
    adaptive_max = make_node("adaptive_max_pool", [conv(x_in((2, 4, 7, 6)), out_channels=4)],
                             output_size=(2, 3))
    for pooled in (pooled3d, adaptive_max):
        after, _ = channels_last(graph_of([pooled]))
        pool = next(n for n in after.nodes() if n.op == pooled.op)
        assert not pool.attr("channels_last") and pool.inputs[0].op == "permute"


def test_a_channels_last_pool_is_left_to_aten_by_the_pool_family():
    from kernelwright.fuse import plan_fusion

    pooled = make_node("max_pool", [conv(x_in((2, 4, 7, 6)), out_channels=4)], kernel=(2, 2), stride=(2, 2),
                       padding=(0, 0), dilation=(1, 1), ceil_mode=False)
    after, _ = channels_last(graph_of([pooled]))
    pool = next(n for n in after.nodes() if n.op == "max_pool")
    assert pool.attr("channels_last") and not any(g.family == "pool" for g in plan_fusion(after).groups)
    source = aten_source("max_pool", ["x"], pool.attrs)
    assert source.startswith("torch.nn.functional.max_pool2d(x.permute((0, 3, 1, 2))")
    assert source.endswith(".permute((0, 2, 3, 1))")


def test_a_concatenation_of_channels_last_branches_stays_channels_last():
    """A Fire module: two convs of one input concatenated along the channels feed a third conv, which reads
    the NHWC concatenation as it is."""
    squeeze = make_node("relu", [conv(x_in((2, 4, 5, 5)), out_channels=3)])
    branches = []
    for name, k, pad in (("e1", 1, 0), ("e3", 3, 1)):
        w = p(f"{name}.weight", (4, 3, k, k))
        branches.append(make_node("relu", [make_node(
            "conv", [squeeze, w], stride=(1, 1), padding=(pad, pad), dilation=(1, 1), transposed=False,
            output_padding=(0, 0), groups=1, has_bias=False)]))
    joined = make_node("cat", branches, dim=1)
    out = make_node("conv", [joined, p("next.weight", (2, 8, 1, 1))], stride=(1, 1), padding=(0, 0),
                    dilation=(1, 1), transposed=False, output_padding=(0, 0), groups=1, has_bias=False)
    before = graph_of([out])
    after, _ = channels_last(before)
    cat = next(n for n in after.nodes() if n.op == "cat")
    assert cat.attr("dim") == 3 and cat.shape == (2, 5, 5, 8)
    assert [n for n in after.nodes() if n.op == "conv"][-1].inputs[0] is cat
    assert_honest(before, after, kinds=KINDS)


def test_an_unbatched_conv_keeps_its_layout():
    """nn.Conv2d on a [C, H, W] input is captured as a conv of rank 3 with two spatial dims: not a 1-D one."""
    unbatched = make_node("conv", [x_in((4, 6, 5)), p("w", (3, 4, 3, 3))], stride=(1, 1), padding=(1, 1),
                          dilation=(1, 1), transposed=False, output_padding=(0, 0), groups=1, has_bias=False)
    graph = graph_of([unbatched])
    assert unbatched.shape == (3, 6, 5) and not has_layout_choice(graph)
    assert ops_of(channels_last(graph)[0]) == ops_of(graph)
