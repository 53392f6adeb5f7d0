"""Hand-built IR graphs for the reduction, softmax, norm and scan families, shared by the matcher tests,
the nvcc compile test and the GPU tests. Each case builds a graph; `random_inputs` makes its tensors."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import buffer_node, const_node, input_node, make_node, param_node


def x_in(*shape: int, name: str = "x", index: int = 0) -> Node:
    return input_node(name, index, shape)


def one(op: str, shape: tuple[int, ...], **attrs) -> Graph:
    x = x_in(*shape)
    return Graph((x,), (), (make_node(op, [x], **attrs),))


def rms_norm(shape: tuple[int, ...], eps: float = 1e-6) -> Graph:
    x = x_in(*shape)
    w = param_node("weight", (shape[-1],))
    var = make_node("mean", [make_node("pow", [x, const_node(2)])], dims=(-1,), keepdim=True)
    scale = make_node("rsqrt", [make_node("add", [var, const_node(eps)])])
    return Graph((x,), (w,), (make_node("mul", [make_node("mul", [x, scale]), w]),))


def layer_norm_by_hand(shape: tuple[int, ...], eps: float = 1e-5) -> Graph:
    x = x_in(*shape)
    centered = make_node("sub", [x, make_node("mean", [x], dims=(-1,), keepdim=True)])
    var = make_node("mean", [make_node("mul", [centered, centered])], dims=(-1,), keepdim=True)
    y = make_node("mul", [centered, make_node("rsqrt", [make_node("add", [var, const_node(eps)])])])
    return Graph((x,), (), (y,))


def l2_normalize(shape: tuple[int, ...]) -> Graph:
    x = x_in(*shape)
    norm = make_node("sqrt", [make_node("sum", [make_node("mul", [x, x])], dims=(1,), keepdim=True)])
    return Graph((x,), (), (make_node("div", [x, norm]),))


def softmax_of_scaled(shape: tuple[int, ...], divisor: float, op: str = "softmax") -> Graph:
    """softmax(x / divisor) (attention's scores / sqrt(d)): the division fused ahead of the softmax."""
    x = x_in(*shape)
    return Graph((x,), (), (make_node(op, [make_node("div", [x, const_node(divisor)])], dim=-1),))


def cosine_similarity_loss(shape: tuple[int, int], eps: float = 1e-8) -> Graph:
    """1 - cos(x, y) per row, as F.cosine_similarity writes it: each input divided by its clamped norm, then
    the dot product. The norm of y reads y through a prologue of its own (y * y), beside the group that
    reads y for the dot product: one group, y read once."""
    x, y = x_in(*shape), x_in(*shape, name="y", index=1)

    def unit(v: Node) -> Node:
        norm = make_node("sqrt", [make_node("sum", [make_node("mul", [v, v])], dims=(1,), keepdim=True)])
        return make_node("div", [v, make_node("clamp", [norm], min=eps, max=None)])

    dot = make_node("sum", [make_node("mul", [unit(x), unit(y)])], dims=(1,), keepdim=False)
    return Graph((x, y), (), (make_node("sub", [const_node(1.0), dot]),))


def smooth_l1_mean(shape: tuple[int, ...], mask_out: bool = False) -> Graph:
    """SmoothL1 loss as capture writes it: a bool predicate (|d| < 1) choosing between two branches
    (`where`), then the mean. `mask_out`: the predicate is an output too (another reader outside)."""
    x, y = x_in(*shape), x_in(*shape, name="y", index=1)
    d = make_node("abs", [make_node("sub", [x, y])])
    small = make_node("lt", [d, const_node(1.0)])
    quad = make_node("mul", [make_node("pow", [d, const_node(2)]), const_node(0.5)])
    chosen = make_node("where", [small, quad, make_node("sub", [d, const_node(0.5)])])
    loss = make_node("mean", [chosen], dims=None)
    return Graph((x, y), (), (loss, small) if mask_out else (loss,))


def mean_center(shape: tuple[int, ...], dims: tuple[int, ...]) -> Graph:
    x = x_in(*shape)
    return Graph((x,), (), (make_node("sub", [x, make_node("mean", [x], dims=dims, keepdim=True)]),))


def instance_norm_by_hand(shape: tuple[int, ...], eps: float = 1e-5) -> Graph:
    x = x_in(*shape)
    dims = tuple(range(2, len(shape)))
    mean = make_node("mean", [x], dims=dims, keepdim=True)
    var = make_node("var", [x], dims=dims, correction=0, keepdim=True)
    scale = make_node("rsqrt", [make_node("add", [var, const_node(eps)])])
    y = make_node("mul", [make_node("sub", [x, mean]), scale])
    return Graph((x,), (), (y,))


def layer_norm(shape: tuple[int, ...], ndim: int, affine: bool) -> Graph:
    x = x_in(*shape)
    params = (param_node("ln.weight", shape[-ndim:]), param_node("ln.bias", shape[-ndim:])) if affine else ()
    y = make_node("layer_norm", [x, *params], normalized_ndim=ndim, normalized_shape=shape[-ndim:], eps=1e-5,
                  has_weight=affine, has_bias=affine)
    return Graph((x,), params, (y,))


def group_norm(shape: tuple[int, ...], groups: int, channel_dim: int = 1,
               epilogue: str | None = None) -> Graph:
    """GroupNorm with weight and bias; `channel_dim` 3 on [N, H, W, C] is the form the layout pass gives
    a GroupNorm after a channels-last conv; `epilogue` a unary pointwise op applied to its output."""
    x = x_in(*shape)
    c = shape[channel_dim]
    params = (param_node("gn.weight", (c,)), param_node("gn.bias", (c,)))
    y = make_node("group_norm", [x, *params], groups=groups, eps=1e-5, has_weight=True, has_bias=True,
                  channel_dim=channel_dim)
    if epilogue is not None:
        y = make_node(epilogue, [y])
    return Graph((x,), params, (y,))


def batch_norm_train(shape: tuple[int, ...], momentum: float = 0.1, channel_dim: int = 1,
                     epilogue: str | None = None) -> Graph:
    """BatchNorm in training mode as capture writes it: the normalization node, and the running-stat
    updates as ordinary IR (mean, unbiased var) in `mutations`. The node itself takes no running stats
    (capture/aten.py): given them, its ATen source (F.batch_norm, training=True) would update them in
    place, and the blend below would read the already-updated buffers. `channel_dim` 3 on [N, H, W, C]
    is the form the layout pass gives it after a channels-last conv; `epilogue` a unary pointwise op
    applied to its output."""
    x = x_in(*shape)
    c = shape[channel_dim]
    w, b = param_node("bn.weight", (c,)), param_node("bn.bias", (c,))
    rm, rv = buffer_node("bn.running_mean", (c,)), buffer_node("bn.running_var", (c,))
    y = make_node("batch_norm", [x, w, b], training=True, momentum=momentum, eps=1e-5,
                  has_weight=True, has_bias=True, has_running=False, channel_dim=channel_dim)
    if epilogue is not None:
        y = make_node(epilogue, [y])
    dims = tuple(d for d in range(len(shape)) if d != channel_dim)
    mean = make_node("mean", [x], dims=dims)
    var = make_node("var", [x], dims=dims, correction=1)

    def update(old: Node, new: Node) -> Node:
        return make_node("add", [make_node("mul", [old, const_node(1 - momentum)]),
                                 make_node("mul", [new, const_node(momentum)])])

    return Graph((x,), (w, b, rm, rv), (y,), mutations=(("bn.running_mean", update(rm, mean)),
                                                         ("bn.running_var", update(rv, var))), training=True)


def _channel_shape(rank: int, c: int, size: int) -> tuple[int, ...]:
    return (1,) * c + (size,) + (1,) * (rank - 1 - c)


def norm_then_reduce(shape, c, *, norm="group_norm", groups=1, op="amin", dims=None, keepdim=True,
                     tail="clamp", bias=True, chain=("relu",)) -> Graph:
    """x (+ a channel bias) -> norm -> pointwise chain -> reduce -> tail: the level-2 shape of the
    pattern (a conv's output, its bias, GroupNorm, min over channels, clamp). A "residual" in `chain`
    adds a second input of x's shape (a ResNet block's shortcut)."""
    x = input_node("x", 0, shape)
    inputs = [x]
    size = shape[c]
    params: list[Node] = []
    h = x
    if bias:
        cb = param_node("cb", (size,))
        params.append(cb)
        h = make_node("add", [x, make_node("reshape", [cb], shape=_channel_shape(len(shape), c, size))])
    if norm == "layer_norm":
        w, b = param_node("w", shape[-1:]), param_node("b", shape[-1:])
        y = make_node("layer_norm", [h, w, b], normalized_ndim=1, normalized_shape=shape[-1:], eps=1e-5,
                      has_weight=True, has_bias=True)
    elif norm == "batch_norm":
        w, b = param_node("w", (size,)), param_node("b", (size,))
        y = make_node("batch_norm", [h, w, b], training=True, momentum=0.1, eps=1e-5, has_weight=True,
                      has_bias=True, has_running=False, channel_dim=c)
    else:
        w, b = param_node("w", (size,)), param_node("b", (size,))
        y = make_node("group_norm", [h, w, b], groups=groups, eps=1e-5, has_weight=True, has_bias=True,
                      channel_dim=c)
    params += [w, b]
    for unary in chain:
        if unary == "residual":
            inputs.append(input_node("r", 1, shape))
            y = make_node("add", [y, inputs[-1]])
        else:
            y = make_node(unary, [y])
    extra = {"correction": 1} if op == "var" else {}
    out = make_node(op, [y], dims=(c,) if dims is None else dims, keepdim=keepdim, **extra)
    if tail:
        out = make_node(tail, [out], min=-0.5, max=0.5)
    mutations = ()
    if norm == "batch_norm":      # the running mean as capture writes it: a reduction of the norm's input
        rm = buffer_node("rm", (size,))
        params.append(rm)
        stat = make_node("mean", [h], dims=tuple(d for d in range(len(shape)) if d != c))
        mutations = (("rm", make_node("add", [make_node("mul", [rm, const_node(0.9)]),
                                               make_node("mul", [stat, const_node(0.1)])])),)
    return Graph(tuple(inputs), tuple(params), (out,), mutations=mutations, training=norm == "batch_norm")


def residual_batch_norms(shape: tuple[int, ...]) -> Graph:
    """relu(bn1(x) + bn2(y)), both in training mode (a ResNet block whose shortcut has a conv and a
    BatchNorm): the shortcut's norm is a producer of the sum, over the same rows: one kernel, both sets of
    statistics in its first pass, no intermediate for bn2(y)."""
    x, y = x_in(*shape), x_in(*shape, name="y", index=1)
    c = shape[1]
    params, mutations, normed = [], [], []
    for name, value in (("bn1", x), ("bn2", y)):
        w, b = param_node(f"{name}.weight", (c,)), param_node(f"{name}.bias", (c,))
        rm, rv = buffer_node(f"{name}.running_mean", (c,)), buffer_node(f"{name}.running_var", (c,))
        params += [w, b, rm, rv]
        normed.append(make_node("batch_norm", [value, w, b], training=True, momentum=0.1, eps=1e-5,
                                has_weight=True, has_bias=True, has_running=False, channel_dim=1))
        dims = tuple(d for d in range(len(shape)) if d != 1)
        for buffer, stat in ((rm, make_node("mean", [value], dims=dims)),
                             (rv, make_node("var", [value], dims=dims, correction=1))):
            blend = make_node("add", [make_node("mul", [buffer, const_node(0.9)]),
                                      make_node("mul", [stat, const_node(0.1)])])
            mutations.append((buffer.name, blend))
    out = make_node("relu", [make_node("add", normed)])
    return Graph((x, y), tuple(params), (out,), mutations=tuple(mutations), training=True)


def log_softmax_divergence(shape: tuple[int, int], temperature: float = 2.0, row_sums: bool = False) -> Graph:
    """exp(lt) * (lt - ls) per element with lt, ls the log-softmaxes of t / T and s / T (a distillation
    loss before its sum): the teacher's log_softmax is a producer of the difference, over the same rows:
    one kernel reading s and t once. `row_sums`: summed per row as well (the loss's full sum after
    rewrite/rules_reduce.split_reduction_by_rows): a second pass of the same kernel, one value per row out."""
    s, t = x_in(*shape, name="s"), x_in(*shape, name="t", index=1)

    def log_soft(v: Node) -> Node:
        return make_node("log_softmax", [make_node("div", [v, const_node(temperature)])], dim=1)

    ls, lt = log_soft(s), log_soft(t)
    out = make_node("mul", [make_node("exp", [lt]), make_node("sub", [lt, ls])])
    if row_sums:
        out = make_node("sum", [out], dims=(1,), keepdim=False)
    return Graph((s, t), (), (out,))


def cosine_by_three_sums(shape: tuple[int, int], eps: float = 1e-8) -> Graph:
    """1 - cos(x, y) per row as rewrite/rules_reduce.reduce_of_scaled leaves it: sum(x*y) / (|x| * |y|),
    three sibling sums of one pass, then per-row arithmetic."""
    x, y = x_in(*shape), x_in(*shape, name="y", index=1)

    def row_sum(a: Node, b: Node) -> Node:
        return make_node("sum", [make_node("mul", [a, b])], dims=(1,), keepdim=True)

    def norm(v: Node) -> Node:
        return make_node("clamp", [make_node("sqrt", [row_sum(v, v)])], min=eps, max=None)

    cos = make_node("div", [make_node("div", [row_sum(y, x), norm(y)]), norm(x)])
    return Graph((x, y), (), (make_node("sub", [const_node(1.0), cos]),))


def picked_minus_logsumexp(shape: tuple[int, int]) -> Graph:
    """Cross entropy's per-row term after rewrite/rules_reduce.pick_of_log_softmax: the picked logit (an
    [N, 1] input: the gather runs in ATen) minus the row's logsumexp; one read of the logits."""
    x, picked = x_in(*shape), x_in(shape[0], 1, name="picked", index=1)
    lse = make_node("logsumexp", [x], dims=(1,), keepdim=True)
    return Graph((x, picked), (), (make_node("sub", [picked, lse]),))


def reverse_cumsum(shape: tuple[int, ...], dim: int) -> Graph:
    x = x_in(*shape)
    y = make_node("flip", [make_node("cumsum", [make_node("flip", [x], dims=(dim,))], dim=dim)], dims=(dim,))
    return Graph((x,), (), (y,))


def exclusive_cumsum(shape: tuple[int, ...], dim: int) -> Graph:
    x = x_in(*shape)
    return Graph((x,), (), (make_node("sub", [make_node("cumsum", [x], dim=dim), x]),))


def masked_cumsum(shape: tuple[int, ...], dim: int, reverse: bool = False) -> Graph:
    """cumsum(x * mask) with a bool mask input, its prologue computed per element in the scan kernel; with
    `reverse`, of the flipped values (a suffix scan) and a scaled relu on top of the product."""
    x, mask = x_in(*shape), input_node("mask", 1, shape, dtype=torch.bool)
    value = make_node("mul", [x, mask])
    if not reverse:
        return Graph((x, mask), (), (make_node("cumsum", [value], dim=dim),))
    value = make_node("mul", [make_node("relu", [value]), const_node(0.5)])
    scanned = make_node("cumsum", [make_node("flip", [value], dims=(dim,))], dim=dim)
    return Graph((x, mask), (), (make_node("flip", [scanned], dims=(dim,)),))


def cumprod_of_exp(shape: tuple[int, ...], dim: int) -> Graph:
    """cumprod(exp(x * 0.01)): a float prologue on the columns layout (the dim is not the last)."""
    x = x_in(*shape)
    value = make_node("exp", [make_node("mul", [x, const_node(0.01)])])
    return Graph((x,), (), (make_node("cumprod", [value], dim=dim),))


def masked_softmax(shape: tuple[int, ...], mask_shape: tuple[int, ...]) -> Graph:
    """Attention's masked softmax: scale, a mask from a parameter compared per element (`m > 0.5` masks),
    -inf where masked, softmax over the last dim. A mask of shape [..., 1] masks whole rows (NaN rows, as
    in torch)."""
    x, m = x_in(*shape), param_node("mask", mask_shape)
    scaled = make_node("mul", [x, const_node(0.125)])
    masked = make_node("where", [make_node("gt", [m, const_node(0.5)]), const_node(float("-inf")), scaled])
    return Graph((x,), (m,), (make_node("softmax", [masked], dim=len(shape) - 1),))


def sum_of_squares_then_scale(shape: tuple[int, ...]) -> Graph:
    """A prologue (x*x) and an epilogue on the reduced value (sqrt, * 2)."""
    x = x_in(*shape)
    s = make_node("sum", [make_node("mul", [x, x])], dims=(len(shape) - 1,))
    return Graph((x,), (), (make_node("mul", [make_node("sqrt", [s]), const_node(2.0)]),))


# name -> graph builder; the GPU test runs every case, the compile test compiles every case's kernel(s).
CASES: dict[str, Callable[[], Graph]] = {
    "softmax_small": lambda: one("softmax", (7, 13), dim=1),
    "masked_softmax_causal_odd": lambda: masked_softmax((2, 3, 29, 1000), (1, 1, 29, 1000)),
    "masked_softmax_whole_rows": lambda: masked_softmax((2, 3, 29, 1000), (1, 1, 29, 1)),
    "softmax_size1": lambda: one("softmax", (5, 1), dim=1),
    "softmax_odd": lambda: one("softmax", (33, 1001), dim=1),
    "softmax_vec": lambda: one("softmax", (9, 12292), dim=-1),
    "softmax_long_cluster": lambda: one("softmax", (6, 262144), dim=1),
    "softmax_huge_prime": lambda: one("softmax", (3, 1000003), dim=1),     # too long to cache: two reads
    # rows held in the shared memory of a cluster of 2, 4, 8, 16 blocks; odd lengths (scalar accesses)
    "softmax_cluster2_odd": lambda: one("softmax", (150, 40001), dim=1),
    "softmax_few_rows": lambda: one("softmax", (3, 50001), dim=1),          # cluster widened for the SMs
    "softmax_vec_cluster": lambda: one("softmax", (6, 40000), dim=1),
    "log_softmax_cluster4": lambda: one("log_softmax", (140, 70001), dim=1),
    "rms_norm_cluster4_vec": lambda: rms_norm((140, 65540)),
    "layer_norm_cluster8": lambda: layer_norm((133, 200003), 1, True),
    "layer_norm_too_long": lambda: layer_norm((2, 1000001), 1, True),       # uncached fallback
    "group_norm_1_4mb_rows": lambda: group_norm((2, 8, 300, 301), 2),      # cached, cluster of 8
    "group_norm_3_4mb_rows": lambda: group_norm((1, 4, 650, 651), 2),      # uncached, read twice
    "layer_norm_size1": lambda: layer_norm((7, 1), 1, True),
    "softmax_dim0": lambda: one("softmax", (1000, 37), dim=0),
    "softmax_middle": lambda: one("softmax", (5, 17, 33), dim=1),
    "log_softmax": lambda: one("log_softmax", (31, 2049), dim=1),
    "log_softmax_middle": lambda: one("log_softmax", (4, 100, 7), dim=1),
    "logsumexp": lambda: one("logsumexp", (9, 1025), dims=(1,)),
    # short rows, several to a warp (8 or 16 lanes a row): shuffles within a row's lanes, shifted edges,
    # indices, cached rows, rows of a block past the last
    "softmax_short_rows_128": lambda: one("softmax", (1031, 128), dim=1),
    "softmax_short_rows_shifted": lambda: one("softmax", (517, 130), dim=1),
    "argmax_short_rows": lambda: one("argmax", (999, 40), dim=1),
    "argmin_short_rows_keepdim": lambda: one("argmin", (3, 333, 9), dim=2, keepdim=True),
    "layer_norm_short_rows": lambda: layer_norm((1000, 96), 1, True),
    "logsumexp_short_rows": lambda: one("logsumexp", (777, 200), dims=(1,)),
    "sum_short_rows_odd": lambda: one("sum", (1001, 7), dims=(1,)),
    "amin_short_rows_nhwc": lambda: one("amin", (3, 17, 19, 32), dims=(3,), keepdim=True),
    "sum_dim0": lambda: one("sum", (2048, 333), dims=(0,)),
    "sum_last": lambda: one("sum", (6, 35, 17), dims=(2,)),
    "sum_02_keepdim": lambda: one("sum", (6, 35, 17), dims=(0, 2), keepdim=True),
    "sum_12": lambda: one("sum", (6, 35, 17), dims=(1, 2)),
    "sum_all": lambda: one("sum", (64, 1031), dims=None),
    "sum_long_rows": lambda: one("sum", (3, 3_000_000), dims=(1,)),
    # split rows: independent blocks per row, the last one combining the partials (one pass, no
    # elementwise output); scalar accesses, Welford and index accumulators, a row epilogue
    "mean_all_split": lambda: one("mean", (2000, 1503), dims=None),
    "var_split": lambda: one("var", (3, 1_500_001), dims=(1,), correction=1),
    "argmax_split": lambda: one("argmax", (2, 1_000_001), dim=1),
    "sum_squares_split": lambda: sum_of_squares_then_scale((2, 2_000_004)),
    # split with elementwise outputs (a second launch applies the combined statistics) and split column
    # tiles: a channels-last BatchNorm over 100 channels (a partial tile of 4 lanes) with its running
    # stats and an epilogue, a softmax over dim 0, a sum of a tall matrix's columns
    "batch_norm_train_nhwc_split": lambda: batch_norm_train((16, 64, 65, 100), channel_dim=3,
                                                            epilogue="relu"),
    "softmax_dim0_split": lambda: one("softmax", (50001, 45), dim=0),
    "sum_columns_split": lambda: one("sum", (100003, 70), dims=(0,)),
    "mean_1_keepdim": lambda: one("mean", (6, 35, 17), dims=(1,), keepdim=True),
    "mean_spatial": lambda: one("mean", (4, 6, 28, 28), dims=(2, 3), keepdim=True),
    "amax_last": lambda: one("amax", (129, 257), dims=(1,)),
    "amin_dim0": lambda: one("amin", (129, 257), dims=(0,), keepdim=True),
    "prod_last": lambda: one("prod", (64, 19), dims=(1,)),
    "var_last": lambda: one("var", (129, 257), dims=(1,), correction=1),
    "var_02": lambda: one("var", (6, 35, 17), dims=(0, 2), correction=0),
    "std_last": lambda: one("std", (129, 4100), dims=(1,), correction=1),
    "argmax_middle": lambda: one("argmax", (8, 513, 40), dim=1),
    "argmin_last": lambda: one("argmin", (37, 1000), dim=1),
    "argmax_flat": lambda: one("argmax", (13, 77), dim=None),
    "layer_norm_affine": lambda: layer_norm((16, 3071), 1, True),
    "layer_norm_2d": lambda: layer_norm((4, 6, 10, 13), 2, False),
    "rms_norm": lambda: rms_norm((4, 37, 3071)),
    "layer_norm_by_hand": lambda: layer_norm_by_hand((65, 1024)),
    "l2_normalize": lambda: l2_normalize((12, 16384)),
    "softmax_of_scaled": lambda: softmax_of_scaled((67, 1024), 11.313708498984761),
    "log_softmax_of_scaled": lambda: softmax_of_scaled((67, 1000), 11.313708498984761, "log_softmax"),
    "cosine_similarity_loss": lambda: cosine_similarity_loss((33, 10241)),
    "smooth_l1_mean": lambda: smooth_l1_mean((129, 4099)),
    "residual_batch_norms": lambda: residual_batch_norms((4, 6, 13, 11)),
    "log_softmax_divergence": lambda: log_softmax_divergence((37, 1001)),
    "log_softmax_divergence_rows": lambda: log_softmax_divergence((37, 1001), row_sums=True),
    "log_softmax_divergence_rows_long": lambda: log_softmax_divergence((3, 70001), row_sums=True),
    "cosine_by_three_sums": lambda: cosine_by_three_sums((33, 10241)),
    "picked_minus_logsumexp": lambda: picked_minus_logsumexp((129, 4093)),
    # more rows than clusters fit at once: persistent clusters prefetch (one cached input and elementwise
    # outputs; two cached inputs and a final pass that reduces)
    "softmax_many_cluster_rows": lambda: one("softmax", (300, 65536), dim=1),
    "kl_rows_many_cluster_rows": lambda: log_softmax_divergence((300, 70000), row_sums=True),
    # more rows than blocks fit at once, each block caching a row (at most 4 to an SM; one pass then the
    # output pass, and a norm with affine weights, not cached)
    "l2_normalize_many_rows": lambda: l2_normalize((1100, 16384)),
    "layer_norm_many_rows": lambda: layer_norm((700, 12288), 1, True),
    "mean_center_dim0": lambda: mean_center((300, 41), (0,)),
    "instance_norm": lambda: instance_norm_by_hand((4, 6, 37, 29)),
    "group_norm": lambda: group_norm((4, 12, 9, 11), 3),
    "group_norm_big": lambda: group_norm((2, 64, 56, 56), 8),
    "batch_norm_train": lambda: batch_norm_train((8, 6, 13, 11)),
    # the norms on channels-last data (the layout pass's `channel_dim`): channels innermost
    "batch_norm_train_1d": lambda: batch_norm_train((37, 24)),      # BatchNorm1d after a Linear
    "batch_norm_train_nhwc": lambda: batch_norm_train((4, 6, 5, 24), channel_dim=3, epilogue="relu"),
    "batch_norm_train_nhwc_odd": lambda: batch_norm_train((2, 3, 3, 130), channel_dim=3),
    "group_norm_nhwc": lambda: group_norm((2, 7, 9, 32), 4, channel_dim=3, epilogue="relu"),
    "group_norm_nhwc_instance": lambda: group_norm((3, 5, 7, 40), 40, channel_dim=3),
    "group_norm_ndhwc": lambda: group_norm((2, 3, 4, 5, 16), 4, channel_dim=4),
    "sum_squares_epilogue": lambda: sum_of_squares_then_scale((17, 3000)),
    "cumsum_rows": lambda: one("cumsum", (7, 1000), dim=1),
    "cumsum_vec": lambda: one("cumsum", (5, 12288), dim=1),
    "cumsum_short": lambda: one("cumsum", (3, 5), dim=1),
    "cumprod_columns": lambda: one("cumprod", (50, 33), dim=0),
    "reverse_cumsum": lambda: reverse_cumsum((9, 4100), 1),
    "reverse_cumsum_columns": lambda: reverse_cumsum((20, 6, 7), 1),
    "exclusive_cumsum": lambda: exclusive_cumsum((6, 999), 1),
    "masked_cumsum": lambda: masked_cumsum((5, 4096), 1),          # vector loads of x, bytes of the mask
    "masked_cumsum_odd": lambda: masked_cumsum((3, 1001), 1),      # the scalar path
    "masked_reverse_cumsum": lambda: masked_cumsum((4, 2052), 1, reverse=True),
    "cumprod_of_exp_columns": lambda: cumprod_of_exp((20, 6, 7), 1),
}


def rolled(group: FusedGroup) -> FusedGroup | None:
    """A reduction group the planner gave chunk loops unrolled whole (`ReductionSpec.full_unroll`), with
    the runtime loop instead, or None for other groups: the form the GPU tests also check and
    bench_reductions measures ("+rolled")."""
    spec = group.config[0] if group.family == "reduction" and group.config else None
    if spec is None or not spec.full_unroll:
        return None
    return dataclasses.replace(group, config=(dataclasses.replace(spec, full_unroll=False),))


def persistent(group: FusedGroup) -> FusedGroup | None:
    """A reduction group whose rows a cluster caches, made persistent (`ReductionSpec.persistent`: clusters
    walking rows, the final pass prefetching the next row) as `launch_alternatives` offers it, or None."""
    from kernelwright.fuse import launch_alternatives

    return next((g for g in launch_alternatives(group) if g.config[0].persistent), None)


def column_unrolled(group: FusedGroup) -> FusedGroup | None:
    """A column launch with its chunk loops unrolled further (`ReductionSpec.unroll`) as
    `launch_alternatives` offers it, or None."""
    from kernelwright.fuse import launch_alternatives

    spec = group.config[0] if group.family == "reduction" and group.config else None
    if spec is None or spec.layout != "column":
        return None
    return next(g for g in launch_alternatives(group) if g.config[0].unroll != spec.unroll)


def one_launch(group: FusedGroup) -> FusedGroup | None:
    """Split rows with both phases in one cooperative launch (`ReductionSpec.one_launch`), or None: the
    planner's split with the flag (what `launch_alternatives` offers), and, for the GPU tests and
    bench_reductions only ("+one"), rows a cluster caches in one pass with elementwise outputs, split into
    blocks of at most 16,384 floats."""
    from kernelwright.fuse.reduction import has_elem_output

    spec = group.config[0] if group.family == "reduction" and group.config else None
    if spec is None or spec.layout != "row" or not has_elem_output(group, spec.levels):
        return None
    if spec.split:
        return dataclasses.replace(group, config=(dataclasses.replace(spec, one_launch=True),))
    if not spec.cache or spec.cluster == 1 or spec.passes != 2:
        return None
    split = blocks_per_row(spec.space.row_length, 16384, 2, 64)
    together = dataclasses.replace(spec, threads=512, warps_per_row=16, cluster=split, cache=False,
                                   split=True, full_unroll=True, one_launch=True)
    return dataclasses.replace(group, config=(together,))


def blocks_per_row(length: int, floats: int, least: int, most: int) -> int:
    """Split blocks for rows of `length` floats: the fewest (a power of two times `least`, at most `most`)
    that take at most `floats` each."""
    split = least
    while length > floats * split and split < most:
        split *= 2
    return split


def random_inputs(graph: Graph, device: str, seed: int = 0) -> tuple[list, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)

    def tensor(node: Node) -> torch.Tensor:
        value = torch.randn(node.shape, generator=generator) * 2 + 0.5
        if "running_var" in node.name:
            value = value.abs() + 0.5
        return value.to(device)

    uses_prod = any(n.op in ("prod", "cumprod") for n in graph.nodes())
    inputs = []
    for n in graph.inputs:
        if n.dtype == torch.bool:    # a mask
            inputs.append((torch.rand(n.shape, generator=generator) < 0.5).to(device))
            continue
        value = tensor(n)
        if uses_prod:
            value = 1 + 0.05 * value      # products of many values stay finite
        inputs.append(value)
    return inputs, {p.name: tensor(p) for p in graph.params}


# Norm-split plans that test_norm_statistics_gpu.py runs against the float64 interpreter;
# tests/fuse/test_statistics.py checks on the CPU that every one still takes the split.
NORM_SPLIT_CASES = {
    "gn_nhwc_odd": lambda: norm_then_reduce((3, 17, 19, 24), 3, groups=4),
    "gn_nchw_odd": lambda: norm_then_reduce((5, 12, 9, 13), 1, groups=3),
    "gn_ndhwc_min": lambda: norm_then_reduce((2, 3, 5, 7, 20), 4, groups=5),
    # size-1 batch and spatial dims; no conv bias: a [1, 1, 1, C] bias reshape is full-size there, and the
    # split refuses a view among GroupNorm's full-size values (its domain view of it would be a copy)
    "gn_size1": lambda: norm_then_reduce((1, 1, 1, 8), 3, groups=2, bias=False),
    "gn_mean_over_space": lambda: norm_then_reduce((4, 6, 7, 16), 3, groups=4, op="mean", dims=(1, 2),
                                                   keepdim=False, tail=None),
    "bn_relu_global_pool": lambda: norm_then_reduce((4, 37, 9, 11), 1, norm="batch_norm", op="mean",
                                                    dims=(2, 3), keepdim=False, tail=None),
    "bn_nhwc_residual_pool": lambda: norm_then_reduce((2, 8, 8, 64), 3, norm="batch_norm", op="mean",
                                                      dims=(1, 2), keepdim=False, tail=None, bias=False,
                                                      chain=("residual", "relu")),
    "bn_nhwc_pool_odd": lambda: norm_then_reduce((3, 5, 7, 37), 3, norm="batch_norm", op="mean",
                                                 dims=(1, 2), keepdim=False, tail=None),
    "ln_sum_over_rows": lambda: norm_then_reduce((3, 17, 1001), 2, norm="layer_norm", op="sum", dims=(1,),
                                                 keepdim=False, tail=None, chain=("tanh",)),
}
