"""Layout redundancy: view chains that collapse to one view or to nothing. All exact (no arithmetic)."""

from __future__ import annotations

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import make_node
from kernelwright.rewrite.engine import RewriteContext, Rule, rule


@rule("permute", summary="permute(permute(x)) -> one permute; identity permute -> x")
def merge_permutes(n: Node, ctx: RewriteContext) -> Node | None:
    dims = n.attr("dims")
    if dims == tuple(range(len(dims))):
        return n.inputs[0]
    inner = n.inputs[0]
    if inner.op != "permute":
        return None
    # y = x.permute(p) has y.dim(i) = x.dim(p[i]); so y.permute(q).dim(i) = x.dim(p[q[i]]).
    p = inner.attr("dims")
    return make_node("permute", [inner.inputs[0]], dims=tuple(p[q] for q in dims))


@rule("reshape", "expand", summary="reshape(reshape(x)), expand(expand(x)) -> one; to the same shape -> x")
def merge_shape_views(n: Node, ctx: RewriteContext) -> Node | None:
    x = n.inputs[0]
    if x.shape == n.shape:
        return x
    if x.op == n.op:
        return make_node(n.op, [x.inputs[0]], shape=n.shape)
    return None


@rule("flip", summary="flip(flip(x)) -> x; flip of size-1 dims -> x")
def cancel_flips(n: Node, ctx: RewriteContext) -> Node | None:
    x = n.inputs[0]
    if all(x.shape[d] == 1 for d in n.attr("dims")):
        return x
    if x.op == "flip" and x.attr("dims") == n.attr("dims"):
        return x.inputs[0]
    return None


@rule("cast", summary="cast to the dtype it already has -> x")
def same_dtype_cast(n: Node, ctx: RewriteContext) -> Node | None:
    return n.inputs[0] if n.inputs[0].dtype == n.dtype else None


@rule("slice", summary="slice covering a whole dim -> x")
def full_slice(n: Node, ctx: RewriteContext) -> Node | None:
    x = n.inputs[0]
    return x if n.shape == x.shape and n.attr("step") == 1 else None


RULES: tuple[Rule, ...] = (
    merge_permutes, merge_shape_views, cancel_flips, same_dtype_cast, full_slice,
)
