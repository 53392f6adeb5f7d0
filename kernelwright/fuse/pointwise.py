"""The pointwise family's matcher: chains of elementwise ops (with broadcasting and views) as one kernel.

A group iterates over one domain, the shape of its seed (its last node). Producers join it in two ways:
inlined (every user is already in the group, so no extra output; a producer of a smaller, broadcast shape
is recomputed per element, which costs arithmetic, never memory traffic) or as an extra output of the same
shape (one kernel writes both, so the shared inputs are read once). View ops (reshape, permute, expand,
slice, select) are only ever inlined: the renderer pushes them down to the group's inputs, where they
become strided indexing.
"""

from __future__ import annotations

import dataclasses

import torch

from kernelwright.fuse.plan import VIEW_OPS, FusedGroup, Matching, make_group
from kernelwright.ir.graph import Graph, Node

UNARY_OPS = frozenset("""
    neg abs exp exp2 log log2 log1p expm1 sqrt rsqrt reciprocal sin cos tan tanh sigmoid erf relu floor ceil
    round trunc sign logical_not isnan isinf silu mish hardswish hardsigmoid gelu softplus elu leaky_relu
    clamp cast copy
""".split())
BINARY_OPS = frozenset("""
    add sub mul div pow maximum minimum fmod remainder atan2 eq ne lt le gt ge logical_and logical_or
""".split())
POINTWISE_OPS = UNARY_OPS | BINARY_OPS | {"where"}

# Dtypes the kernels compute in; half precision stays ATen until the precision policy allows it.
SUPPORTED_DTYPES = frozenset({torch.float32, torch.float64, torch.int64, torch.int32, torch.int16,
                              torch.int8, torch.uint8, torch.bool})


def is_pointwise(node: Node) -> bool:
    return node.op in POINTWISE_OPS and _dtypes_ok(node)


def _dtypes_ok(node: Node) -> bool:
    # Scalar forward arguments are not tensors a kernel could take; their consumers stay ATen.
    return node.dtype in SUPPORTED_DTYPES and all(
        i.dtype in SUPPORTED_DTYPES and not (i.op == "input" and i.attr("kind") == "scalar")
        for i in node.inputs)


def _is_view(node: Node) -> bool:
    return node.op in VIEW_OPS and _dtypes_ok(node)


def match(graph: Graph, claimed: frozenset[int]) -> list[FusedGroup]:
    matching = Matching(graph, claimed)
    groups = []
    # Consumers first, so each group grows backwards from its last node.
    for seed in reversed(graph.nodes()):
        if id(seed) in matching.taken or not is_pointwise(seed) or seed.numel == 0:
            continue
        members = _grow(seed, matching)
        group = make_group(graph, "pointwise", members, users=matching.users)
        if not group.inputs:
            continue        # only constants: nothing to read, ATen (or constant folding) handles it
        matching.claim(members)
        groups.append(group)
    return _merge_leaf_fed(graph, groups, matching.users)


# The most elements a group may have for `_merge_leaf_fed` to join it with others, and the most groups it
# joins in one (each brings its input and output pointers to the kernel's parameters: 4 KB in all).
TINY_ELEMENTS = 1024
MERGED_AT_MOST = 64


def _merge_leaf_fed(graph: Graph, groups: list[FusedGroup], users: dict[int, list[Node]]) -> list[FusedGroup]:
    """Tiny groups of one shape that read only leaves (parameters, buffers, inputs) as one group: its
    chains share no value, so the kernel computes each element of each as before, in one launch instead of
    one each. A training-mode BatchNorm counts its batches (`num_batches_tracked + 1`, one int64): a
    ResNet of 15 BatchNorms ran 15 one-element kernels beside 14 others (level3/13: 0.19 ms a forward,
    launch-bound). Such groups depend on nothing the plan computes, so the merged one can run anywhere."""
    tiny: dict[tuple[int, ...], list[FusedGroup]] = {}
    for group in groups:
        seed = group.nodes[-1]
        if seed.numel <= TINY_ELEMENTS and all(i.is_leaf for i in group.inputs):
            tiny.setdefault(tuple(seed.shape), []).append(group)
    merged = {id(group) for same in tiny.values() if len(same) > 1 for group in same}
    result = [group for group in groups if id(group) not in merged]
    for same in tiny.values():
        if len(same) < 2:
            continue                        # kept in place above
        for start in range(0, len(same), MERGED_AT_MOST):
            part = same[start:start + MERGED_AT_MOST]
            result.append(part[0] if len(part) == 1 else
                          make_group(graph, "pointwise", [n for g in part for n in g.nodes], users=users))
    return result


def _grow(seed: Node, matching: Matching) -> list[Node]:
    members = [seed]
    ids = {id(seed)}
    while True:
        best = None
        for candidate in _producers(members, ids, matching.taken):
            ids_with = ids | {id(candidate)}
            external = id(candidate) in matching.roots or any(
                id(u) not in ids_with for u in matching.users[id(candidate)])
            if external and (_is_view(candidate) or candidate.shape != seed.shape):
                continue
            if not matching.partition.is_convex(members + [candidate]):
                continue
            if not external:
                best = candidate
                break
            best = best or candidate     # an extra output: taken only when nothing inlines
        if best is None:
            return members
        members.append(best)
        ids.add(id(best))


def _producers(members: list[Node], ids: set[int], taken: set[int]) -> list[Node]:
    found: dict[int, Node] = {}
    for member in members:
        for inp in member.inputs:
            if id(inp) not in ids and id(inp) not in taken and (is_pointwise(inp) or _is_view(inp)):
                found.setdefault(id(inp), inp)
    return list(found.values())


# Elements from which a group's flat kernel is also measured with more vectors a thread in flight
# (`launch_alternatives`): bandwidth-bound work of several waves, where how many loads each thread keeps in
# flight decides how close to copy bandwidth it runs.
ALTERNATIVE_MIN_ELEMENTS = 1 << 22
# The flat kernel's knob (codegen/pointwise.py, PointwiseConfig.unroll: vectors per operand a thread loads
# before any math) and the values tried beside its default of 1.
UNROLLS = (2, 4)


def launch_alternatives(group: FusedGroup) -> list[FusedGroup]:
    """The same group with 2 and 4 vectors per operand a thread, for large domains. The default (one vector
    a thread, one pass) ran at copy bandwidth on an H100 (bench/results/2026-11-25-h100-80gb-hbm3-
    pointwise/), yet lone tanh, sigmoid and GELU-tanh ran 1.4-1.7% behind ATen's on an H200 (4.3 TB/s: more
    bytes must be in flight), where an A/A of the same ops holds within 0.2% (2026-11-28). The measure stage
    keeps the fastest."""
    if group.config or max((o.numel for o in group.outputs), default=0) < ALTERNATIVE_MIN_ELEMENTS:
        return []
    return [dataclasses.replace(group, config=(("unroll", unroll),)) for unroll in UNROLLS]


def launch_label(group: FusedGroup) -> str:
    """The launch's knobs where they are not the defaults ("" for the planner's)."""
    return ", ".join(f"{key} {value}" for key, value in group.config)
