"""The convolution matcher and renderer on hand-built channels-last graphs: what it claims (the conv, its
pointwise epilogue, the NCHW transpose), what it leaves to cuDNN, and the launch it renders."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kernelwright.fuse.conv as fuse_conv
from kernelwright.codegen import conv as codegen_conv
from kernelwright.codegen.conv import ir_comment, phase_taps, render, tile
from kernelwright.fuse import matchers_without, plan_fusion
from kernelwright.fuse.conv import describe, match
from kernelwright.fuse.plan import make_group
from kernelwright.ir.graph import Graph
from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import const_node, input_node, make_node, param_node


@pytest.fixture(autouse=True)
def cutlass_headers(monkeypatch):
    """Matching does not read the headers, only asks whether they exist."""
    monkeypatch.setattr(fuse_conv, "cutlass_include_dir", lambda: Path("/cutlass/include"))
    monkeypatch.setattr(fuse_conv, "hopper_gpu", lambda: True)


def conv_chain(n=8, h=34, w=34, c=64, k=128, kernel=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1),
               groups=1, epilogue=lambda y, extra: make_node("relu", [y]), to_nchw=True, extra=(), pool=None,
               d=None):
    """x [N, H, W, C] -> conv_cl -> + bias -> epilogue -> permute to NCHW, as the layout pass leaves it;
    `pool` ("mean", "sum"): the epilogue's values pooled over each image's pixels instead (keepdim for a
    mean, as F.adaptive_avg_pool2d leaves it). With a depth `d` (and 3-D geometry): a Conv3d's, NDHWC."""
    sizes = (h, w) if d is None else (d, h, w)
    x = input_node("x", 0, (n, *sizes, c))
    weight = param_node("weight", (k, *kernel, c // groups))
    bias = param_node("bias", (k,))
    y = make_node("conv", [x, weight], stride=stride, padding=padding, dilation=dilation, transposed=False,
                  output_padding=(0,) * len(sizes), groups=groups, has_bias=False, channels_last=True)
    y = epilogue(make_node("add", [y, bias]), extra)
    if pool is not None:
        out = make_node(pool, [y], dims=tuple(range(1, len(sizes) + 1)), keepdim=pool == "mean")
    else:
        out = make_node("permute", [y], dims=fuse_conv.to_nchw(len(y.shape))) if to_nchw else y
    return Graph(inputs=(x, *extra), params=(weight, bias), outputs=(out,))


def test_conv_bias_activation_transpose_is_one_group():
    graph = conv_chain()
    (group,) = match(graph, frozenset())
    assert [n.op for n in group.nodes] == ["conv", "add", "relu", "permute"]
    assert [n.name for n in group.inputs] == ["x", "weight", "bias"]
    view = describe(group)
    assert (view.n, view.h, view.w_in, view.c, view.k, view.r, view.s, view.p, view.q) == (
        8, 34, 34, 64, 128, 3, 3, 34, 34)
    assert [(o.node.name, o.kind) for o in view.operands] == [("bias", "row")]
    assert tuple(view.output.shape) == (8, 128, 34, 34)


def test_epilogue_tensors_by_broadcast_kind():
    # a full NHWC tensor (a residual), a per-pixel one and a per-channel scale all join the epilogue
    residual = input_node("residual", 1, (8, 34, 34, 128))
    pixel = input_node("pixel", 2, (8, 34, 34, 1))

    def epilogue(y, extra):
        return make_node("sigmoid", [make_node("mul", [make_node("add", [y, extra[0]]), extra[1]])])

    graph = conv_chain(epilogue=epilogue, extra=(residual, pixel))
    (group,) = match(graph, frozenset())
    view = describe(group)
    assert [(o.node.name, o.kind) for o in view.operands] == [("bias", "row"), ("residual", "full"),
                                                               ("pixel", "col")]
    source = render(group)
    for index in ("__ldg(p.e0 + n)", "__ldg(p.e1 + m * p.channels + n)", "__ldg(p.e2 + m)"):
        assert index in source.text
    assert source.spec.outputs == (("float32", (8, 128, 34, 34)),)
    assert source.spec.operands[0] == (0, (("dense", 16),), None)


@pytest.mark.parametrize("change", [
    {"groups": 2},
    {"stride": (9, 1)},         # TMA im2col: element strides of at most 8
    {"w": 300, "dilation": (1, 130)},   # ... and filter offsets under 255
    {"to_nchw": False},         # an NHWC result: nothing gained over cuDNN (a norm or pool reads it next)
    {"n": 1, "h": 8, "w": 8},   # too small to pay for the launch
])
def test_left_to_cudnn(change):
    assert match(conv_chain(**change), frozenset()) == []


@pytest.mark.parametrize("pool", ["mean", "sum"])
def test_a_global_pool_ends_the_group_and_nothing_else_is_stored(pool):
    """conv -> bias -> GELU -> mean over the pixels (F.adaptive_avg_pool2d(x, 1) after the layout pass): the
    pool is the group's output, [N, K]; the kernel sums each tile per image and channel into the workspace
    (a mean scaled by 1 / (P * Q)) and a second kernel adds each image's tile sums in order."""
    graph = conv_chain(epilogue=lambda y, extra: make_node("gelu", [y], approximate="none"), pool=pool)
    (group,) = match(graph, frozenset())
    assert [n.op for n in group.nodes] == ["conv", "add", "gelu", pool]
    view = describe(group)
    assert view.pooled
    assert [n.op for n in view.epilogue] == ["add", "gelu"]
    source = render(group)
    assert source.spec.outputs == (("float32", (8, 1, 1, 128) if pool == "mean" else (8, 128)),)
    text = source.launcher.cuda if source.launcher is not None else source.text
    assert "using Store = PoolStore;" in text and "constexpr bool kPooled = true;" in text
    assert f"constexpr bool kMean = {'true' if pool == 'mean' else 'false'};" in text
    assert "args.direct.scale = kMean ? 1.f / static_cast<float>(z * p * q) : 1.f;" in text   # 1 / (P*Q)
    assert "pool_finish<TM><<<" in text and "atomicAdd" not in text
    # the NCHW form of the same chain is another launcher
    nchw = render(match(conv_chain(epilogue=lambda y, extra: make_node("gelu", [y], approximate="none")),
                        frozenset())[0])
    assert nchw.name.rsplit("_", 1)[0] != source.name.rsplit("_", 1)[0]
    assert "using Store = NchwStore;" in (nchw.launcher.cuda if nchw.launcher is not None else nchw.text)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_a_softmax_over_the_channels_runs_on_the_staged_tile(op):
    """conv -> bias -> scale -> softmax over the channels (dim 3 of NHWC) -> NCHW (level2/21 after the layout
    pass): one group; the softmax is not part of the epilogue function but a pass over the staged tile."""
    scale = param_node("scale", (128,))
    graph = conv_chain(epilogue=lambda y, extra: make_node(op, [make_node("mul", [y, extra[0]])], dim=3),
                       extra=(scale,))
    (group,) = match(graph, frozenset())
    assert [n.op for n in group.nodes] == ["conv", "add", "mul", op, "permute"]
    view = describe(group)
    assert view.row is not None and view.row.op == op and [n.op for n in view.epilogue] == ["add", "mul"]
    source = render(group)
    text = source.launcher.cuda if source.launcher is not None else source.text
    assert f"constexpr int kRowOp = {1 if op == 'softmax' else 2};" in text
    assert "using Store = NchwStore;" in text
    assert f"epilogue: add → mul → {op} over the channels;" in ir_comment(view)


@pytest.mark.parametrize("change", [
    {"k": 192},                    # more channels than one tile holds
    {"dim": 2},                    # over a spatial dim
])
def test_other_softmaxes_stop_the_group(change):
    k, dim = change.get("k", 128), change.get("dim", 3)
    graph = conv_chain(k=k, epilogue=lambda y, extra: make_node("softmax", [y], dim=dim))
    assert match(graph, frozenset()) == []


@pytest.mark.parametrize("pool", [
    lambda y: make_node("mean", [y], dims=(1,), keepdim=True),        # not both spatial dims
    lambda y: make_node("amax", [y], dims=(1, 2), keepdim=True),      # not a sum
    lambda y: make_node("prod", [y], dims=(3,), keepdim=True),        # over the channels, not one of ours
])
def test_other_reductions_are_left_to_the_reduction_family(pool):
    graph = conv_chain(to_nchw=False)
    (y,) = graph.outputs
    assert match(Graph(inputs=graph.inputs, params=graph.params, outputs=(pool(y),)), frozenset()) == []


def _reduced(op, keepdim=True, k=40, post=lambda y, extra: y, extra=(), convt=False):
    """conv (or a transposed one) -> bias -> `op` over the channels -> `post`: the graph's output"""
    graph = (convt_chain(k=k, to_nchw=False, extra=extra) if convt
             else conv_chain(k=k, to_nchw=False, extra=extra, epilogue=lambda y, extra: y))
    (y,) = graph.outputs
    out = post(make_node(op, [y], dims=(3,), keepdim=keepdim), extra)
    return Graph(inputs=graph.inputs, params=graph.params, outputs=(out,))


@pytest.mark.parametrize("op", fuse_conv.CHANNEL_REDUCTIONS)
@pytest.mark.parametrize("keepdim", [True, False])
def test_a_reduction_over_the_channels_is_stored_a_value_a_pixel(op, keepdim):
    """conv -> bias -> min (say) over the channels (dim 3 of NHWC) -> tanh -> + a one-value tensor: one group,
    the reduction run on the staged tile (every channel in it), the pointwise ops after it by the store,
    one value a pixel stored; the conv's output never."""
    offset = input_node("offset", 1, (1,))

    def post(y, extra):
        return make_node("add", [make_node("tanh", [y]), extra[0]])

    (group,) = match(_reduced(op, keepdim, post=post, extra=(offset,)), frozenset())
    assert [n.op for n in group.nodes] == ["conv", "add", op, "tanh", "add"]
    view = describe(group)
    assert view.reduced and view.row.op == op and [n.op for n in view.post] == ["tanh", "add"]
    assert [n.op for n in view.epilogue] == ["add"] and view.output is view.post[-1]
    assert [(o.node.name, o.kind) for o in view.operands] == [("bias", "row"), ("offset", "col")]
    source = render(group)
    assert source.spec.outputs == (("float32", (8, 34, 34, 1) if keepdim else (8, 34, 34)),)
    text = source.launcher.cuda if source.launcher is not None else source.text
    assert "using Store = ReduceStore;" in text and "constexpr bool kStoreEpilogue = true;" in text
    assert f"constexpr int kRowOp = {codegen_conv.ROW_OPS[op]};" in text
    assert f"epilogue: add → {op} over the channels → tanh → add;" in ir_comment(view)


@pytest.mark.parametrize(("case", "post_ops"), [
    # a tensor a pixel after a reduction that keeps the channel dim: read at the pixel
    ("pixel", ["mul"]),
    # ... that drops it: left to the next kernel (a [N, P, Q] operand is not addressed by the epilogue)
    ("pixel_no_keepdim", []),
    # a per-channel tensor after a reduction: not one value a pixel
    ("channel", []),
    # the conv's value read again after the reduction: computed outside the chain
    ("conv_again", []),
])
def test_what_the_store_applies_after_a_reduction(case, post_ops):
    keepdim = case != "pixel_no_keepdim"
    shape = {"pixel": (8, 34, 34, 1), "pixel_no_keepdim": (8, 34, 34), "channel": (1, 1, 1, 40)}.get(case)
    extra = (input_node("t", 1, shape),) if shape else ()
    graph = _reduced("amax", keepdim, extra=extra, post=lambda y, e: make_node("mul", [y, e[0]]) if e else y)
    if case == "conv_again":
        (out,) = graph.outputs
        conv_value = out.inputs[0]
        again = make_node("amin", [conv_value], dims=(3,), keepdim=True)
        graph = Graph(inputs=graph.inputs, params=graph.params, outputs=(make_node("sub", [out, again]),))
    groups = match(graph, frozenset())
    if case == "conv_again":
        assert groups == []     # the conv's value has two readers: stored NHWC, left to cuDNN
        return
    (group,) = groups
    assert [n.op for n in describe(group).post] == post_ops


def test_reductions_over_more_channels_than_a_tile_are_left_alone():
    assert match(_reduced("amin", k=192), frozenset()) == []
    # a transposed conv's columns are its channels times its phases along W: 96 x 2 do not fit a tile
    assert match(_reduced("amin", k=96, convt=True), frozenset()) == []
    (group,) = match(_reduced("amin", k=64, convt=True), frozenset())
    view = describe(group)
    assert view.transposed and view.reduced and tile(view) == (128, 128, 32)


@pytest.mark.parametrize(("k", "width"), [(40, 64), (64, 64), (65, 96), (96, 96), (97, 128), (201, 128)])
def test_the_tile_is_as_wide_as_the_columns_need(k, width):
    """64, 96 or 128 columns: the narrowest that holds every channel, else 128 (a wider tile's idle
    columns cost multiply-adds: 96 channels in a 128-wide tile leave a quarter of them idle)."""
    (group,) = match(conv_chain(k=k), frozenset())
    assert tile(describe(group)) == (128, width, 32)


def test_a_softmax_then_pointwise_ops_is_one_group():
    """ConvTranspose2d -> bias -> softmax over the channels -> + a per-channel bias -> * scale -> sigmoid
    -> NCHW (level2/27 after the layout pass): the ops after the softmax applied by the NCHW store."""
    bias2 = param_node("bias2", (1, 1, 1, 64))

    def after(y):
        soft = make_node("softmax", [y], dim=3)
        return make_node("sigmoid", [make_node("mul", [make_node("add", [soft, bias2]), const_node(3.0)])])

    graph = convt_chain(kernel=(4, 4), output_padding=(0, 0), after=after)
    graph = graph.with_(params=(*graph.params, bias2))
    (group,) = match(graph, frozenset())
    assert [n.op for n in group.nodes] == ["conv", "add", "softmax", "add", "mul", "sigmoid", "permute"]
    view = describe(group)
    assert [n.op for n in view.post] == ["add", "mul", "sigmoid"] and view.output.op == "permute"
    assert [(o.node.name, o.kind) for o in view.operands] == [("bias", "row"), ("bias2", "row")]
    text = render(group).launcher.cuda
    assert "using Store = NchwStore;" in text and "constexpr bool kStoreEpilogue = true;" in text
    assert "_store_epilogue(float acc, float e0, float e1)" in text
    # not when the softmax's pointwise ops are read by more than the transpose
    (out,) = graph.outputs
    two = graph.with_(outputs=(out, out.inputs[0]))
    assert match(two, frozenset()) == []


def test_images_of_few_pixels_are_not_pooled_in_the_epilogue():
    # 5x5 = 25 pixels an image: a 128-pixel tile would hold up to six images
    assert match(conv_chain(n=512, h=5, w=5, pool="mean"), frozenset()) == []
    (group,) = match(conv_chain(n=512, h=6, w=6, pool="mean"), frozenset())      # 36 pixels
    assert describe(group).pooled


def test_three_channels_are_padded_to_four():
    (group,) = match(conv_chain(n=16, h=130, w=130, c=3, k=64), frozenset())
    assert describe(group).c_padded == 4
    source = render(group)
    # x [16, 130, 130, 3] and the weight [64, 3, 3, 3] copied with a zero channel into the workspace, whose
    # size counts both (256-byte aligned) before the kernel's own
    assert "_pad(static_cast<const float*>(in[0].data), padded_x, 270400LL, 3, 4, stream)" in source.text
    assert "_pad(static_cast<const float*>(in[1].data), padded_w, 576LL, 3, 4, stream)" in source.text
    assert "return 4335616 + " in source.text
    assert "16, 130, 130, 4, 64, 3, 3," in source.text


def test_not_claimed_when_eager_convs_are_exact_fp32(monkeypatch):
    monkeypatch.setattr("torch.backends.cudnn.allow_tf32", False)
    assert match(conv_chain(), frozenset()) == []


def test_transposed_and_channels_first_convs_are_not_claimed():
    x = input_node("x", 0, (8, 64, 34, 34))
    weight, bias = param_node("weight", (128, 64, 3, 3)), param_node("bias", (128,))
    y = make_node("conv", [x, weight, bias], stride=(1, 1), padding=(1, 1), dilation=(1, 1), transposed=False,
                  output_padding=(0, 0), groups=1, has_bias=True)
    assert match(Graph(inputs=(x,), params=(weight, bias), outputs=(make_node("relu", [y]),)),
                 frozenset()) == []


def test_other_readers_stop_the_epilogue():
    # the conv output is also a graph output: the transpose cannot be the group's only output
    x = input_node("x", 0, (8, 34, 34, 64))
    weight = param_node("weight", (128, 3, 3, 64))
    y = make_node("conv", [x, weight], stride=(1, 1), padding=(1, 1), dilation=(1, 1), transposed=False,
                  output_padding=(0, 0), groups=1, has_bias=False, channels_last=True)
    out = make_node("permute", [make_node("relu", [y])], dims=(0, 3, 1, 2))
    assert match(Graph(inputs=(x,), params=(weight,), outputs=(out, y)), frozenset()) == []


def test_planner_takes_the_conv_group_first_and_can_leave_it_out():
    graph = conv_chain()
    assert [g.family for g in plan_fusion(graph).groups] == ["conv"]
    families = [g.family for g in plan_fusion(graph, matchers_without(("conv",))).groups]
    assert "conv" not in families and families


def test_render_geometry_and_tile():
    graph = conv_chain(k=64, kernel=(3, 5), stride=(2, 1), padding=(1, 2), dilation=(1, 2))
    (group,) = match(graph, frozenset())
    view = describe(group)
    assert tile(view) == (128, 64, 32)
    source = render(group)
    # sizes baked into the entry: n, h, w, c, k, r, s, pads (lower, upper), strides, dilations, channels, the
    # output size, the phase along H and the phases (a transposed conv's), then along D (1, 1, 0, 0, 1, 1, 1,
    # 0, 1 in 2-D: d, t, pads, stride, dilation, output depth, phase, phases)
    sizes = "8, 34, 34, 64, 64, 3, 5, 1, 2, 1, 2, 2, 1, 1, 2, 64, 17, 30, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1"
    assert f"{sizes}, workspace, stream" in source.text
    assert "kw::ConvPingpong" in source.text and "#include <cutlass/" in source.text
    # one instantiation per tile and epilogue: the same chain on other sizes shares the launcher
    other = render(match(conv_chain(n=4, h=20, w=20, k=64, kernel=(3, 5)), frozenset())[0])
    assert other.name.rsplit("_", 1)[0] == source.name.rsplit("_", 1)[0]
    assert other.name != source.name


def bn_chain(n=8, h=34, w=34, c=64, k=128, after="relu", running=True, norm="batch", d=None):
    """x [N, H, W, C] -> conv_cl -> + bias -> BatchNorm (batch statistics, channels last) -> `after` ->
    NCHW, with the running statistics' updates as capture leaves them (their own mean and var of x); or
    (`norm="instance"`) an InstanceNorm without affine parameters, as the rewrites leave it (a GroupNorm of
    one channel a group), or (`norm="group"`) a GroupNorm of two groups with affine parameters. With a depth
    `d`: a Conv3d's (3x3x3), NDHWC."""
    sizes = (h, w) if d is None else (d, h, w)
    rank = len(sizes) + 2
    x = input_node("x", 0, (n, *sizes, c))
    weight = param_node("weight", (k, *(3,) * len(sizes), c))
    bias, gamma, beta = param_node("bias", (k,)), param_node("bn.weight", (k,)), param_node("bn.bias", (k,))
    y = make_node("conv", [x, weight], stride=(1,) * len(sizes), padding=(1,) * len(sizes),
                  dilation=(1,) * len(sizes), transposed=False, output_padding=(0,) * len(sizes), groups=1,
                  has_bias=False, channels_last=True)
    y = make_node("add", [y, bias])
    if norm == "instance":
        normed = make_node("group_norm", [y], channel_dim=rank - 1, eps=1e-5, groups=k, has_bias=False,
                           has_weight=False)
        running = False
    elif norm == "group":
        normed = make_node("group_norm", [y, gamma, beta], channel_dim=rank - 1, eps=1e-5, groups=2,
                           has_bias=True, has_weight=True)
        running = False
    else:
        normed = make_node("batch_norm", [y, gamma, beta], channel_dim=rank - 1, eps=1e-5, has_bias=True,
                           has_running=False, has_weight=True, momentum=0.1, training=True)
    out = make_node("permute", [make_node(after, [normed]) if after else normed],
                    dims=fuse_conv.to_nchw(rank))
    mutations = ()
    if running:
        mean = make_node("mean", [y], dims=tuple(range(rank - 1)), keepdim=False)
        var = make_node("var", [y], dims=tuple(range(rank - 1)), correction=1, keepdim=False)
        mutations = (("bn.running_mean", make_node("mul", [mean, const_node(0.1)])),
                     ("bn.running_var", make_node("mul", [var, const_node(0.1)])))
    return Graph(inputs=(x,), params=(weight, bias, gamma, beta), outputs=(out,), mutations=mutations)


def test_batch_norm_statistics_join_the_conv_epilogue():
    graph = bn_chain()
    plan = plan_fusion(graph)
    conv_group = next(g for g in plan.groups if g.family == "conv")
    view = describe(conv_group)
    # the epilogue's value stored NHWC and four statistics: the norm's mean and var, the running ones
    assert [n.op for n in conv_group.nodes] == ["conv", "add", "mean", "var", "mean", "var"]
    assert view.output is conv_group.outputs[0] and view.output.op == "add"
    assert [(s.op, s.attr("correction")) for s in view.statistics] == [
        ("mean", None), ("var", 0), ("mean", None), ("var", 1)]
    assert [n.op for n in view.epilogue] == ["add"]
    # the apply (and the ReLU) is the pointwise family's, reading the stored value and the statistics
    apply = next(g for g in plan.groups if "rsqrt" in [n.op for n in g.nodes])
    assert apply.family == "pointwise" and "relu" in [n.op for n in apply.nodes]
    source = render(conv_group).text
    assert "using Store = StatsStore;" in source and "constexpr bool kStatistics = true;" in source
    assert "s.out[3][n] = static_cast<float>(m2 / fmax(count - 1.0, 0.0));" in source
    assert "s.out[0][n] = static_cast<float>(sum / count);" in source
    assert "each channel's mean, var (correction 0), mean, var (correction 1) over all pixels" in \
        ir_comment(view)


@pytest.mark.parametrize(("after", "norm", "d"), [("relu", "batch", None), (None, "batch", None),
                                                  ("relu", "instance", None), ("relu", "group", None),
                                                  (None, "group", 4), ("relu", "batch", 3)])
def test_norm_split_computes_the_same(after, norm, d, monkeypatch):
    """The split graph, run by the interpreter, equals the original (outputs and buffer updates); small
    sizes, taken as claimable. A GroupNorm of several channels a group: its groups' moments combined from
    its channels'."""
    monkeypatch.setattr(fuse_conv, "claimable", lambda conv: True)
    graph = bn_chain(n=3, h=9, w=7, c=5, k=6, after=after, norm=norm, d=d)
    split = fuse_conv.norms_apart(graph)
    assert not {"batch_norm", "group_norm"} & {n.op for n in split.nodes()}
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(i.shape, generator=gen, dtype=torch.float64) for i in graph.inputs]
    params = {p.name: torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in graph.params}
    want, want_updates = interpret(graph, inputs, params)
    got, got_updates = interpret(split, inputs, params)
    for a, b in zip([*want, *want_updates.values()], [*got, *got_updates.values()], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_batch_norms_not_split_where_the_conv_kernel_cannot_take_them():
    # a conv below the kernel's size floor (cuDNN's, the norm's own kernel)
    graph = bn_chain(n=1, h=4, w=4, c=4, k=4)
    assert fuse_conv.norms_apart(graph) is graph


def test_batch_norms_not_split_without_the_conv_family(monkeypatch):
    monkeypatch.setattr(fuse_conv, "hopper_gpu", lambda: False)
    graph = bn_chain()
    assert fuse_conv.norms_apart(graph) is graph
    assert "batch_norm" in [n.op for n in plan_fusion(graph).graph.nodes()]


def test_instance_norm_statistics_are_per_image():
    graph = bn_chain(norm="instance")
    conv_group = next(g for g in plan_fusion(graph).groups if g.family == "conv")
    view = describe(conv_group)
    assert [(s.op, tuple(s.attr("dims"))) for s in view.statistics] == [("mean", (1, 2)), ("var", (1, 2))]
    assert view.per_image and tuple(view.statistics[0].shape) == (8, 1, 1, 128)
    source = render(conv_group).text
    assert "constexpr bool kPerImage = true;" in source
    assert "over each image" in ir_comment(view)


def test_a_group_norm_of_several_channels_a_group_takes_its_channels_statistics():
    """level2/28, 2-D: the conv group computes each image's per-channel mean and var; the groups' are
    combined from them in small kernels, and the apply reads the conv's stored value once."""
    plan = plan_fusion(bn_chain(norm="group"))
    conv_group = next(g for g in plan.groups if g.family == "conv")
    view = describe(conv_group)
    assert view.per_image and [s.op for s in view.statistics] == ["mean", "var"]
    assert "group_norm" not in {n.op for n in plan.graph.nodes()}


def convt_chain(n=8, h=32, w=32, c=64, k=64, kernel=(3, 3), stride=(2, 2), padding=(1, 1),
                output_padding=(1, 1), dilation=None, groups=1, after=None, to_nchw=True, extra=(), d=None):
    """x [N, H, W, C] -> conv_transpose_cl (weight [C, R, S, K]) -> + bias -> `after` -> NCHW, as the layout
    pass leaves a ConvTranspose2d chain (`extra`: other inputs `after` reads); with a depth `d` (and 3-D
    geometry) a ConvTranspose3d's, NDHWC."""
    sizes = (h, w) if d is None else (d, h, w)
    dilation = dilation or (1,) * len(sizes)
    x = input_node("x", 0, (n, *sizes, c))
    weight, bias = param_node("weight", (c, *kernel, k // groups)), param_node("bias", (k,))
    out_hw = [(size - 1) * s - 2 * p + d * (r - 1) + o + 1 for size, s, p, d, r, o in zip(
        sizes, stride, padding, dilation, kernel, output_padding, strict=True)]
    y = make_node("conv", [x, weight], stride=stride, padding=padding, dilation=dilation, transposed=True,
                  output_padding=output_padding, groups=groups, has_bias=False, channels_last=True)
    assert tuple(y.shape) == (n, *out_hw, k)
    y = make_node("add", [y, bias])
    if after is not None:
        y = after(y)
    out = make_node("permute", [y], dims=fuse_conv.to_nchw(len(y.shape))) if to_nchw else y
    return Graph(inputs=(x, *extra), params=(weight, bias), outputs=(out,))


def test_transposed_conv_chain_is_one_phased_group():
    """ConvTranspose2d + bias + hardswish -> NCHW (level2/10 after the layout pass): one group, computed an
    output phase along H a launch, the two phases along W side by side as the GEMM's columns."""
    graph = convt_chain(after=lambda y: make_node("hardswish", [y]))
    (group,) = match(graph, frozenset())
    assert [n.op for n in group.nodes] == ["conv", "add", "hardswish", "permute"]
    view = describe(group)
    assert view.transposed and (view.p, view.q, view.k) == (64, 64, 64)
    assert tile(view) == (128, 128, 32)             # 64 channels x 2 phases along W
    source = render(group)
    text = source.launcher.cuda if source.launcher is not None else source.text
    assert "using Store = NchwStore;" in text and "constexpr int kPhasesW = 2;" in text
    assert "constexpr bool kPhased = true;" in text
    # phase 0 along H: one tap of 3 (the kernel's row 1); phase 1: rows 2 and 0; along W the window (1, None)
    # and (2, 0): 1 x 2 and 2 x 2 windows of 128 columns
    assert "static const int taps0[] = {4, -1, 5, 3};" in source.text
    assert "static const int taps1[] = {7, -1, 1, -1, 8, 6, 2, 0};" in source.text
    assert source.text.count("_launch(static_cast<const float*>(in[0].data), phase_w") == 2
    assert source.text.count("_phase_weights(static_cast<const float*>(in[1].data), phase_w") == 2
    assert "8, 32, 32, 64, 128, 1, 2, 0, 0, 0, 1, 1, 1, 1, 1, 64, 64, 64, 0, 2" in source.text
    assert "8, 32, 32, 64, 128, 2, 2, 0, 0, 1, 1, 1, 1, 1, 1, 64, 64, 64, 1, 2" in source.text
    assert "2 launches (output phases along H; windows 1x2, 2x2)" in ir_comment(view)


@pytest.mark.parametrize("after", [
    # ConvTranspose2d + bias -> relu, stored NHWC for another kernel, where the phased kernel lost to cuDNN
    lambda y: make_node("relu", [y]),
    # softmax over the channels, then pointwise ops stored NHWC: not the NCHW store
    lambda y: make_node("sigmoid", [make_node("softmax", [y], dim=3)]),
    # the statistics of the conv's value (a norm's, written out)
    lambda y: make_node("var", [y], dims=(0, 1, 2), correction=0, keepdim=True),
])
def test_transposed_conv_not_ending_in_the_nchw_store_is_left_to_cudnn(after):
    assert match(convt_chain(after=after, to_nchw=False), frozenset()) == []


@pytest.mark.parametrize(("k", "claimed"), [(64, True), (96, False)])
def test_transposed_conv_softmax_needs_every_phase_in_one_tile(k, claimed):
    # 96 channels x 2 phases do not fit a tile
    groups = match(convt_chain(k=k, after=lambda y: make_node("softmax", [y], dim=3)), frozenset())
    assert [describe(g).row is not None for g in groups] == ([True] if claimed else [])


@pytest.mark.parametrize("change", [
    {"stride": (2, 3), "kernel": (3, 3), "output_padding": (0, 0)},    # 3 phases along W do not divide a tile
    {"dilation": (2, 2)},
    {"kernel": (1, 1), "padding": (0, 0)},           # fewer taps than the stride: phases without any
    {"groups": 2},
    {"padding": (3, 3)},                             # a phase window that starts past the input
])
def test_transposed_convs_left_to_cudnn(change):
    assert match(convt_chain(**change), frozenset()) == []


@pytest.mark.parametrize(("size", "kernel", "stride", "padding", "output_padding", "claimed"), [
    ((32, 32), (3, 3), (2, 2), (1, 1), (1, 1), True),     # level2/10's geometry
    ((9, 7), (4, 4), (2, 2), (1, 1), (0, 0), True),       # level2/27's
    # three phases along H, four along W, output padding (a W phase without taps: not claimed)
    ((5, 6), (5, 3), (3, 4), (2, 0), (2, 3), False),
    ((6, 5), (3, 2), (1, 1), (0, 1), (0, 0), True),       # stride 1: one phase, the flipped kernel
    ((5, 6, 7), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), True),   # 3-D: two phases along D, H and W each
    # 3-D, three along D (phase windows past the input: not claimed), one along H
    ((4, 5, 6), (3, 4, 3), (3, 1, 2), (1, 2, 0), (2, 0, 1), False),
    ((4, 5, 3), (3, 3, 3), (1, 1, 1), (0, 0, 0), (0, 0, 0), True),   # 3-D stride 1 (level2/28's geometry)
])
def test_phase_decomposition_computes_the_transposed_conv(size, kernel, stride, padding, output_padding,
                                                          claimed, monkeypatch):
    """The entry's plan run in float64 on the CPU as the kernel runs it: each output phase along D and H a
    correlation of x (its padding) with the weights `phase_weights` gathers by `phase_taps` ([K * s_w, V, T,
    U, C], column k * s_w + rw), each column's values placed at output pixel (s_d * jd + rd, s_h * j + rh,
    s_w * jq + rw) where that is inside the output; equal to conv_transpose2d (3d)."""
    c, k, n = 5, 3, 2
    rank = len(size)
    depth = {"d": size[0]} if rank == 3 else {}
    graph = convt_chain(n=n, h=size[-2], w=size[-1], c=c, k=k, kernel=kernel, stride=stride, padding=padding,
                        output_padding=output_padding, **depth)
    conv = next(node for node in graph.nodes() if node.op == "conv")
    view = describe(make_group(graph, "conv", [node for node in graph.nodes() if not node.is_leaf]))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, *size, c, generator=gen, dtype=torch.float64)
    weight = torch.randn(c, *kernel, k, generator=gen, dtype=torch.float64)     # [C, (T,) R, S, K]
    to_first = (0, rank + 1, *range(1, rank + 1))
    transpose = torch.nn.functional.conv_transpose2d if rank == 2 else torch.nn.functional.conv_transpose3d
    want = transpose(x.permute(to_first), weight.permute(to_first), stride=stride, padding=padding,
                     output_padding=output_padding)
    got = torch.full_like(want, float("nan"))
    rows_d, rows_h, rows_w = view.phases()
    (s_d, s_h, s_w), row_w = (1, *stride) if rank == 2 else stride, rows_w[0]
    flat = weight.reshape(c, -1, k)                                              # [C, (T *) R * S, K]
    for rd, row_d in enumerate(rows_d):
        for rh, row_h in enumerate(rows_h):
            window = (len(row_d.taps), len(row_h.taps), len(row_w.taps))
            taps = torch.tensor(phase_taps(view, rd, rh)).view(s_w, *window)
            gathered = torch.where(taps[None, ..., None] >= 0,
                                   flat[:, taps.clamp(min=0)].permute(5, 1, 2, 3, 4, 0), torch.zeros(()))
            phase_w = gathered.reshape(k * s_w, *window, c)                      # column k * s_w + rw
            pads = (row_w.lower, row_w.upper, row_h.lower, row_h.upper, row_d.lower, row_d.upper)
            volume = x.permute(to_first) if rank == 3 else x.permute(to_first)[:, :, None]
            padded = torch.nn.functional.pad(volume, pads)
            z = torch.nn.functional.conv3d(padded, phase_w.permute(0, 4, 1, 2, 3))  # [N, K * s_w, V, J, J']
            assert z.shape[2:] == (row_d.count, row_h.count, row_w.count)
            for rw in range(s_w):
                cols = z[:, rw::s_w]
                for jd in range(row_d.count):
                    for j in range(row_h.count):
                        for jq in range(row_w.count):
                            od, oh, ow = s_d * jd + rd, s_h * j + rh, s_w * jq + rw
                            if ow < want.shape[-1]:
                                if rank == 2:
                                    got[:, :, oh, ow] = cols[:, :, jd, j, jq]
                                else:
                                    got[:, :, od, oh, ow] = cols[:, :, jd, j, jq]
    monkeypatch.setattr(fuse_conv, "MIN_CONV_MACS", 0)     # claimed, but for its size
    assert fuse_conv._transposed_ok(conv) == claimed
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_an_nchw_residual_is_read_where_it_is():
    """level2/10's add_input: an NCHW model input the layout pass views as NHWC (a permute). The epilogue
    reads it at its NCHW index; the entry permutes the view back (contiguous: no copy) instead of making
    the NHWC view dense (a 268 MB copy at level2/10's size)."""
    residual = input_node("add_input", 1, (8, 64, 64, 64))
    view_nhwc = make_node("permute", [residual], dims=(0, 2, 3, 1))
    graph = convt_chain(extra=(residual,),
                        after=lambda y: make_node("hardswish", [make_node("add", [y, view_nhwc])]))
    group = next(g for g in plan_fusion(graph).groups if g.family == "conv")
    view = describe(group)
    assert [(o.node.op, o.kind) for o in view.operands] == [("param", "row"), ("permute", "full")]
    source = render(group)
    # the NCHW store applies the epilogue, reading the residual at the element it writes
    assert "constexpr bool kLate = true;" in source.text and "__ldg(p.e1 + at)" in source.text
    assert source.spec.operands[3][1] == (("permute", 0, 3, 1, 2), ("dense", 4))


def test_a_3d_conv_chain_is_one_group_of_rank_3():
    """Conv3d + bias + ReLU -> NCDHW (after the layout pass: NDHWC): the kernel's 3-D instantiation (TMA
    im2col over NDHWC), its output pixels (image, depth, row, column) the GEMM's M."""
    graph = conv_chain(n=2, d=10, h=20, w=24, c=16, k=48, kernel=(3, 3, 3), stride=(1, 2, 1),
                       padding=(1, 1, 0), dilation=(1, 1, 2))
    (group,) = match(graph, frozenset())
    assert [n.op for n in group.nodes] == ["conv", "add", "relu", "permute"]
    view = describe(group)
    assert view.rank == 3 and (view.d, view.t, view.z, view.p, view.q) == (10, 3, 10, 10, 20)
    assert view.pixels == 2 * 10 * 10 * 20 and view.gemm.k == 27 * 16
    source = render(group)
    assert "constexpr int kRank = 3;" in source.text
    # the 2-D sizes (height and width), then d, t, pads, stride, dilation, output depth, phase, phases along D
    sizes = "2, 20, 24, 16, 48, 3, 3, 1, 0, 1, 0, 2, 1, 1, 2, 48, 10, 20, 0, 1, 10, 3, 1, 1, 1, 1, 10, 0, 1"
    assert f"{sizes}, workspace, stream" in source.text
    assert source.spec.outputs == (("float32", (2, 48, 10, 10, 20)),)
    assert ir_comment(view).startswith("conv3d NDHWC [2, 10, 20, 24, 16] * [48, 3, 3, 3, 16]")
    # the 2-D chain is another instantiation
    flat = render(match(conv_chain(k=48), frozenset())[0])
    assert flat.name.rsplit("_", 1)[0] != source.name.rsplit("_", 1)[0]


@pytest.mark.parametrize("change", [
    {"padding": (17, 1, 1), "kernel": (35, 3, 3)},     # 3-D im2col: corners in [-16, 15], offsets under 31
    {"kernel": (3, 3, 33), "padding": (1, 1, 1)},
])
def test_3d_convs_past_tma_im2col_are_left_to_cudnn(change):
    geometry = {"kernel": (3, 3, 3), "padding": (1, 1, 1), "stride": (1, 1, 1), "dilation": (1, 1, 1)}
    assert match(conv_chain(n=2, d=40, h=20, w=40, c=16, k=48, **{**geometry, **change}), frozenset()) == []
    assert len(match(conv_chain(n=2, d=40, h=20, w=40, c=16, k=48, **geometry), frozenset())) == 1


def test_a_transposed_conv_with_more_phase_taps_than_the_table_is_left_to_cudnn():
    """A launch's phase weights are gathered by a table of at most MAX_PHASE_TAPS taps (7x7x7 at stride 1:
    343)."""
    geometry = {"stride": (1, 1, 1), "padding": (0, 0, 0), "output_padding": (0, 0, 0), "d": 8}
    assert match(convt_chain(n=2, h=16, w=16, c=32, k=32, kernel=(7, 7, 7), **geometry), frozenset()) == []
    assert len(match(convt_chain(n=2, h=16, w=16, c=32, k=32, kernel=(5, 5, 5), **geometry),
                     frozenset())) == 1


def test_3d_norm_statistics_and_pool_join_the_epilogue():
    """A Conv3d's BatchNorm (statistics over dims (0, 1, 2, 3)) and InstanceNorm (per image: (1, 2, 3)) split
    into the epilogue's statistics, and a global pool over (1, 2, 3) ends a group."""
    plan = plan_fusion(bn_chain(n=4, d=8, h=16, w=16, c=16, k=32))
    view = describe(next(g for g in plan.groups if g.family == "conv"))
    assert view.rank == 3 and len(view.statistics) == 4 and not view.per_image
    plan = plan_fusion(bn_chain(n=4, d=8, h=16, w=16, c=16, k=32, norm="instance"))
    view = describe(next(g for g in plan.groups if g.family == "conv"))
    assert view.per_image and [tuple(s.attr("dims")) for s in view.statistics] == [(1, 2, 3)] * 2
    (group,) = match(conv_chain(n=4, d=8, h=16, w=16, c=16, k=32, kernel=(3, 3, 3), padding=(1, 1, 1),
                                stride=(1, 1, 1), dilation=(1, 1, 1), pool="mean"), frozenset())
    view = describe(group)
    assert view.pooled and "over each image's 8x16x16 pixels" in ir_comment(view)


def test_a_3d_transposed_conv_is_a_launch_per_phase_along_d_and_h():
    """ConvTranspose3d stride 2: 2 x 2 launches (output phases along D and H), the 2 phases along W the
    GEMM's columns."""
    graph = convt_chain(n=2, d=8, h=16, w=16, c=32, k=32, kernel=(3, 3, 3), stride=(2, 2, 2),
                        padding=(1, 1, 1), output_padding=(1, 1, 1), after=lambda y: make_node("relu", [y]))
    (group,) = match(graph, frozenset())
    view = describe(group)
    assert view.rank == 3 and view.phased and view.columns == 64
    text = render(group).text
    assert text.count("_launch(static_cast<const float*>(in[0].data), phase_w") == 4
    assert "constexpr bool kPhased = true;" in text
    assert "4 launches (output phases along D and H; windows 1x1x2, 1x2x2, 2x1x2, 2x2x2)" in ir_comment(view)


def test_a_stride_1_transposed_conv_is_a_conv_launch():
    """A stride-1 transposed conv is the correlation with its kernel flipped: one launch, not phased, so it
    may be stored NHWC for other kernels with its statistics (level2/28's ConvTranspose3d, 2-D here too)."""
    for depth in ({}, {"d": 6}):
        rank = 3 if depth else 2
        graph = convt_chain(n=4, h=40, w=40, c=32, k=64, kernel=(3,) * rank, stride=(1,) * rank,
                            padding=(0,) * rank, output_padding=(0,) * rank, to_nchw=False,
                            after=lambda y: make_node("relu", [y]), **depth)
        (y,) = graph.outputs
        dims = tuple(range(rank + 1))
        stats = (make_node("mean", [y], dims=dims, keepdim=True),
                 make_node("var", [y], dims=dims, correction=0, keepdim=True))
        graph = graph.with_(outputs=(make_node("mul", [make_node("sub", [y, stats[0]]), stats[1]]),))
        group = next(g for g in plan_fusion(graph).groups if g.family == "conv")
        view = describe(group)
        assert view.transposed and not view.phased and len(view.statistics) == 2
        text = render(group).text
        assert "constexpr bool kPhased = false;" in text
        assert text.count("_launch(static_cast<const float*>(in[0].data), phase_w") == 1
