"""Linearity: a matmul (`linear`, `mm`, `bmm`) commutes with sums and with scalings, so reductions and
per-feature affine maps can move onto the weights (parameter-only values the emitter computes at the
top of each call, see `hoist.py`: one pass over the weight instead of one over the output)."""

from __future__ import annotations

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import const_node, make_node
from kernelwright.rewrite.engine import RewriteContext, Rule, rule
from kernelwright.rewrite.match import (
    binary_operands,
    is_float,
    linear_node,
    per_feature,
    reshape_to,
    scalar_value,
)

MATMULS = ("linear", "mm", "bmm")


def _batch_rows(y: Node) -> int:
    """Rows of the matmul (every output element but the last dim)."""
    return y.numel // y.shape[-1] if y.shape else 1


def _contracted(y: Node) -> int:
    return y.inputs[0].shape[-1]


def _floatify(s: Node) -> Node:
    """An integer Python scalar as a float one, so folding it into float weights keeps their dtype."""
    value = s.attr("value")
    return const_node(float(value)) if s.op == "const" and not isinstance(value, float) else s


@rule("sum", "mean", summary="sum/mean over the output features of a matmul -> GEMV with reduced weights")
def reduce_of_matmul(n: Node, ctx: RewriteContext) -> Node | None:
    # sum_j (x W^T + b)_j = x (sum_j W_j)^T + sum_j b_j: reduce the weights first, GEMM becomes GEMV.
    y = n.inputs[0]
    if y.op not in MATMULS or not ctx.single_use(y) or not is_float(n):
        return None
    if n.attr("dims") != (len(y.shape) - 1,):
        return None
    rows, k, features = _batch_rows(y), _contracted(y), y.shape[-1]
    if k * features + 2 * rows * k >= 2 * rows * k * features + rows * features:
        return None
    if y.op == "linear":
        x, w, *bias = y.inputs
        reduced = [make_node(n.op, [t], dims=(0,), keepdim=True) for t in (w, *bias)]
        z = linear_node(x, reduced[0], reduced[1] if bias else None)
    else:
        a, b = y.inputs
        z = make_node(y.op, [a, make_node(n.op, [b], dims=(len(b.shape) - 1,), keepdim=True)])
    return reshape_to(z, n.shape)


@rule("sum", "mean", summary="sum/mean over the rows of mm/bmm -> reduce the left operand first")
def reduce_rows_of_matmul(n: Node, ctx: RewriteContext) -> Node | None:
    y = n.inputs[0]
    if y.op not in ("mm", "bmm") or not ctx.single_use(y) or not is_float(n):
        return None
    if n.attr("dims") != (len(y.shape) - 2,):
        return None
    a, b = y.inputs
    z = make_node(y.op, [make_node(n.op, [a], dims=(len(a.shape) - 2,), keepdim=True), b])
    return reshape_to(z, n.shape)


def _scale_weights(y: Node, s: Node, op: str, side: str) -> Node:
    """`y` with its weights scaled by `s` (`op` is mul or div) on the output ("out") or input ("in")
    features. `s` is a scalar or a vector of that many features."""
    if y.op == "linear":
        x, w, *bias = y.inputs
        column = s if s.shape == () or side == "in" else make_node("reshape", [s], shape=(s.numel, 1))
        new_bias = make_node(op, [bias[0], s]) if bias and side == "out" else (bias[0] if bias else None)
        return linear_node(x, make_node(op, [w, column]), new_bias)
    a, b = y.inputs
    column = s if s.shape == () or side == "out" else make_node("reshape", [s], shape=(s.numel, 1))
    return make_node(y.op, [a, make_node(op, [b, column])])


@rule("mul", "div", summary="matmul output scaled per feature -> weights (and bias) scaled")
def fold_scale_after_matmul(n: Node, ctx: RewriteContext) -> Node | None:
    # (xW^T + b) * s == x (W*s)^T + b*s up to one rounding per term. Differs only where x W^T overflows
    # float32 and s is 0 (inf*0), which already breaks the model's own output.
    if n.attr("rounding_mode") is not None or not is_float(n):
        return None
    for y, s in binary_operands(n, n.op == "mul"):
        if y.op not in MATMULS or not ctx.single_use(y) or y.shape != n.shape:
            continue
        if not ctx.param_only(y.inputs[1]):
            continue
        scale = per_feature(_floatify(s), y.shape[-1])
        if scale is None or not ctx.param_only(s) or scale.dtype != n.dtype or scalar_value(s) == 0:
            continue
        return _scale_weights(y, scale, n.op, "out")
    return None


@rule(*MATMULS, summary="matmul of an input scaled per feature -> weights scaled")
def fold_scale_before_matmul(n: Node, ctx: RewriteContext) -> Node | None:
    x = n.inputs[0]
    if x.op not in ("mul", "div") or x.attr("rounding_mode") is not None or not ctx.single_use(x):
        return None
    if not ctx.param_only(n.inputs[1]):
        return None
    for v, s in binary_operands(x, x.op == "mul"):
        if v.shape != x.shape or v.dtype != x.dtype or not ctx.param_only(s) or ctx.param_only(v):
            continue
        scale = per_feature(_floatify(s), x.shape[-1])
        if scale is None or scale.dtype != n.dtype or scalar_value(s) == 0:
            continue
        return _scale_weights(n.with_(inputs=(v, *n.inputs[1:])), scale, x.op, "in")
    return None


@rule("add", "sub", summary="linear output shifted per feature -> bias shifted")
def fold_shift_into_bias(n: Node, ctx: RewriteContext) -> Node | None:
    # (xW^T + b) + t == xW^T + (b + t): a reassociation of one addition (allowed by the FP32 policy).
    for y, t in binary_operands(n, n.op == "add"):
        if y.op != "linear" or not ctx.single_use(y) or y.shape != n.shape or not ctx.param_only(t):
            continue
        features = y.shape[-1]
        shift = per_feature(_floatify(t), features)
        if shift is None or shift.dtype != n.dtype:
            continue
        x, w, *bias = y.inputs
        if bias:
            new_bias = make_node(n.op, [bias[0], shift])
        else:
            vector = shift if shift.shape else _broadcast_vector(shift, features)
            new_bias = vector if n.op == "add" else make_node("neg", [vector])
        return linear_node(x, w, new_bias)
    return None


def _broadcast_vector(scalar: Node, features: int) -> Node:
    if scalar.op == "const":  # a Python number at run time: torch.full makes the tensor
        return make_node("full", [], shape=(features,), value=scalar.attr("value"), dtype=scalar.dtype)
    return make_node("expand", [scalar], shape=(features,))


@rule("linear", "mm", summary="two linear maps in a row -> one, when that needs fewer FLOPs",
      reassociates=True)
def compose_linear_maps(n: Node, ctx: RewriteContext) -> Node | None:
    # x W1^T W2^T == x (W2 W1)^T; per row K*N multiply-adds instead of K*H + H*N. Opt-in: when x W1^T
    # cancels heavily, rounding W2 W1 first costs ~10x the FP32 tolerance (the adversarial test shows it).
    inner = n.inputs[0]
    if inner.op != n.op or not ctx.single_use(inner) or not all(ctx.param_only(t) for t in (*inner.inputs[1:],
                                                                                            *n.inputs[1:])):
        return None
    k, h, features = inner.inputs[0].shape[-1], inner.shape[-1], n.shape[-1]
    if k * features >= k * h + h * features:
        return None
    if n.op == "mm":
        return make_node("mm", [inner.inputs[0], make_node("mm", [inner.inputs[1], n.inputs[1]])])
    x, w1, *b1 = inner.inputs
    w2, *b2 = n.inputs[1:]
    bias = linear_node(b1[0], w2, b2[0] if b2 else None) if b1 else (b2[0] if b2 else None)
    return linear_node(x, make_node("mm", [w2, w1]), bias)


@rule("linear", summary="linear of every slice x[..., i, ..., :] with one weight -> one linear of x, sliced")
def linear_of_every_select(n: Node, ctx: RewriteContext) -> Node | None:
    # linear(select(x, d, i), W, b) == select(linear(x, W, b), d, i) for d not the contracted (last) dim:
    # each output row is the same dot products. When every i along d meets the same W and b (the input
    # projection of an unrolled RNN: x[:, t] for each step t), the T GEMMs of B rows become one of B*T
    # rows (CSE merges the T copies of linear(x, W, b)): the same FLOPs in one launch with full waves.
    sel = n.inputs[0]
    if sel.op != "select":
        return None
    x, dim = sel.inputs[0], sel.attr("dim")
    if dim >= len(x.shape) - 1 or x.shape[dim] < 2:
        return None
    weights = tuple(id(t) for t in n.inputs[1:])
    covered: set[int] = set()
    for user in ctx.users(x):
        if user.op == "select" and user.attr("dim") == dim and any(
                u.op == "linear" and u.inputs[0] is user and tuple(id(t) for t in u.inputs[1:]) == weights
                for u in ctx.users(user)):
            covered.add(user.attr("index"))
    if len(covered) < x.shape[dim]:
        return None
    w, *bias = n.inputs[1:]
    whole = linear_node(x, w, bias[0] if bias else None)
    return make_node("select", [whole], dim=dim, index=sel.attr("index"))


RULES: tuple[Rule, ...] = (
    linear_of_every_select, reduce_of_matmul, reduce_rows_of_matmul, fold_scale_after_matmul,
    fold_scale_before_matmul, fold_shift_into_bias, compose_linear_maps,
)
