"""Norm rules. Folding: an eval-mode BatchNorm is a per-channel affine map, so it folds into the weights
and bias of the conv or linear before it. In training mode it normalizes with batch statistics (and the
default for a fresh nn.Module is training mode), so it is never folded there.

Instance norm: ATen computes InstanceNorm (without running stats) as a training-mode BatchNorm over a
[1, N*C, *spatial] view of x; that is GroupNorm with one channel per group, said in the norm the rest of
the compiler understands per sample (the layout pass moves it to channels-last data, where the [1, N*C]
view of an NHWC tensor would be a copy)."""

from __future__ import annotations

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import const_node, make_node
from kernelwright.rewrite.engine import RewriteContext, Rule, rule
from kernelwright.rewrite.match import linear_node


def _bn_parts(bn: Node) -> tuple[Node | None, Node | None, Node, Node]:
    present = iter(bn.inputs[1:])
    weight = next(present) if bn.attr("has_weight") else None
    bias = next(present) if bn.attr("has_bias") else None
    return weight, bias, next(present), next(present)


def _channel_producer(y: Node) -> bool:
    """True when `y`'s dim 1 is its output-channel dim and its weight's dim 0 indexes those channels."""
    if y.op == "conv":
        return not y.attr("transposed") and not y.attr("channels_last")
    return y.op == "linear" and len(y.shape) == 2


@rule("batch_norm", summary="eval-mode BatchNorm after conv/linear -> folded into its weights and bias")
def fold_batch_norm(n: Node, ctx: RewriteContext) -> Node | None:
    y = n.inputs[0]
    if ctx.training or n.attr("training") or not n.attr("has_running") or n.attr("channel_dim", 1) != 1:
        return None
    if not _channel_producer(y) or not ctx.single_use(y) or not all(ctx.param_only(t) for t in n.inputs[1:]):
        return None
    x, w, *bias = y.inputs
    if not ctx.param_only(w) or not all(ctx.param_only(t) for t in bias):
        return None
    gamma, beta, mean, var = _bn_parts(n)
    # bn(y) = (y - mean) * gamma / sqrt(var + eps) + beta = y * scale + (beta - mean * scale)
    scale = make_node("rsqrt", [make_node("add", [var, const_node(float(n.attr("eps")))])])
    if gamma is not None:
        scale = make_node("mul", [gamma, scale])
    centred = make_node("sub", [bias[0], mean]) if bias else make_node("neg", [mean])
    new_bias = make_node("mul", [centred, scale])
    if beta is not None:
        new_bias = make_node("add", [new_bias, beta])
    column = make_node("reshape", [scale], shape=(scale.numel,) + (1,) * (len(w.shape) - 1))
    weight = make_node("mul", [w, column])
    if y.op == "linear":
        return linear_node(x, weight, new_bias)
    return make_node("conv", [x, weight, new_bias], **{**y.attr_dict, "has_bias": True})


@rule("reshape", summary="reshape(batch_norm(reshape(x, [1, N*C, *S]))) with batch statistics and no "
                         "running stats -> group_norm(x, groups=C) (instance norm)")
def instance_norm_as_group_norm(n: Node, ctx: RewriteContext) -> Node | None:
    bn = n.inputs[0]
    if bn.op != "batch_norm" or not ctx.single_use(bn) or bn.inputs[0].op != "reshape":
        return None
    if not bn.attr("training") or bn.attr("has_running") or bn.attr("channel_dim", 1) != 1:
        return None
    x = bn.inputs[0].inputs[0]
    if len(x.shape) < 3 or n.shape != x.shape:
        return None
    batch, channels, *spatial = x.shape
    if bn.shape != (1, batch * channels, *spatial):
        return None
    # ATen repeats an InstanceNorm's affine weight and bias N times, one copy per sample's channels
    vectors, present = {}, iter(bn.inputs[1:])
    for flag in ("has_weight", "has_bias"):
        if bn.attr(flag):
            vectors[flag] = _repeated(next(present), batch, channels)
            if vectors[flag] is None:
                return None
    # the same statistics: per (sample, channel), over the spatial dims, biased variance, the same eps
    return make_node("group_norm", [x, *vectors.values()], groups=channels, eps=bn.attr("eps"),
                     has_weight="has_weight" in vectors, has_bias="has_bias" in vectors)


def _repeated(node: Node, times: int, size: int) -> Node | None:
    """`v` when `node` is `v.repeat(times)` of a [size] vector v as capture writes it
    (reshape(expand(reshape(v, [1, size]), [times, size]), [times * size])); else None."""
    if node.op != "reshape" or node.shape != (times * size,) or node.inputs[0].op != "expand":
        return None
    expanded = node.inputs[0]
    if expanded.shape != (times, size) or expanded.inputs[0].op != "reshape":
        return None
    vector = expanded.inputs[0].inputs[0]
    return vector if vector.shape == (size,) and expanded.inputs[0].shape == (1, size) else None


RULES: tuple[Rule, ...] = (fold_batch_norm, instance_norm_as_group_norm)
