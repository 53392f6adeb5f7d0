"""Small structural checks that rules share: scalar constants, per-feature vectors, view chains, FLOPs."""

from __future__ import annotations

from typing import Any

import torch

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import make_node

VIEW_OPS = frozenset({"reshape", "permute", "expand", "slice", "select", "flip"})


def scalar_value(node: Node) -> Any | None:
    """The value of a node that holds one known number everywhere: a `const`, or a `full` of any shape."""
    if node.op == "const":
        return node.attr("value")
    if node.op == "full":
        return node.attr("value")
    if node.op == "literal" and _single(node.attr("value")) is not None:
        return _single(node.attr("value"))
    return None


def _single(value: Any) -> Any | None:
    while isinstance(value, tuple):
        if len(value) != 1:
            return None
        value = value[0]
    return value


def is_float(node: Node) -> bool:
    return node.dtype is not None and node.dtype.is_floating_point


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_scalar(node: Node) -> Node:
    """A node holding one element, as a rank-0 value, so broadcasting it never adds dims."""
    if node.op == "const" or node.shape == ():
        return node
    return make_node("reshape", [node], shape=())


def per_feature(node: Node, features: int) -> Node | None:
    """`node` as a rank-0 scalar or a `[features]` vector when it broadcasts along the last dim only
    (shape `()`, `[1, ..., 1]`, `[features]` or `[1, ..., features]`); else None."""
    if node.numel == 1:
        return as_scalar(node)
    if node.shape and node.shape[-1] == features and node.numel == features:
        return node if len(node.shape) == 1 else make_node("reshape", [node], shape=(features,))
    return None


def binary_operands(node: Node, commutative: bool) -> list[tuple[Node, Node]]:
    """(operand, other) pairs to try: both orders for a commutative op, else only (lhs, rhs)."""
    a, b = node.inputs
    return [(a, b), (b, a)] if commutative else [(a, b)]


def view_of_leaf(node: Node) -> bool:
    """True when `node` is a leaf or a chain of view ops over one (no computation, may alias storage)."""
    while node.op in VIEW_OPS:
        node = node.inputs[0]
    return node.is_leaf


def keep_type(node: Node, value: Node) -> Node | None:
    """`value` standing in for `node`: itself when shapes match, a broadcast view when it only needs
    one, None when the dtype differs or it cannot broadcast."""
    if value.dtype != node.dtype:
        return None
    if value.shape == node.shape:
        return value
    if len(value.shape) <= len(node.shape) and all(
            v in (1, s) for v, s in zip(reversed(value.shape), reversed(node.shape), strict=False)):
        return make_node("expand", [value], shape=node.shape)
    return None


def reshape_to(value: Node, shape: tuple[int, ...]) -> Node:
    return value if value.shape == shape else make_node("reshape", [value], shape=shape)


def full_like(node: Node, value: float | int | bool) -> Node:
    """A constant tensor of `node`'s type."""
    if node.dtype.is_floating_point:
        value = float(value)
    elif node.dtype != torch.bool:
        value = int(value)
    return make_node("full", [], shape=node.shape, value=value, dtype=node.dtype)


def linear_node(x: Node, weight: Node, bias: Node | None) -> Node:
    """A `linear` node with the `has_bias` attribute capture gives it."""
    return make_node("linear", [x, weight] + ([bias] if bias is not None else []), has_bias=bias is not None)
