"""Structured matrices: matmuls with a diagonal, identity or zero operand need no GEMM.

torch.diag(v) and torch.eye(n) reach the IR decomposed: a mask `eq(arange(n), arange(n).reshape(n, 1))`
selecting the diagonal, then `where(mask, v, 0)` or `cast(mask)`. These rules recognise that shape.
All of them assume finite inputs: a real GEMM multiplies every off-diagonal zero by the other operand,
so one inf or nan there spreads nan over a whole row or column; the cheap forms do not.
"""

from __future__ import annotations

import torch

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import const_node, make_node
from kernelwright.rewrite.engine import RewriteContext, Rule, rule
from kernelwright.rewrite.match import full_like, is_number, scalar_value


def _index_axis(node: Node) -> tuple[int, int] | None:
    """(axis, n) when `node` holds 0..n-1 laid along one axis of an [n, n] broadcast: `arange(n)` (axis 1),
    `arange(n).reshape(1, n)` (axis 1) or `arange(n).reshape(n, 1)` (axis 0)."""
    shape = node.shape
    if node.op == "reshape":
        node = node.inputs[0]
    if node.op != "arange" or node.attr("start") != 0 or node.attr("step") != 1:
        return None
    n = node.attr("end")
    if not node.attr("dtype").is_floating_point and torch.iinfo(node.attr("dtype")).max < n - 1:
        return None
    return {(n,): (1, n), (1, n): (1, n), (n, 1): (0, n)}.get(tuple(shape))


def _diagonal_mask_size(mask: Node) -> int | None:
    if mask.op != "eq" or mask.dtype != torch.bool:
        return None
    a, b = (_index_axis(i) for i in mask.inputs)
    if a is None or b is None or a[1] != b[1] or a[0] == b[0]:
        return None
    return a[1]


def diagonal_vector(matrix: Node) -> Node | None:
    """For a diagonal matrix node, its diagonal as an `[n]` node (a const 1 for the identity); else None."""
    if matrix.op == "cast" and matrix.dtype.is_floating_point and _diagonal_mask_size(matrix.inputs[0]):
        return const_node(1.0)
    if matrix.op != "where" or _diagonal_mask_size(matrix.inputs[0]) is None:
        return None
    values, other = matrix.inputs[1], matrix.inputs[2]
    n = matrix.shape[-1]
    if scalar_value(other) != 0 or values.numel != n or max(values.shape, default=1) != n:
        return None
    return values if values.shape == (n,) else make_node("reshape", [values], shape=(n,))


@rule("mm", summary="matmul with diag(v) -> broadcast multiply (identity -> x)", assume_finite=True)
def diagonal_matmul(n: Node, ctx: RewriteContext) -> Node | None:
    a, b = n.inputs
    left, right = diagonal_vector(a), diagonal_vector(b)
    if left is not None:
        # (diag(v) m)[i, j] = v[i] m[i, j]: scale rows.
        v = left if left.op == "const" else make_node("reshape", [left], shape=(left.numel, 1))
        result = make_node("mul", [v, b])
    elif right is not None:
        # (m diag(v))[i, j] = m[i, j] v[j]: scale columns.
        result = make_node("mul", [a, right])
    else:
        return None
    return result if result.shape == n.shape and result.dtype == n.dtype else None


@rule("mm", "bmm", "linear", summary="matmul with an all-zero operand -> zeros", assume_finite=True)
def zero_matmul(n: Node, ctx: RewriteContext) -> Node | None:
    operands = n.inputs[:2]
    if not any(is_number(scalar_value(t)) and scalar_value(t) == 0 for t in operands):
        return None
    if n.op == "linear" and len(n.inputs) > 2:
        return make_node("expand", [n.inputs[2]], shape=n.shape)
    return full_like(n, 0)


RULES: tuple[Rule, ...] = (diagonal_matmul, zero_matmul)
