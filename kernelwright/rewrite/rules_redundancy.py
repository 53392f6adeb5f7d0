"""Redundancy: work whose result is already known or already computed. Every rule here is exact in
IEEE arithmetic (NaN and Inf included) unless it is marked `assume_finite`."""

from __future__ import annotations

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import make_node
from kernelwright.rewrite.engine import RewriteContext, Rule, rule
from kernelwright.rewrite.match import (
    binary_operands,
    full_like,
    is_float,
    is_number,
    keep_type,
    reshape_to,
    scalar_value,
)

# x op c == x exactly: (op, neutral value, commutative). `x + 0` turns -0.0 into +0.0, equal as numbers.
_NEUTRAL = {"mul": (1, True), "add": (0, True), "sub": (0, False), "div": (1, False), "pow": (1, False)}


@rule("mul", "add", "sub", "div", "pow", summary="x*1, x+0, x-0, x/1, x**1 -> x")
def neutral_operand(n: Node, ctx: RewriteContext) -> Node | None:
    neutral, commutative = _NEUTRAL[n.op]
    if n.op == "div" and n.attr("rounding_mode") is not None:
        return None
    for x, c in binary_operands(n, commutative):
        value = scalar_value(c)
        if is_number(value) and value == neutral:
            return keep_type(n, x)
    return None


@rule("mul", summary="x*0 -> 0", assume_finite=True)
def times_zero(n: Node, ctx: RewriteContext) -> Node | None:
    # inf*0 and nan*0 are nan, so this holds for finite x only.
    for _, c in binary_operands(n, True):
        value = scalar_value(c)
        if is_number(value) and value == 0:
            return full_like(n, 0)
    return None


@rule("sub", summary="x-x -> 0", assume_finite=True)
def self_difference(n: Node, ctx: RewriteContext) -> Node | None:
    a, b = n.inputs
    return full_like(n, 0) if a is b else None


_UNIT_REDUCTIONS = ("sum", "mean", "amax", "amin", "prod", "logsumexp")


@rule(*_UNIT_REDUCTIONS, summary="reduction over size-1 dims only -> reshape")
def reduce_over_unit_dims(n: Node, ctx: RewriteContext) -> Node | None:
    # One element reduced is itself: exact for every op here (logsumexp of one x is x, inf and nan too).
    # Only where every reduced dim has size 1: dropping the size-1 dims from a reduction that still reduces
    # others saves nothing (they cost the kernel nothing) and hid the reduction from its siblings over the
    # same elements: a batch-1 training BatchNorm's running-mean update, mean over (0, 2, 3) made a mean over
    # (2, 3), no longer matched the BatchNorm's statistics and took a reduction and a pointwise kernel of
    # its own, 38 of level3/14's 83 kernels.
    x = n.inputs[0]
    if x.dtype != n.dtype or any(x.shape[d] != 1 for d in n.attr("dims")):
        return None
    return reshape_to(x, n.shape)


@rule("argmax", "argmin", summary="argmax/argmin over one element -> 0")
def arg_reduce_over_unit_dim(n: Node, ctx: RewriteContext) -> Node | None:
    x = n.inputs[0]
    dim = n.attr("dim")
    size = x.numel if dim is None else x.shape[dim]
    return full_like(n, 0) if size == 1 else None


@rule("softmax", "log_softmax", summary="softmax over a size-1 dim -> 1 (log_softmax -> 0)",
      assume_finite=True)
def softmax_over_unit_dim(n: Node, ctx: RewriteContext) -> Node | None:
    # exp(x - x) is nan for x = +-inf or nan.
    x = n.inputs[0]
    if x.shape[n.attr("dim")] != 1 or not is_float(n):
        return None
    return full_like(n, 1.0 if n.op == "softmax" else 0.0)


_IDEMPOTENT = ("relu", "abs", "floor", "ceil", "round", "trunc", "sign")


@rule(*_IDEMPOTENT, summary="f(f(x)) -> f(x) for idempotent f")
def idempotent(n: Node, ctx: RewriteContext) -> Node | None:
    inner = n.inputs[0]
    return inner if inner.op == n.op and inner.attrs == n.attrs else None


@rule("neg", "logical_not", summary="neg(neg(x)) -> x")
def involution(n: Node, ctx: RewriteContext) -> Node | None:
    inner = n.inputs[0]
    return keep_type(n, inner.inputs[0]) if inner.op == n.op else None


@rule("maximum", "minimum", summary="maximum/minimum with a constant -> clamp")
def min_max_constant_to_clamp(n: Node, ctx: RewriteContext) -> Node | None:
    # torch.maximum and clamp both propagate a nan in x; a nan bound would not, so it is excluded.
    for x, c in binary_operands(n, True):
        value = scalar_value(c)
        if is_number(value) and value == value and x.shape == n.shape and x.dtype == n.dtype and is_float(x):
            bound = {"min": value} if n.op == "maximum" else {"max": value}
            return make_node("clamp", [x], **{"min": None, "max": None, **bound})
    return None


def _bounds(n: Node) -> tuple[float | None, float | None] | None:
    """(lo, hi) of a clamp-like node (relu is clamp(min=0)), or None; lo > hi is rejected because torch
    then returns hi everywhere, which the merge below does not model."""
    if n.op == "relu":
        return 0, None
    if n.op != "clamp":
        return None
    lo, hi = n.attr("min"), n.attr("max")
    if lo is not None and hi is not None and lo > hi:
        return None
    return lo, hi


def _tighter(a: float | None, b: float | None, pick) -> float | None:
    return b if a is None else a if b is None else pick(a, b)


@rule("clamp", "relu", summary="clamp(clamp(x)) -> one clamp (relu = clamp(min=0))")
def merge_clamps(n: Node, ctx: RewriteContext) -> Node | None:
    inner = n.inputs[0]
    outer_bounds, inner_bounds = _bounds(n), _bounds(inner)
    if outer_bounds is None or inner_bounds is None or not is_float(n):
        return None
    lo = _tighter(outer_bounds[0], inner_bounds[0], max)
    hi = _tighter(outer_bounds[1], inner_bounds[1], min)
    if lo is not None and hi is not None and lo > hi:
        # Disjoint ranges: every number lands on one bound, but a nan input stays nan.
        if not ctx.assume_finite:
            return None
        inner_lo, inner_hi = inner_bounds
        point = inner_lo if inner_lo is not None else inner_hi
        outer_lo, outer_hi = outer_bounds
        point = max(point, outer_lo) if outer_lo is not None else point
        return full_like(n, min(point, outer_hi) if outer_hi is not None else point)
    return make_node("clamp", [inner.inputs[0]], min=lo, max=hi)


@rule("clamp", summary="clamp(x, c, c) -> c", assume_finite=True)
def clamp_to_point(n: Node, ctx: RewriteContext) -> Node | None:
    lo, hi = n.attr("min"), n.attr("max")
    return full_like(n, hi) if lo is not None and hi is not None and lo >= hi else None


RULES: tuple[Rule, ...] = (
    neutral_operand, times_zero, self_difference, reduce_over_unit_dims, arg_reduce_over_unit_dim,
    softmax_over_unit_dim, idempotent, involution, min_max_constant_to_clamp, merge_clamps, clamp_to_point,
)
