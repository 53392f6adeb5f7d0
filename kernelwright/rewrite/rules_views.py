"""Layout redundancy: view chains that collapse to one view or to nothing, and strided views read where a
dense copy of them exists. All exact (no arithmetic)."""

from __future__ import annotations

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import OPS, category, make_node
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


# Ops that read their operands as dense tensors whatever the planner does (an ATen call copies a strided
# operand first): a copy feeding one of them is materialized in any plan.
_DENSE_READERS = frozenset(op for op in OPS if category(op) in ("conv", "matmul"))


@rule(*(op for op in OPS if op != "copy"),
      summary="op(permute(x)) -> op(copy(permute(x))) where that copy is materialized for a conv/GEMM anyway")
def read_the_copy(n: Node, ctx: RewriteContext) -> Node | None:
    # The channels-last layout pass copies a model's input to NHWC for the first conv; a residual add at the
    # end read the NCHW input through the permute, across channels (stride H*W) inside an NHWC kernel.
    inputs, changed = list(n.inputs), False
    for k, view in enumerate(inputs):
        if view.op != "permute":
            continue
        copy = next((u for u in ctx.users(view) if u.op == "copy" and u is not n
                     and any(r.op in _DENSE_READERS for r in ctx.users(u))), None)
        if copy is not None:
            inputs[k], changed = copy, True
    return make_node(n.op, inputs, **n.attr_dict) if changed else None


RULES: tuple[Rule, ...] = (
    merge_permutes, merge_shape_views, cancel_flips, same_dtype_cast, full_slice, read_the_copy,
)
