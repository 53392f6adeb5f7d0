"""The scan family's matcher: cumsum / cumprod along one dim, as one kernel, with the patterns around it
that are the same scan read differently:
- `flip(d) → scan(d) → flip(d)` is a reverse (suffix) scan: no flipped copy is ever materialized;
- `cumsum(x) - x` is the exclusive prefix sum;
- pointwise producers of the scanned values (`cumsum(x * mask)`) are its prologue, computed per element as
  the kernel reads them: their result is never written out and read back (a masked cumsum over 4 GiB moved
  17 GiB as two kernels, 9 GiB as one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernelwright.fuse.plan import FusedGroup, make_group
from kernelwright.fuse.pointwise import POINTWISE_OPS
from kernelwright.ir.graph import Graph, Node

SCAN_OPS = frozenset({"cumsum", "cumprod"})
# What a prologue node computes per element, and what the kernel reads from outside: float32, or bool (a
# mask: read as bytes).
PROLOGUE_DTYPES = (torch.float32, torch.bool)


@dataclass(frozen=True)
class ScanSpec:
    """`shape` viewed as [outer, length, inner] around the scanned dim. `layout` "rows" (inner == 1: a
    block walks a contiguous row in tiles, carrying the running total) or "columns" (a thread walks one
    column, neighbouring threads on neighbouring columns so every step is a coalesced load)."""

    op: str
    outer: int
    length: int
    inner: int
    reverse: bool
    exclusive: bool
    layout: str
    threads: int
    vec: int


def match(graph: Graph, claimed: frozenset[int]) -> list[FusedGroup]:
    users = graph.users()
    roots = {id(n) for n in graph.roots()}
    taken = set(claimed)
    groups = []

    def only_user(node: Node) -> Node | None:
        readers = users[id(node)]
        return readers[0] if len(readers) == 1 and id(node) not in roots else None

    for scan in graph.nodes():
        if scan.op not in SCAN_OPS or id(scan) in taken or scan.dtype != torch.float32 \
                or scan.inputs[0].dtype != torch.float32 or scan.numel == 0:
            continue
        dim = scan.attr("dim")
        nodes = [scan]
        source, last = scan.inputs[0], scan
        flip_in, flip_out = source, only_user(scan)
        if (flip_in.op == "flip" and flip_in.attr("dims") == (dim,) and only_user(flip_in) is scan
                and id(flip_in) not in taken and flip_out is not None and flip_out.op == "flip"
                and flip_out.attr("dims") == (dim,) and id(flip_out) not in taken):
            nodes = [flip_in, scan, flip_out]
            source, last = flip_in.inputs[0], flip_out
        reverse = len(nodes) == 3
        follower = only_user(last)
        exclusive = (scan.op == "cumsum" and follower is not None and follower.op == "sub"
                     and follower.inputs[0] is last and follower.inputs[1] is source
                     and follower.attr("alpha", 1) == 1 and id(follower) not in taken)
        if exclusive:
            nodes.append(follower)
        nodes += _prologue(source, nodes[0], only_user, taken)
        taken.update(id(n) for n in nodes)
        group = make_group(graph, "scan", nodes, users=users)
        groups.append(FusedGroup(group.family, group.nodes, group.inputs, group.outputs,
                                 (plan_scan(scan, reverse, exclusive),)))
    return groups


def _prologue(source: Node, reader: Node, only_user, taken: set[int]) -> list[Node]:
    """The pointwise nodes computing `source` (read only by `reader`, the group's first node) from values of
    its own shape, each read only inside the group: `source` itself and, recursively, such producers of
    its operands. Their operands from outside are float32 or bool tensors of that shape, or consts."""
    shape = source.shape

    def computable(node: Node, user: Node) -> bool:
        return (node.op in POINTWISE_OPS and node.dtype in PROLOGUE_DTYPES and node.shape == shape
                and id(node) not in taken and only_user(node) is user
                and all(i.op == "const" or (i.shape == shape and i.dtype in PROLOGUE_DTYPES
                                            and not (i.op == "input" and i.attr("kind") == "scalar"))
                        for i in node.inputs))

    members: list[Node] = []

    def grow(node: Node, user: Node) -> None:
        if not computable(node, user):
            return
        members.append(node)
        for operand in node.inputs:
            grow(operand, node)

    grow(source, reader)
    return members


def plan_scan(scan: Node, reverse: bool, exclusive: bool) -> ScanSpec:
    shape, dim = scan.shape, scan.attr("dim")
    outer = math.prod(shape[:dim])
    length = shape[dim] if shape else 1
    inner = math.prod(shape[dim + 1:])
    if inner == 1:
        vec = 4 if length % 4 == 0 else 1
        threads = 32
        while threads < 1024 and threads * vec < length:
            threads *= 2
        return ScanSpec(scan.op, outer, length, inner, reverse, exclusive, "rows", threads, vec)
    return ScanSpec(scan.op, outer, length, inner, reverse, exclusive, "columns", 256, 1)

