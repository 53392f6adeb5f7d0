"""Reductions: move pointwise work from before a reduction to after it, where it touches fewer elements; give
a constant mask a form that a reduction kernel reads."""

from __future__ import annotations

import torch

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import COMPARISONS, category, const_node, make_node, row_op_dims
from kernelwright.rewrite.engine import RewriteContext, Rule, rule
from kernelwright.rewrite.match import binary_operands, is_float, is_number, reshape_to, scalar_value


def _constant_along(c: Node, x: Node, dims: tuple[int, ...]) -> bool:
    """True when `c` (broadcast against `x`) has one value along every reduced dim."""
    offset = len(x.shape) - len(c.shape)
    return c.numel == 1 or (offset >= 0 and all(d < offset or c.shape[d - offset] == 1 for d in dims))


def _scaled(node: Node, ctx: RewriteContext, dims: tuple[int, ...]) -> tuple[Node, Node, str] | None:
    """(x, c, op) when `node` is the single-use `x * c`, `c * x` or `x / c` with `c` constant along `dims`
    and `x` of node's shape and dtype."""
    if node.op not in ("mul", "div") or not ctx.single_use(node):
        return None
    if node.op == "div" and node.attr("rounding_mode") is not None:
        return None
    for x, c in binary_operands(node, node.op == "mul"):
        if x.shape == node.shape and x.dtype == node.dtype and _constant_along(c, x, dims):
            return x, c, node.op
    return None


@rule("sum", "mean", summary="sum(x*c) -> sum(x)*c for c constant along the reduced dims "
                            "(also a factor of a product: sum((x/c)*y) -> sum(x*y)/c)")
def reduce_of_scaled(n: Node, ctx: RewriteContext) -> Node | None:
    # Linearity of the sum; each term loses one rounding and the total gains one: same error order.
    # Cosine similarity, sum((a/|a|) * (b/|b|)), becomes sum(a*b) / (|a|*|b|): three sums of the inputs,
    # which one pass computes together: on an H100, 16384 rows of 10240, 0.460 ms (its chunk loops unrolled
    # whole, `ReductionSpec.full_unroll`) against 0.578 ms for the norms then a second read (2026-11-26).
    inner = n.inputs[0]
    if not is_float(n) or not ctx.single_use(inner):
        return None
    dims, keepdim = n.attr("dims"), n.attr("keepdim")
    if inner.op == "neg":
        return make_node("neg", [make_node(n.op, [inner.inputs[0]], dims=dims, keepdim=keepdim)])
    found = _scaled(inner, ctx, dims)
    if found is not None:
        rest, c, op = found
    elif inner.op == "mul":
        for factor, other in binary_operands(inner, True):
            found = _scaled(factor, ctx, dims)
            if found is not None and other.shape == inner.shape and other.dtype == inner.dtype:
                x, c, op = found
                rest = make_node("mul", [x, other])
                break
        else:
            return None
    else:
        return None
    # A factor with a shape (one value per row) meets the reduction in its keepdim form, so that sibling
    # reductions of one kernel keep one shape; a view gives the caller's shape.
    keep = keepdim or c.numel > 1
    reduced = make_node(n.op, [rest], dims=dims, keepdim=keep)
    if c.numel == 1 and c.op != "const" and c.shape:
        c = make_node("reshape", [c], shape=())
    args = [c, reduced] if op == "mul" and inner.inputs[0] is c else [reduced, c]
    result = reshape_to(make_node(op, args), n.shape)
    return result if result.shape == n.shape and result.dtype == n.dtype else None


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


def _rows_computed_in(x: Node, dims: tuple[int, ...], limit: int = 64) -> tuple[int, ...] | None:
    """The row dims (a strict subset of `dims`) of a row-wise op that `x` is computed from through
    pointwise ops of x's shape: a softmax/log_softmax/layer_norm, or a keepdim reduction broadcast back."""
    seen, stack = set(), [x]
    while stack and len(seen) < limit:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        rows = row_op_dims(node)
        if rows is None and node is not x and node.op in ("sum", "mean", "amax", "amin", "logsumexp") \
                and node.attr("keepdim") and len(node.shape) == len(x.shape):
            rows = tuple(node.attr("dims"))
        if rows is not None and set(rows) < set(dims):
            return tuple(sorted(rows))
        if node.shape == x.shape and category(node.op) in ("pointwise", "softmax", "norm"):
            stack.extend(i for i in node.inputs if not i.is_leaf and len(i.shape) == len(x.shape))
    return None


@rule("sum", "mean", "amax", "amin",
      summary="full reduction of row-wise work -> per-row reductions, then a reduction of the rows")
def split_reduction_by_rows(n: Node, ctx: RewriteContext) -> Node | None:
    # sum(x, all dims) where x is computed row by row (a loss over log_softmax rows, say) becomes
    # sum(sum(x, row dims), other dims): the row kernel that computes x reduces its rows as it goes instead
    # of writing x out for a second kernel to read back (the full size twice). Pairwise: rows first, then
    # the partial sums, which rounds no worse than one long sum. mean of equal-sized row means is the mean.
    x = n.inputs[0]
    dims, keepdim = tuple(n.attr("dims")), n.attr("keepdim")
    if not is_float(n) or len(dims) < 2:
        return None
    rows = _rows_computed_in(x, dims)
    if rows is None:
        return None
    inner = make_node(n.op, [x], dims=rows, keepdim=keepdim)
    rest = tuple(d for d in dims if d not in rows)
    if not keepdim:
        rest = tuple(d - sum(1 for r in rows if r < d) for d in rest)
    result = make_node(n.op, [inner], dims=rest, keepdim=keepdim)
    return result if result.shape == n.shape and result.dtype == n.dtype else None


def _gather_dim(n: Node) -> int | None:
    """The dim of `torch.gather(x, dim, index)` captured as an ATen fallback, else None."""
    if n.op != "aten_fallback" or n.attr("target") != "aten.gather.default" or len(n.inputs) != 2:
        return None
    args, kwargs = n.attr("args"), dict(n.attr("kwargs") or ())
    if len(args) != 3 or args[0] != ("$in", 0) or args[2] != ("$in", 1) or kwargs.get("sparse_grad"):
        return None
    dim, rank = args[1], len(n.inputs[0].shape)
    return dim % rank if isinstance(dim, int) and not isinstance(dim, bool) and -rank <= dim < rank else None


@rule("aten_fallback", summary="gather(log_softmax(x), d, i) -> gather(x, d, i) - logsumexp(x, d)")
def pick_of_log_softmax(n: Node, ctx: RewriteContext) -> Node | None:
    # Cross entropy and NLL loss pick one log-probability per row: log_softmax(x)[i] is x[i] - lse(x) by
    # definition, so the rows are reduced (one read of x, one value per row) instead of the whole
    # log_softmax written out for a gather to pick from. Rounding: x - (max + log s) where log_softmax does
    # (x - max) - log s: one rounding each, at the scale of the row's largest value.
    dim = _gather_dim(n)
    if dim is None:
        return None
    soft, index = n.inputs
    if soft.op != "log_softmax" or soft.attr("dim") != dim or not ctx.single_use(soft):
        return None
    x = soft.inputs[0]
    if x.dtype != soft.dtype or len(index.shape) != len(x.shape) or any(
            index.shape[k] != x.shape[k] for k in range(len(x.shape)) if k != dim):
        return None
    picked = make_node("aten_fallback", [x, index], **{k: v for k, v in n.attr_dict.items()
                                                        if k != "output_types"})
    lse = make_node("logsumexp", [x], dims=(dim,), keepdim=True)
    if lse.shape != picked.shape:
        lse = make_node("expand", [lse], shape=picked.shape)
    result = make_node("sub", [picked, lse])
    return result if result.shape == n.shape and result.dtype == n.dtype else None


# kernel families that read float32 tensors only (a scan also reads bool masks, but of its own shape only)
_ROW_READERS = frozenset({"reduction", "softmax", "norm", "scan"})


@rule("where", summary="where(m, a, b) for a broadcast parameter-only bool m that is no comparison -> "
                       "where(cast(m, float32) != 0, a, b)")
def float_mask(n: Node, ctx: RewriteContext) -> Node | None:
    # A mask made of constants (`torch.ones(t, t, dtype=torch.bool).tril()`, its negation) is a derived weight
    # (hoist.py): a bool tensor, which reduction kernels do not read, so a masked softmax ran the mask as a
    # pass of its own over the whole scores tensor. As a float 0/1 tensor, derived once per call, compared
    # per element (hoist.py leaves a broadcast comparison per call), it is read by the softmax's prologue.
    # Exact: cast gives 1.0/0.0, != 0 gives m back. Only for a broadcast mask (4 bytes per mask element
    # against 1 cost nothing that matters where one element serves many).
    m = n.inputs[0]
    if m.dtype != torch.bool or m.op in COMPARISONS or m.op == "const" or m.numel >= n.numel \
            or not ctx.param_only(m) or not any(category(u.op) in _ROW_READERS for u in ctx.users(n)):
        return None     # a pointwise kernel reads a bool mask as it is (1 byte, no cast per call)
    flag = make_node("ne", [make_node("cast", [m], dtype=torch.float32), const_node(0.0)])
    return make_node("where", [flag, *n.inputs[1:]], **n.attr_dict)


RULES: tuple[Rule, ...] = (reduce_of_scaled, minmax_of_monotone, reduce_of_expand, split_reduction_by_rows,
                           pick_of_log_softmax, float_mask)
