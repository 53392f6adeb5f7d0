"""The channels-last layout pass: convolutions on [N, *spatial, C] tensors, and the permutes that layout
implies pushed down through the ops after them, so that they run on contiguous NHWC data too.

Why: cuDNN's FP32 convolutions on Hopper run about 1.7x faster on channels-last tensors than on NCHW ones
(H100, level2 conv shapes: 0.43-0.45 ms against 0.73-0.75 ms), and in that layout it adds the bias in a
separate pass, so the bias becomes a pointwise add that fuses into the next kernel. The price is one
transposing copy of the conv's input (the weight's copy is a derived weight, made once). Transposed
convolutions run on NHWC kernels in cuDNN whatever the layout (profiled: `dgrad_implicit_gemm_..._nhwc`),
so in NCHW they pay two conversions of the input and weight and one of the output (0.18 ms for a 268 MB
output on an H100) that channels-last skips.

    conv(x, w, b)  ->  permute(conv_cl(permute(x, to NHWC), copy(permute(w, to OHWI))) + b, to NCHW)

Then, bottom-up, each op reading `permute(a, p)` of a computed `a` runs on `a` instead, with the permute
moved to its output: pointwise ops (their other operands permuted the inverse way, which folds into
broadcasting), reductions over any dims (the dims mapped through p), softmax/log_softmax (the dim mapped),
BatchNorm and GroupNorm (their `channel_dim` attribute mapped: on NHWC data the channels are the last dim,
so conv + norm + epilogue stay one reduction kernel over contiguous data, the running-stat mean and var
of a training BatchNorm moving with it as ordinary reductions), 2-D pooling (ATen's channels-last pooling
kernels: the pool family's own kernel pools NCHW data) and concatenations (the dim mapped). Ops
the permute cannot pass (LayerNorm over dims the permute reorders, 1-D and 3-D pooling, reshapes, GEMMs)
read the permuted view; the kernel or ATen call there pays for the strided access.

Whether this wins depends on the graph (the input copy against the conv's gain; where permutes stop), so
the compiler builds both layouts and keeps the faster verified one (`compiler.py`). Every rule is exact:
it moves data, not arithmetic (the bias add is the same single FP32 addition cuDNN makes).
"""

from __future__ import annotations

from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import OPS, category, channels_first_dims, channels_last_dims, make_node
from kernelwright.rewrite.engine import RewriteContext, RewriteLog, Rule, graph_rewrite, rule
from kernelwright.rewrite.rules_views import merge_permutes

_REDUCTIONS = ("sum", "mean", "amax", "amin", "logsumexp", "prod", "var", "std")


def _inverse(p: tuple[int, ...]) -> tuple[int, ...]:
    q = [0] * len(p)
    for i, d in enumerate(p):
        q[d] = i
    return tuple(q)


@rule("conv", summary="1-D/2-D/3-D (transposed) convolution -> channels-last convolution (cuDNN NHWC "
                      "kernels), bias as an add")
def conv_channels_last(n: Node, ctx: RewriteContext) -> Node | None:
    if not _movable_conv(n):
        return None
    rank = len(n.shape)
    x, w = n.inputs[0], n.inputs[1]
    to_cl = channels_last_dims(rank)
    weight = make_node("copy", [make_node("permute", [w], dims=to_cl)])
    attrs = {**n.attr_dict, "channels_last": True, "has_bias": False}
    # The input's transposing copy is a node of its own: a pointwise kernel (the tiled, transposing one)
    # that also takes in whatever pointwise ops produce x, instead of ATen's strided copy inside the call.
    data = make_node("copy", [make_node("permute", [x], dims=to_cl)])
    out = make_node("conv", [data, weight], **attrs)
    if n.attr("has_bias"):
        out = make_node("add", [out, n.inputs[2]])  # bias [O] broadcasts along the last (channel) dim
    return make_node("permute", [out], dims=channels_first_dims(rank))


def _movable_conv(n: Node) -> bool:
    """A 1-D, 2-D or 3-D convolution (transposed ones too) still in channels-first layout (1-D ones run as
    2-D ones of height 1: `ir/ops.py`)."""
    # batched only: an unbatched conv (one spatial dim fewer than its rank suggests) keeps its layout
    return n.op == "conv" and not n.attr("channels_last") and len(n.shape) in (3, 4, 5) \
        and len(n.shape) == len(n.attr("stride")) + 2


def _moved_permute(node: Node) -> tuple[int, ...] | None:
    """The dims of `node` if it is a permute of a computed value (one the layout pass may move)."""
    if node.op != "permute" or node.inputs[0].is_leaf:
        return None
    return node.attr("dims")


@rule(*(op for op in OPS if category(op) == "pointwise"),
      summary="pointwise(permute(a), b) -> permute(pointwise(a, permute(b, inverse)))")
def pointwise_through_permute(n: Node, ctx: RewriteContext) -> Node | None:
    perms = {_moved_permute(i) for i in n.inputs} - {None}
    if len(perms) != 1:
        return None
    p = perms.pop()
    rank = len(p)
    if len(n.shape) != rank:
        return None
    inputs = []
    for inp in n.inputs:
        if inp.op == "const":
            inputs.append(inp)
        elif _moved_permute(inp) == p:
            inputs.append(inp.inputs[0])
        else:
            if len(inp.shape) > rank:
                return None
            if len(inp.shape) < rank:  # numpy broadcasting: leading unit dims made explicit
                inp = make_node("reshape", [inp], shape=(1,) * (rank - len(inp.shape)) + tuple(inp.shape))
            inputs.append(_permuted(inp, _inverse(p)))
    return make_node("permute", [make_node(n.op, inputs, **n.attr_dict)], dims=p)


def _permuted(node: Node, dims: tuple[int, ...]) -> Node:
    """`node.permute(dims)`, as a reshape when only unit dims move (a plain broadcast operand stays one)."""
    moving = [d for d in dims if node.shape[d] != 1]
    if moving == sorted(moving):
        return make_node("reshape", [node], shape=tuple(node.shape[d] for d in dims))
    return make_node("permute", [node], dims=dims)


@rule(*_REDUCTIONS, summary="reduce(permute(a), dims) -> reduce(a, mapped dims), permuted")
def reduction_through_permute(n: Node, ctx: RewriteContext) -> Node | None:
    p = _moved_permute(n.inputs[0])
    if p is None:
        return None
    a = n.inputs[0].inputs[0]
    dims, keepdim = n.attr("dims"), n.attr("keepdim")
    attrs = {**n.attr_dict, "dims": tuple(sorted(p[d] for d in dims))}
    reduced = make_node(n.op, [a], **attrs)
    if keepdim:
        return make_node("permute", [reduced], dims=p)
    kept = [p[d] for d in range(len(p)) if d not in dims]   # a's dims, in the order n keeps them
    order = sorted(kept)
    return make_node("permute", [reduced], dims=tuple(order.index(d) for d in kept)) if kept else reduced


@rule("softmax", "log_softmax", summary="softmax(permute(a), dim) -> permute(softmax(a, mapped dim))")
def softmax_through_permute(n: Node, ctx: RewriteContext) -> Node | None:
    p = _moved_permute(n.inputs[0])
    if p is None:
        return None
    inner = make_node(n.op, [n.inputs[0].inputs[0]], **{**n.attr_dict, "dim": p[n.attr("dim")]})
    return make_node("permute", [inner], dims=p)


@rule("batch_norm", "group_norm",
      summary="norm(permute(a)) -> permute(norm(a, channel_dim = the permuted channel dim))")
def norm_through_permute(n: Node, ctx: RewriteContext) -> Node | None:
    """The norm runs on `a` with its channels where they lie in `a` (the `channel_dim` attribute); the
    weight, bias and running stats are per-channel vectors and stay as they are. BatchNorm's statistics
    span every dim but the channels, so any permutation passes; GroupNorm's are per sample, so only one
    that keeps the batch dim first."""
    p = _moved_permute(n.inputs[0])
    if p is None or (n.op == "group_norm" and p[0] != 0):
        return None
    attrs = {**n.attr_dict, "channel_dim": p[n.attr("channel_dim", 1)]}
    return make_node("permute", [make_node(n.op, [n.inputs[0].inputs[0], *n.inputs[1:]], **attrs)], dims=p)


@rule("max_pool", "avg_pool", "adaptive_avg_pool",
      summary="2-D pool(permute(a) to NCHW) -> permute(channels-last pool(a)) (ATen's NHWC pooling kernels)")
def pool_through_permute(n: Node, ctx: RewriteContext) -> Node | None:
    """A 2-D pool over the spatial dims of NHWC data runs on it as it is: ATen pools channels-last tensors
    with kernels of their own (max, average, adaptive average), so the data stays NHWC for the next conv
    (before, the pool read the NCHW view, which the runtime copied to NCHW, and the next conv's input was
    copied back). Not 3-D pools nor adaptive max pooling: ATen has no channels-last kernel for them and
    copies both ways (H100: a Conv3d + ReLU + AvgPool3d plan spent 1.2 of 3.4 ms in those copies)."""
    rank = len(n.shape)
    spatial = len(n.attr("output_size") or n.attr("kernel"))
    if rank != 4 or spatial != 2 or n.attr("channels_last") \
            or _moved_permute(n.inputs[0]) != channels_first_dims(rank):
        return None
    pooled = make_node(n.op, [n.inputs[0].inputs[0]], **{**n.attr_dict, "channels_last": True})
    return make_node("permute", [pooled], dims=channels_first_dims(rank))


@rule("cat", summary="cat(permute(a, p), permute(b, p), dim) -> permute(cat(a, b, p[dim]), p)")
def cat_through_permute(n: Node, ctx: RewriteContext) -> Node | None:
    """Concatenating NHWC data along the channels (a Fire or Inception module's branches) is a
    concatenation along its last dim: the result stays NHWC for the next conv."""
    perms = [_moved_permute(i) for i in n.inputs]
    if not perms or perms[0] is None or any(q != perms[0] for q in perms):
        return None
    p = perms[0]
    joined = make_node("cat", [i.inputs[0] for i in n.inputs], **{**n.attr_dict, "dim": p[n.attr("dim")]})
    return make_node("permute", [joined], dims=p)


@rule("copy", summary="copy(a) -> a for a computed, non-view a (already its own contiguous memory)")
def redundant_copy(n: Node, ctx: RewriteContext) -> Node | None:
    a = n.inputs[0]
    fresh = category(a.op) != "view" or a.op == "cat"   # cat is a data-movement op with memory of its own
    return a if not a.is_leaf and fresh else None


RULES: tuple[Rule, ...] = (conv_channels_last, pointwise_through_permute, reduction_through_permute,
                           softmax_through_permute, norm_through_permute, pool_through_permute,
                           cat_through_permute, merge_permutes, redundant_copy)


def has_layout_choice(graph: Graph) -> bool:
    """Whether the graph has a convolution the pass would move to channels-last."""
    return any(_movable_conv(n) for n in graph.nodes())


def channels_last(graph: Graph) -> tuple[Graph, RewriteLog]:
    """The graph with its convolutions in channels-last layout and the permutes pushed down,
    then the ordinary rules again (the moved permutes leave reshapes and views to merge)."""
    from kernelwright.rewrite.pipeline import rewrite_graph

    graph, log = graph_rewrite(graph, RULES)
    graph, again = rewrite_graph(graph)
    log.events.extend(again.events)
    log.notes.extend(again.notes)
    return graph, log
