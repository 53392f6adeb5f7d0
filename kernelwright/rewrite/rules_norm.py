"""Norm folding: an eval-mode BatchNorm is a per-channel affine map, so it folds into the weights and
bias of the conv or linear before it. In training mode it normalizes with batch statistics (and the
default for a fresh nn.Module is training mode), so it is never folded there."""

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
        return not y.attr("transposed")
    return y.op == "linear" and len(y.shape) == 2


@rule("batch_norm", summary="eval-mode BatchNorm after conv/linear -> folded into its weights and bias")
def fold_batch_norm(n: Node, ctx: RewriteContext) -> Node | None:
    y = n.inputs[0]
    if ctx.training or n.attr("training") or not n.attr("has_running"):
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


RULES: tuple[Rule, ...] = (fold_batch_norm,)
