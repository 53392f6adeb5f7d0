"""Reductions: move pointwise work from before a reduction to after it, where it touches fewer elements."""

from __future__ import annotations

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import const_node, make_node
from kernelwright.rewrite.engine import RewriteContext, Rule, rule
from kernelwright.rewrite.match import binary_operands, is_float, is_number, reshape_to, scalar_value


def _constant_along(c: Node, x: Node, dims: tuple[int, ...], keepdim: bool) -> bool:
    """True when `c` (broadcast against `x`) has one value along every reduced dim, and still
    broadcasts against the reduced result."""
    if c.numel == 1:
        return True
    offset = len(x.shape) - len(c.shape)
    if offset < 0 or not keepdim:
        return False
    return all(d < offset or c.shape[d - offset] == 1 for d in dims)


@rule("sum", "mean", summary="sum(x*c) -> sum(x)*c for c constant along the reduced dims")
def reduce_of_scaled(n: Node, ctx: RewriteContext) -> Node | None:
    # Linearity of the sum; each term loses one rounding and the total gains one: same error order.
    inner = n.inputs[0]
    if inner.op not in ("mul", "div", "neg") or not ctx.single_use(inner) or not is_float(n):
        return None
    dims, keepdim = n.attr("dims"), n.attr("keepdim")
    if inner.op == "neg":
        return make_node("neg", [make_node(n.op, [inner.inputs[0]], dims=dims, keepdim=keepdim)])
    if inner.op == "div" and inner.attr("rounding_mode") is not None:
        return None
    for x, c in binary_operands(inner, inner.op == "mul"):
        if x.shape != inner.shape or x.dtype != inner.dtype or not _constant_along(c, x, dims, keepdim):
            continue
        if c.op != "const" and c.shape and not keepdim:
            c = make_node("reshape", [c], shape=())
        reduced = make_node(n.op, [x], dims=dims, keepdim=keepdim)
        args = [reduced, c] if inner.inputs[0] is x else [c, reduced]
        return make_node(inner.op, args)
    return None


def _monotone(f: Node) -> int:
    """+1 when the unary op is non-decreasing, -1 when non-increasing, 0 when neither (or unknown)."""
    # Only functions defined on all of R: log or sqrt of a negative element would make amax(f(x)) nan
    # while f(amax(x)) is a number.
    if f.op in ("relu", "clamp", "sigmoid", "tanh", "exp", "exp2", "expm1", "erf", "floor", "ceil", "round",
                "trunc", "sign", "hardsigmoid"):
        return 1
    if f.op == "neg":
        return -1
    if f.op == "leaky_relu":
        return 1 if f.attr("negative_slope") >= 0 else 0
    if f.op == "softplus":
        return 1 if f.attr("beta") > 0 else 0
    if f.op == "elu":
        return 1 if min(f.attr("alpha"), f.attr("scale"), f.attr("input_scale")) >= 0 else 0
    if f.op in ("mul", "div", "add", "sub") and f.attr("rounding_mode") is None:
        a, b = f.inputs
        value = scalar_value(b)
        if not is_number(value) or value != value or b.numel != 1:
            return 0
        if f.op in ("add", "sub"):
            return 1
        return 1 if value > 0 else -1 if value < 0 and f.op == "mul" else 0
    return 0


@rule("amax", "amin", summary="amax(f(x)) -> f(amax(x)) for monotone f (amin for decreasing f)")
def minmax_of_monotone(n: Node, ctx: RewriteContext) -> Node | None:
    # Exact: a monotone f (and its correctly rounded float version) keeps the order of the elements,
    # so the extreme of f(x) is f of the extreme of x; nan propagates through both.
    f = n.inputs[0]
    direction = _monotone(f) if f.inputs else 0
    x = f.inputs[0] if f.inputs else None
    if direction == 0 or not ctx.single_use(f) or x.shape != f.shape or x.dtype != f.dtype:
        return None
    op = n.op if direction > 0 else {"amax": "amin", "amin": "amax"}[n.op]
    reduced = make_node(op, [x], dims=n.attr("dims"), keepdim=n.attr("keepdim"))
    result = make_node(f.op, [reduced, *f.inputs[1:]], **f.attr_dict)
    return result if result.shape == n.shape and result.dtype == n.dtype else None


@rule("sum", "mean", "amax", "amin", summary="reduction of a broadcast -> the value (sum: times the count)")
def reduce_of_expand(n: Node, ctx: RewriteContext) -> Node | None:
    inner = n.inputs[0]
    if inner.op != "expand" or not is_float(n):
        return None
    x = inner.inputs[0]
    rank = len(inner.shape)
    aligned = reshape_to(x, (1,) * (rank - len(x.shape)) + x.shape)
    dims = n.attr("dims")
    repeated = [d for d in dims if aligned.shape[d] == 1 and inner.shape[d] != 1]
    if not repeated:
        return None
    rest = tuple(d for d in dims if d not in repeated)
    value = make_node(n.op, [aligned], dims=rest, keepdim=True) if rest else aligned
    if n.op == "sum":
        count = 1
        for d in repeated:
            count *= inner.shape[d]
        value = make_node("mul", [value, const_node(float(count))])
    kept = tuple(1 if d in dims else inner.shape[d] for d in range(rank))
    if value.shape != kept:
        value = make_node("expand", [value], shape=kept)
    return reshape_to(value, n.shape)


RULES: tuple[Rule, ...] = (reduce_of_scaled, minmax_of_monotone, reduce_of_expand)
