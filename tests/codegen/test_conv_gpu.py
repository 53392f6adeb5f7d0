"""Convolution family on the GPU: hand-built channels-last conv chains (odd sizes, tails in pixels and
channels, strides, dilations, asymmetric kernels, every epilogue operand kind) rendered, built with the
emitted file's own recipe (one library per case, built in parallel) and compared with the float64
interpretation of the same graph. The kernel computes in TF32 as eager's cuDNN does by default: its error
must stay within 4x cuDNN's TF32 error on the same inputs, or within 2^-9 of the output's scale where
cuDNN chose an exact FP32 algorithm (tiny shapes)."""

from __future__ import annotations

import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.conv import render
from kernelwright.environment import cutlass_include_dir
from kernelwright.fuse import plan_fusion
from kernelwright.fuse.conv import describe
from kernelwright.fuse.plan import make_group
from kernelwright.ir.graph import Graph
from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import const_node, input_node, make_node, param_node

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cutlass_include_dir() is None, reason="no CUTLASS headers")]

sys.path.insert(0, str(Path(__file__).parents[1] / "fuse"))
from test_conv_match import bn_chain, conv_chain, convt_chain  # noqa: E402


def _chain(n, h, w, c, k, kernel=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), epilogue="relu",
           pool=None):
    x = input_node("x", 0, (n, h, w, c))
    weight, bias = param_node("weight", (k, *kernel, c)), param_node("bias", (k,))
    y = make_node("conv", [x, weight], stride=stride, padding=padding, dilation=dilation, transposed=False,
                  output_padding=(0, 0), groups=1, has_bias=False, channels_last=True)
    y = make_node("add", [y, bias])
    inputs, params = [x], [weight, bias]
    if epilogue == "relu":
        y = make_node("relu", [y])
    elif epilogue == "mish_tanh":
        y = make_node("tanh", [make_node("mish", [y])])
    elif epilogue == "operands":
        # a residual (full NHWC), a per-pixel factor (col) and a per-channel scale (row), then a sigmoid
        residual = input_node("residual", 1, y.shape)
        pixel = input_node("pixel", 2, (*y.shape[:3], 1))
        scale = param_node("scale", (k,))
        y = make_node("sigmoid", [make_node("mul", [make_node("mul", [make_node("add", [y, residual]),
                                                                      pixel]), scale])])
        inputs += [residual, pixel]
        params.append(scale)
    elif epilogue == "gelu":
        y = make_node("gelu", [y], approximate="none")
    elif epilogue in ("softmax", "log_softmax"):
        # over the channels (level2/21 after the layout pass), after a per-channel scale
        scale = param_node("scale", (k,))
        y = make_node(epilogue, [make_node("mul", [y, scale])], dim=3)
        params.append(scale)
    if pool is None:
        out = make_node("permute", [y], dims=(0, 3, 1, 2))
    else:
        # global pooling ("mean" or "sum") over the pixels, as the layout pass leaves F.adaptive_avg_pool2d
        out = make_node(pool, [y], dims=(1, 2), keepdim=pool == "mean")
    return Graph(inputs=tuple(inputs), params=tuple(params), outputs=(out,))


CASES = {
    # pixels not a multiple of 4 (4-byte stores), channels past one 128 tile and not a multiple of 4
    "odd_pixels_channel_tail": lambda: _chain(2, 33, 33, 64, 201),
    # a 1x1 conv, K <= 64 (the 64-wide tile) with a tail, 16-byte stores
    "pointwise_narrow": lambda: _chain(3, 24, 24, 120, 36, kernel=(1, 1), padding=(0, 0), epilogue="none"),
    # strides, dilations, asymmetric padding per dim, every epilogue operand kind
    "strided_dilated_operands": lambda: _chain(5, 41, 37, 16, 64, kernel=(5, 5), stride=(2, 3),
                                               padding=(3, 1), dilation=(2, 1), epilogue="operands"),
    # an asymmetric kernel with level2's Mish + Tanh epilogue
    "asymmetric_mish_tanh": lambda: _chain(4, 40, 64, 32, 128, kernel=(3, 5), padding=(1, 2),
                                           epilogue="mish_tanh"),
    # three input channels (padded to 4 by the entry), 16 output channels
    "three_channels": lambda: _chain(6, 66, 50, 3, 16, epilogue="mish_tanh"),
    # several tiles per consumer warpgroup (349 tiles on 132 SMs: the persistent loop), no padding with a
    # 3x3 kernel, pixels not a multiple of 4
    "persistent_tiles": lambda: _chain(12, 63, 63, 32, 128, padding=(0, 0), epilogue="relu"),
    # one output pixel per image, one image
    "one_pixel": lambda: _chain(1, 3, 3, 4, 4, padding=(0, 0)),
    # a level-2-sized problem (0.5 GB output), no padding, pixels not a multiple of 4; its launcher (tile and
    # epilogue) is the asymmetric case's, in another library of this process: each library keeps its own
    # launch state (an inline function's statics were shared, and this launch failed: 2026-11-27)
    "level2_size": lambda: _chain(32, 127, 127, 64, 128, padding=(0, 0), epilogue="mish_tanh"),
    # global pooling in the epilogue: 33x33 pixels an image (tiles cross images), 201 channels (a tail)
    "pooled_mean_odd": lambda: _chain(3, 33, 33, 64, 201, epilogue="gelu", pool="mean"),
    # 6x6 = 36 pixels an image (up to five images a tile), a sum, K <= 64, several tiles per warpgroup
    "pooled_sum_small_images": lambda: _chain(400, 8, 8, 32, 48, padding=(0, 0), epilogue="relu", pool="sum"),
    # a softmax over 128 channels on the staged tile, pixels not a multiple of 4 (the 4-byte stores)
    "channel_softmax": lambda: _chain(3, 31, 29, 64, 128, epilogue="softmax"),
    # a log-softmax over 40 channels (the 64-wide tile, a tail of 24), 16-byte stores
    "channel_log_softmax_narrow": lambda: _chain(4, 32, 32, 32, 40, epilogue="log_softmax"),
    # a log-softmax over 64 channels: a whole 64-wide tile (the column held in registers), 4-byte stores
    "channel_log_softmax_full": lambda: _chain(3, 30, 29, 32, 64, epilogue="log_softmax"),
    # level2/15's size: 64 x 126 x 126 pixels, 128 channels (the 520 MB conv output never written)
    "pooled_level2_size": lambda: _chain(64, 128, 128, 64, 128, padding=(0, 0), epilogue="gelu", pool="mean"),
    # level2/21's size: 32 x 128 x 128 pixels, a softmax over 128 channels, NCHW
    "softmax_level2_size": lambda: _chain(32, 128, 128, 64, 128, epilogue="softmax"),
    # the 96-wide tile: a softmax over 80 channels (a tail of 16), odd pixels; Mish + Tanh over 96
    "softmax_96_tile": lambda: _chain(4, 33, 31, 32, 80, epilogue="softmax"),
    "mish_tanh_96_tile": lambda: _chain(8, 64, 64, 64, 96, epilogue="mish_tanh"),
}


# A train-mode BatchNorm after the conv (`fuse_conv.norms_apart`): the conv group stores the epilogue's
# value NHWC and computes the norm's mean and var and the running statistics' mean and var (correction 1); an
# InstanceNorm's mean and var per image
BN_CASES = {
    # level2/02's size: 4096 tiles, so the tile moments are combined twice
    "bn_level2_size": lambda: bn_chain(32, 128, 128, 64, 128),
    # 201 channels (odd: 4-byte stores; two channel tiles, a tail), 24 tiles (one combine), the last partial
    "bn_odd_channels": lambda: bn_chain(3, 33, 31, 20, 201),
    # the 64-wide tile (40 channels), 497 tiles: eight chunks, the last partial
    "bn_narrow": lambda: bn_chain(16, 63, 63, 32, 40),
    # InstanceNorm (statistics per image and channel): level2/19's size, 124 tiles an image (two chunks)
    "instance_level2_size": lambda: bn_chain(32, 128, 128, 64, 128, norm="instance"),
    # 7 x 9 = 63 pixels an image: up to three images a tile; 36 channels (the 64-wide tile, a tail)
    "instance_small_images": lambda: bn_chain(700, 7, 9, 32, 36, norm="instance"),
    # 201 channels, 33 x 31 pixels an image (tiles cross images)
    "instance_odd": lambda: bn_chain(5, 33, 31, 20, 201, norm="instance"),
    # the 96-wide tile: 72 channels (a tail of 24)
    "bn_96_tile": lambda: bn_chain(8, 40, 40, 32, 72),
}


def _hardswish_residual(n, h, w, c, k):
    """level2/10: ConvTranspose2d (3x3, stride 2, padding 1, output padding 1) + bias + an NCHW input (read
    through the layout pass's NHWC view of it, where it is), hardswish"""
    residual = input_node("residual", 1, (n, k, 2 * h, 2 * w))
    nhwc = make_node("permute", [residual], dims=(0, 2, 3, 1))
    return convt_chain(n, h, w, c, k, extra=(residual,),
                       after=lambda y: make_node("hardswish", [make_node("add", [y, nhwc])]))


def _nchw_residual(n, h, w, c, k, odd_channels=False):
    """conv 3x3 + bias + an NCHW model input (the epilogue applied by the NCHW store, `kLate`), ReLU"""
    residual = input_node("residual", 1, (n, k, h, w))
    nhwc = make_node("permute", [residual], dims=(0, 2, 3, 1))
    return conv_chain(n, h, w, c, k, extra=(residual,),
                      epilogue=lambda y, extra: make_node("relu", [make_node("add", [y, nhwc])]))


def _reduced(op, make, keepdim=True, post=lambda y, extra: y, extra=()):
    """`make`'s chain (its value NHWC) -> `op` over the channels -> `post`"""
    graph = make(extra)
    (y,) = graph.outputs
    out = post(make_node(op, [y], dims=(3,), keepdim=keepdim), extra)
    return Graph(inputs=graph.inputs, params=graph.params, outputs=(out,))


def _conv(n, h, w, c, k, **kwargs):
    return lambda extra: conv_chain(n, h, w, c, k, to_nchw=False, extra=extra, epilogue=lambda y, e: y,
                                    **kwargs)


def _convt(n, h, w, c, k, **kwargs):
    return lambda extra: convt_chain(n, h, w, c, k, to_nchw=False, extra=extra, **kwargs)


def _softmax_post(n, h, w, c, k):
    """level2/27: ConvTranspose2d (4x4, stride 2) + bias, a softmax over the channels, + a per-channel bias,
    * 3, sigmoid, NCHW: the ops after the softmax applied by the store"""
    bias = param_node("bias2", (k,))

    def after(y):
        soft = make_node("add", [make_node("softmax", [y], dim=3), bias])
        return make_node("sigmoid", [make_node("mul", [soft, const_node(3.0)])])

    graph = convt_chain(n, h, w, c, k, kernel=(4, 4), output_padding=(0, 0), after=after)
    return graph.with_(params=(*graph.params, bias))


def _pixel_scale(y, extra):
    return make_node("add", [make_node("mul", [y, extra[0]]), extra[1]])


# A reduction over the channels on the staged tile (every channel in it), then pointwise ops by the store, a
# value a pixel stored (the conv's output never); a softmax's pointwise ops applied by the NCHW store
REDUCED_CASES = {
    # a min over 40 channels (the 64-wide tile, a tail of 8), 31 x 29 pixels, then tanh twice
    "reduce_min_tanh_odd": lambda: _reduced("amin", _conv(8, 31, 29, 32, 40),
                                            post=lambda y, e: make_node("tanh", [make_node("tanh", [y])])),
    # a logsumexp over 128 channels, the channel dim dropped
    "reduce_logsumexp": lambda: _reduced("logsumexp", _conv(4, 32, 32, 32, 128), keepdim=False),
    # a mean over 64 channels, * a tensor a pixel, + one value
    "reduce_mean_pixel": lambda: _reduced("mean", _conv(5, 20, 22, 64, 64), post=_pixel_scale, extra=(
        input_node("pixel", 1, (5, 20, 22, 1)), input_node("offset", 2, (1,)))),
    # a sum over a transposed conv's 24 channels x 4 phases along W (three along H, odd sizes), then ReLU
    "reduce_sum_convt_3_4": lambda: _reduced("sum", _convt(10, 20, 17, 32, 24, kernel=(5, 6), stride=(3, 4),
                                                           padding=(2, 1), output_padding=(1, 2)),
                                             post=lambda y, e: make_node("relu", [y])),
    # level2/26's size: ConvTranspose2d 3x3 stride 2, 64 -> 32 channels, their min (then GELU)
    "convt_min_level2_size": lambda: _reduced("amin", _convt(32, 64, 64, 64, 32), post=lambda y, e: make_node(
        "gelu", [y], approximate="none")),
    # a max over 128 channels at level 2's size (32 x 128 x 128 pixels)
    "reduce_max_level2_size": lambda: _reduced("amax", _conv(32, 128, 128, 64, 128)),
    # level2/27's size
    "convt_softmax_post": lambda: _softmax_post(16, 64, 64, 48, 64),
    # the 96-wide tile: level2/30's max over 96 channels (130 x 130, no padding)
    "reduce_max_96_level2_size": lambda: _reduced("amax", _conv(32, 130, 130, 64, 96, padding=(0, 0))),
}


# Planned as the compiler plans them (their inputs may be views: an NCHW input's NHWC permute). Transposed
# convs (`fuse.conv.phases`): a launch per output phase along H, the phases along W the GEMM's columns
PLANNED_CASES = {
    # an NCHW residual read by the store: 33 x 31 pixels (4-byte stores), 201 channels (a tail)
    "residual_nchw_odd": lambda: _nchw_residual(3, 33, 31, 20, 201),
    # ... 32 x 32 pixels: the 16-byte stores
    "residual_nchw": lambda: _nchw_residual(8, 32, 32, 64, 128),
    # level2/10's size: 16 x 256 x 256 outputs, 64 channels (two phases: 128 columns), a full residual
    "convt_level2_size": lambda: _hardswish_residual(16, 128, 128, 128, 64),
    # 19 input channels (padded to 20), 40 channels (80 columns: a tail), odd sizes, output padding on W only
    "convt_odd": lambda: convt_chain(10, 33, 31, 19, 40, output_padding=(0, 1),
                                     after=lambda y: make_node("relu", [y])),
    # level2/27's geometry (4x4, stride 2): a softmax over each W phase's 64 channels on the staged tile
    "convt_softmax": lambda: convt_chain(16, 64, 64, 48, 64, kernel=(4, 4), output_padding=(0, 0),
                                         after=lambda y: make_node("softmax", [y], dim=3)),
    # three phases along H, four along W (24 channels: 96 of 128 columns), asymmetric kernel and padding
    "convt_strides_3_4": lambda: convt_chain(10, 20, 17, 32, 24, kernel=(5, 6), stride=(3, 4), padding=(2, 1),
                                             output_padding=(1, 2), after=lambda y: make_node("tanh", [y])),
    # stride 1: one phase, the flipped kernel
    "convt_stride_1": lambda: convt_chain(4, 40, 40, 32, 64, stride=(1, 1), output_padding=(0, 0),
                                          after=lambda y: make_node("gelu", [y], approximate="none")),
}


def _stride_1_convt_statistics(n, d, h, w, c, k):
    """level2/28's ConvTranspose3d (stride 1: the kernel flipped, one launch) + bias + ReLU, stored NDHWC with
    its mean and var per channel, then normalized by them (the apply is another kernel's)"""
    graph = convt_chain(n, h, w, c, k, kernel=(3, 3, 3), stride=(1, 1, 1), padding=(0, 0, 0),
                        output_padding=(0, 0, 0), to_nchw=False, after=lambda y: make_node("relu", [y]), d=d)
    (y,) = graph.outputs
    mean = make_node("mean", [y], dims=(0, 1, 2, 3), keepdim=True)
    var = make_node("var", [y], dims=(0, 1, 2, 3), correction=0, keepdim=True)
    return graph.with_(outputs=(make_node("mul", [make_node("sub", [y, mean]), var]),))


def _nchw_residual_3d(n, d, h, w, c, k):
    """Conv3d 3x3x3 + bias + an NCDHW model input (applied by the store as it writes), ReLU"""
    residual = input_node("residual", 1, (n, k, d, h, w))
    ndhwc = make_node("permute", [residual], dims=(0, 2, 3, 4, 1))
    return conv_chain(n, h, w, c, k, kernel=(3, 3, 3), stride=(1, 1, 1), padding=(1, 1, 1),
                      dilation=(1, 1, 1), d=d, extra=(residual,),
                      epilogue=lambda y, extra: make_node("relu", [make_node("add", [y, ndhwc])]))


def _conv3d(n, d, h, w, c, k, **kwargs):
    geometry = {"kernel": (3, 3, 3), "stride": (1, 1, 1), "padding": (1, 1, 1), "dilation": (1, 1, 1),
                **kwargs}
    return conv_chain(n, h, w, c, k, d=d, **geometry)


# 3-D convs (NDHWC, TMA im2col over five dims): the output pixels (image, depth, row, column) the GEMM's M,
# the NCDHW store's plane an image's depth x height x width
CASES_3D = {
    # odd sizes, a stride along H, a dilation along W, no padding along W; 72 channels (the 96-wide tile)
    "conv3d_odd": lambda: _conv3d(2, 9, 17, 19, 20, 72, stride=(1, 2, 1), padding=(1, 1, 0),
                                  dilation=(1, 1, 2)),
    # level2/29's conv (16 x 18 x 34 x 34 x 16 -> 64, no padding), Mish + Tanh
    "conv3d_level2_size": lambda: _conv3d(16, 18, 34, 34, 16, 64, padding=(0, 0, 0),
                                          epilogue=lambda y, e: make_node("tanh", [make_node("mish", [y])])),
    # a global mean over each image's 7 x 9 x 11 pixels, 40 channels
    "conv3d_pooled": lambda: _conv3d(12, 7, 9, 11, 16, 40, pool="mean"),
    # a softmax over 48 channels, 3-D
    "conv3d_softmax": lambda: _conv3d(16, 6, 10, 13, 16, 48,
                                      epilogue=lambda y, e: make_node("softmax", [y], dim=4)),
    # an NCDHW residual read by the store, odd pixels
    "conv3d_residual_nchw": lambda: _nchw_residual_3d(10, 5, 11, 13, 12, 36),
    # a BatchNorm and an InstanceNorm of a Conv3d: statistics over (0, 1, 2, 3) and per image
    "conv3d_bn": lambda: bn_chain(4, 7, 15, 64, 96, d=6),
    "conv3d_instance": lambda: bn_chain(10, 9, 11, 16, 40, d=5, norm="instance"),
    # ConvTranspose3d stride 2 (level1/69's geometry, smaller): 2 x 2 launches, 2 phases along W as columns
    "convt3d_stride_2": lambda: convt_chain(4, 16, 16, 32, 32, kernel=(3, 3, 3), stride=(2, 2, 2),
                                            padding=(1, 1, 1), output_padding=(1, 1, 1), d=8,
                                            after=lambda y: make_node("relu", [y])),
    # odd sizes, strides (2, 1, 4): two phases along D, four along W
    "convt3d_odd": lambda: convt_chain(14, 9, 7, 20, 24, kernel=(3, 3, 4), stride=(2, 1, 4),
                                       padding=(1, 1, 0), output_padding=(1, 0, 0), d=5,
                                       after=lambda y: make_node("gelu", [y], approximate="none")),
    # level2/28's size: stride 1, stored NDHWC with its statistics
    "convt3d_stride_1_level2_size": lambda: _stride_1_convt_statistics(16, 14, 30, 30, 32, 64),
    # three input channels (x and the weight padded to 4 by the entry), 3-D; a transposed one of 19
    "conv3d_three_channels": lambda: _conv3d(16, 12, 31, 33, 3, 40, epilogue=lambda y, e: make_node(
        "gelu", [y], approximate="none")),
    "convt3d_odd_channels": lambda: convt_chain(8, 10, 11, 19, 32, kernel=(3, 3, 3), stride=(2, 2, 2),
                                                padding=(1, 1, 1), output_padding=(0, 1, 1), d=6,
                                                after=lambda y: make_node("sigmoid", [y])),
}


def _group(graph: Graph):
    return make_group(graph, "conv", [n for n in graph.nodes() if not n.is_leaf])


def _conv_group(graph: Graph):
    return next(g for g in plan_fusion(graph).groups if g.family == "conv")


@pytest.fixture(scope="module")
def built():
    """Every case's library, built at once (each CUTLASS conv translation unit is ~20-40 s of nvcc)."""
    groups = {name: _group(make()) for name, make in CASES.items()}
    groups.update({name: _conv_group(make()) for name, make in {**BN_CASES, **PLANNED_CASES,
                                                                 **REDUCED_CASES, **CASES_3D}.items()})
    kernels = {name: render(group) for name, group in groups.items()}
    with ThreadPoolExecutor(max_workers=len(kernels)) as pool:
        built = pool.map(lambda k: build_extension(assemble([k])).module, kernels.values())
        modules = dict(zip(kernels, built, strict=True))
    return groups, kernels, modules


def _graph(group) -> Graph:
    """The group's outputs from the model inputs and parameters it reads (through the views it takes as
    inputs: an NCHW input's NHWC permute, say)."""
    leaves: dict[int, object] = {}

    def visit(node):
        if node.is_leaf:
            leaves.setdefault(id(node), node)
        else:
            for i in node.inputs:
                visit(i)

    for node in group.inputs:
        visit(node)
    return Graph(inputs=tuple(n for n in leaves.values() if n.op == "input"),
                 params=tuple(n for n in leaves.values() if n.op == "param"), outputs=group.outputs)


def _arguments(group, graph: Graph, inputs, params) -> list[torch.Tensor]:
    """The kernel's operands: the group's inputs, views of the model's evaluated as ATen would."""
    by_name = {**{n.name: t for n, t in zip(graph.inputs, inputs, strict=True)}, **params}
    return [by_name[n.name] if n.is_leaf else interpret(graph.with_(outputs=(n,)), inputs, params)[0][0]
            for n in group.inputs]


def _inputs(graph: Graph, seed: int) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = [torch.randn(i.shape, generator=gen, device="cuda") for i in graph.inputs]
    params = {}
    for p in graph.params:
        fan_in = math.prod(p.shape[1:]) if len(p.shape) >= 4 else 1
        params[p.name] = torch.randn(p.shape, generator=gen, device="cuda") / fan_in ** 0.5
    return inputs, params


@pytest.mark.parametrize("case", [*CASES, *BN_CASES, *PLANNED_CASES, *REDUCED_CASES, *CASES_3D])
def test_conv_matches_float64(built, case):
    groups, kernels, modules = built
    group = groups[case]
    graph = _graph(group)
    inputs, params = _inputs(graph, seed=len(case))
    expected, _ = interpret(graph, [t.double() for t in inputs], {k: v.double() for k, v in params.items()})
    eager, _ = interpret(graph, inputs, params)              # cuDNN, TF32 allowed as by default
    arguments = _arguments(group, graph, inputs, params)
    got = getattr(modules[case], kernels[case].name)(arguments)
    view = describe(group)
    if view.pooled or view.statistics:
        # twice in a row: the sums are written, not added to, and added in one order
        again = getattr(modules[case], kernels[case].name)(arguments)
        assert all(torch.equal(a, b) for a, b in zip(again, got, strict=True))
    for j, (mine, cudnn_out, want) in enumerate(zip(got, eager, expected, strict=True)):
        assert mine.shape == want.shape and mine.is_contiguous()
        scale = want.abs().max().item()
        ours, cudnn = (float((t.double() - want).abs().max()) for t in (mine, cudnn_out))
        print(f"{case} output {j}: max error {ours:.3g} (cuDNN {cudnn:.3g}), output scale {scale:.3g}")
        assert ours <= max(4 * cudnn, scale * 2**-9), f"output {j}: error {ours:.3g} vs cuDNN {cudnn:.3g}"


@pytest.mark.parametrize("case", ["level2_size", "pooled_level2_size", "softmax_level2_size",
                                  "bn_level2_size", "instance_level2_size", "convt_level2_size",
                                  "convt_softmax", "convt_softmax_post", "convt_min_level2_size",
                                  "reduce_max_level2_size", "reduce_max_96_level2_size", "conv3d_level2_size",
                                  "convt3d_stride_2", "convt3d_stride_1_level2_size"])
def test_level2_size_speed(built, case):
    """Information (not a bar): the fused kernel against ATen (cuDNN's NHWC conv, then the bias, the
    activations and the transpose, or the global mean, as passes over its 0.5 GB output); the compiler
    chooses between its own plans by measurement. The pooled kernel writes nothing but [N, K]."""
    groups, kernels, modules = built
    group = groups[case]
    graph = _graph(group)
    inputs, params = _inputs(graph, seed=0)
    ordered = _arguments(group, graph, inputs, params)
    kernel = getattr(modules[case], kernels[case].name)
    view = describe(group)

    def time_ms(run, reps=20):
        run()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            run()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / reps * 1e3

    ours = time_ms(lambda: kernel(ordered))
    aten = time_ms(lambda: [t.contiguous() for t in interpret(graph, inputs, params)[0]])
    flops = 2 * view.macs
    epilogue = " + ".join(n.op for n in view.epilogue)
    statistics = "".join(f" + {n.op}" for n in view.statistics)
    print(f"{case}: conv + {epilogue} -> {view.output.op}{statistics}: ours {ours:.3f} ms "
          f"({flops / ours / 1e9:.0f} TFLOP/s), ATen {aten:.3f} ms")
    # each launch's own GPU time (a transposed conv's phase weights and launches; ATen's kernels)
    for label, run in (("ours", lambda: kernel(ordered)),
                       ("ATen", lambda: [t.contiguous() for t in interpret(graph, inputs, params)[0]])):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for _ in range(5):
                run()
            torch.cuda.synchronize()
        kernels = sorted(((e.device_time_total / 5, e.key) for e in profile.key_averages()
                          if e.device_time_total > 0), reverse=True)
        print(f"  {label} kernels (us a call): " + "; ".join(f"{t:.1f} {k[:60]}" for t, k in kernels[:6]))
