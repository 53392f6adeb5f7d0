"""The pool family's matcher: max / average pooling (1d, 2d, 3d; fixed or adaptive windows) with its
pointwise prologue and epilogue, as one kernel.

- Prologue: float32 pointwise producers of the pool's input whose every user is in the group (relu, a
  bias add, a scale before the pool). The kernel evaluates them per input element it loads, so their
  result is never written; padding is outside the prologue (a padded position is -inf for max and 0 for
  average *after* it, as in the model).
- Epilogue: a chain of float32 pointwise consumers of the pool's output, of the output's shape, each the
  only reader of the value before it; their other operands are tensors that broadcast to the output.
- A reshape that only inserts or removes size-1 dims (how `max_pool1d` reaches the IR: unsqueeze → 2d
  pool → squeeze) is crossed, on either side, when a prologue or epilogue op lies beyond it.

Pools whose indices the graph also computes (`return_indices=True`) stay ATen: the indices come from an
ATen call that computes the values as well. Inputs of any layout are made contiguous by the runtime.

The launch shape is decided here (`plan_pool`): one thread per `vec` outputs along the innermost output dim
for small windows, one warp per output (lanes striding over the window) for large ones.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from kernelwright.fuse.plan import FusedGroup, Matching, make_group
from kernelwright.fuse.pointwise import POINTWISE_OPS
from kernelwright.ir.graph import Graph, Node

POOL_OPS = frozenset({"max_pool", "avg_pool", "adaptive_max_pool", "adaptive_avg_pool"})

THREADS = 256
# A window of at least this many elements gets a warp per output: a thread walking it alone would issue
# one scattered load after another (neighbouring threads sit a window apart); 32 lanes read a row together.
WARP_MIN_WINDOW = 128
# Registers one thread holds for a row of its `vec` windows (see `plan_pool`).
MAX_SPAN = 32
# Output rows one thread takes where neighbouring windows along H start one row apart (`PoolSpec.rows`), and
# the fewest work items (threads) that leaves: the GPU's resident threads (132 SMs x 2048), so that no SM
# idles for it. Measured on an H200 (bench/results/2026-11-28-h200-s39): a 3x3 average of stride 1 gained 2%
# at 4 rows; a 3x3 max of stride 2 lost 7% and a 3x3x3 average of stride 2 lost 23% (one row of three shared).
ROWS_PER_THREAD = 4
MIN_ITEMS = 132 * 2048


@dataclass(frozen=True)
class PoolSpec:
    """The pool as the kernel sees it. Spatial sizes are (D, H, W): pools over fewer dims, and spatial
    dims of size 1 that the window never moves along, are padded with leading 1s (kernel 1, stride 1,
    padding 0, dilation 1). `slots[s]`: the IR dim of the pool's input that slot s stands for (None for
    padding); `lead`: the sizes of the dims before the spatial ones, one plane per position. `layout`
    "thread" (one thread per `vec` neighbouring outputs in each of `rows` output rows) or "warp" (one warp
    per output). `rows` > 1 where windows along H overlap at stride 1 (no dilation): each input row the
    thread's windows span is loaded once for all of them (a 3x3 average: 6 rows of loads for 4 output rows
    instead of 12)."""

    kind: str                         # "max" or "avg"
    adaptive: bool
    lead: tuple[int, ...]
    slots: tuple[int | None, int | None, int | None]
    in_size: tuple[int, int, int]
    out_size: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    count_include_pad: bool
    divisor_override: int | None
    divide_per_dim: bool              # adaptive average as ATen's 1d/2d kernels: sum / kd / kh / kw
    layout: str
    vec: int
    wide_loads: bool                  # the thread layout reads input rows 4 columns (16 bytes) at a time
    threads: int
    rows: int = 1                     # output rows per thread (thread layout)

    @property
    def planes(self) -> int:
        return math.prod(self.lead)

    @property
    def outputs(self) -> int:
        return self.planes * math.prod(self.out_size)

    @property
    def window(self) -> int:
        """The most input elements one output reads."""
        if self.adaptive:
            return math.prod(-(-i // o) + 1 for i, o in zip(self.in_size, self.out_size, strict=True))
        return math.prod(self.kernel)


def match(graph: Graph, claimed: frozenset[int]) -> list[FusedGroup]:
    matching = Matching(graph, claimed)
    with_indices = _inputs_pooled_with_indices(graph)
    groups = []
    for pool in graph.nodes():
        if id(pool) in matching.taken or not is_supported_pool(pool) or id(pool.inputs[0]) in with_indices:
            continue
        members = [pool]
        members += _prologue(pool, members, matching)
        members += _epilogue(pool, members, matching)
        matching.claim(members)
        group = make_group(graph, "pool", members, users=matching.users)
        groups.append(FusedGroup(group.family, group.nodes, group.inputs, group.outputs, (plan_pool(pool),)))
    return groups


def is_supported_pool(node: Node) -> bool:
    if node.op not in POOL_OPS or node.dtype != torch.float32 or node.numel == 0:
        return False
    if node.attr("channels_last"):
        return False        # the layout pass's pool on NHWC data stays ATen's channels-last kernel
    source = node.inputs[0]
    rank = len(node.attr("output_size") or node.attr("kernel"))
    if source.dtype != torch.float32 or source.numel == 0 or len(source.shape) not in (rank + 1, rank + 2):
        return False
    if node.op == "avg_pool" and node.attr("divisor_override") == 0:
        return False        # ATen raises for it; so must we (by running ATen)
    return not (source.op == "input" and source.attr("kind") == "scalar")


def _inputs_pooled_with_indices(graph: Graph) -> set[int]:
    """Ids of the values some ATen call max-pools with indices (`return_indices=True`)."""
    found = set()
    for node in graph.nodes():
        target = str(node.attr("target", "")) if node.op == "aten_fallback" else ""
        if "max_pool" in target and "with_indices" in target:
            found.update(id(i) for i in node.inputs)
    return found


def is_unit_reshape(node: Node) -> bool:
    """A reshape that only inserts or removes size-1 dims: the same elements in the same order."""
    return node.op == "reshape" and [s for s in node.shape if s != 1] == \
        [s for s in node.inputs[0].shape if s != 1]


def _elementwise_ok(node: Node) -> bool:
    return node.op in POINTWISE_OPS and node.dtype == torch.float32 and all(
        i.op == "const" or (i.dtype == torch.float32 and not (i.op == "input" and i.attr("kind") == "scalar"))
        for i in node.inputs)


def _prologue(pool: Node, members: list[Node], matching: Matching) -> list[Node]:
    ids = {id(n) for n in members}

    def absorbable(node: Node, extra: set[int] = frozenset()) -> bool:
        return (id(node) not in matching.taken and id(node) not in ids and id(node) not in matching.roots
                and all(id(u) in ids | extra for u in matching.users[id(node)]))

    added: list[Node] = []
    source = pool.inputs[0]
    if is_unit_reshape(source) and absorbable(source):
        inner = source.inputs[0]
        if _elementwise_ok(inner) and absorbable(inner, {id(source)}) \
                and matching.partition.is_convex(members + [source, inner]):
            added += [source, inner]
            ids.update((id(source), id(inner)))
    elif _elementwise_ok(source) and absorbable(source) and matching.partition.is_convex(members + [source]):
        added.append(source)
        ids.add(id(source))
    frontier = [n for n in added if n.op != "reshape"]
    while frontier:
        node = frontier.pop()
        for inp in node.inputs:
            if _elementwise_ok(inp) and absorbable(inp) \
                    and matching.partition.is_convex(members + added + [inp]):
                added.append(inp)
                ids.add(id(inp))
                frontier.append(inp)
    return added


def _epilogue(pool: Node, members: list[Node], matching: Matching) -> list[Node]:
    """A chain after the pool: each step the only reader of the value before it."""
    added: list[Node] = []
    tail, crossed_reshape = pool, False
    while id(tail) not in matching.roots:
        readers = {id(u): u for u in matching.users[id(tail)]}
        if len(readers) != 1:
            break
        (step,) = readers.values()
        chain = [step]
        if is_unit_reshape(step) and not crossed_reshape:
            after = {id(u): u for u in matching.users[id(step)]}
            if id(step) in matching.roots or len(after) != 1:
                break
            chain.append(next(iter(after.values())))
        last = chain[-1]
        value = chain[-2] if len(chain) == 2 else tail
        if any(id(n) in matching.taken for n in chain) or not _elementwise_ok(last) \
                or last.shape != value.shape:
            break
        inside = {id(n) for n in members + added + chain}
        outside = [i for i in last.inputs if i is not value and i.op != "const"]
        if any(id(i) in inside for i in outside) or not matching.partition.is_convex(members + added + chain):
            break
        added += chain
        crossed_reshape = crossed_reshape or len(chain) == 2
        tail = last
    return added


def plan_pool(pool: Node) -> PoolSpec:
    source = pool.inputs[0]
    adaptive = pool.op.startswith("adaptive")
    n = len(pool.attr("output_size") or pool.attr("kernel"))
    rank = len(source.shape)
    dims = list(range(rank - n, rank))
    ones = [1] * n
    kernel = list(pool.attr("kernel") or ones)
    stride = list(pool.attr("stride") or ones)
    padding = list(pool.attr("padding") or [0] * n)
    dilation = list(pool.attr("dilation") or ones)
    in_size = [source.shape[d] for d in dims]
    out_size = [pool.shape[d] for d in dims]
    # a dim of size 1 the window never moves along (max_pool1d's unsqueezed dim) costs index arithmetic only
    keep = [j for j in range(n) if not (in_size[j] == 1 and out_size[j] == 1 and kernel[j] == 1
                                        and padding[j] == 0)]

    def slots(values: list, fill):
        kept = [values[j] for j in keep]
        return tuple([fill] * (3 - len(kept)) + kept)

    kind = "max" if "max" in pool.op else "avg"
    spec = PoolSpec(
        kind=kind, adaptive=adaptive, lead=tuple(source.shape[:rank - n]),
        slots=slots(dims, None), in_size=slots(in_size, 1), out_size=slots(out_size, 1),
        kernel=slots(kernel, 1), stride=slots(stride, 1), padding=slots(padding, 0),
        dilation=slots(dilation, 1), count_include_pad=bool(pool.attr("count_include_pad", True)),
        divisor_override=pool.attr("divisor_override"), divide_per_dim=n < 3,
        layout="thread", vec=1, wide_loads=False, threads=THREADS)
    if spec.window >= WARP_MIN_WINDOW:
        return dataclasses.replace(spec, layout="warp")
    vec = _outputs_per_thread(spec)
    # Every group's columns then start at the same offset within aligned 4-column chunks, and a chunk
    # never straddles the row's end: one 16-byte load instead of four (fewer L1 wavefronts per output).
    wide = vec > 1 and spec.in_size[2] % 4 == 0 and vec * spec.stride[2] % 4 == 0
    return dataclasses.replace(spec, vec=vec, wide_loads=wide, rows=_rows_per_thread(spec, vec))


def _rows_per_thread(spec: PoolSpec, vec: int) -> int:
    """Output rows per thread: ROWS_PER_THREAD where neighbouring windows along H share all but one input
    row (stride 1 below the kernel, no dilation) and the work items left still fill the GPU, else 1."""
    if (spec.adaptive or spec.dilation[1] != 1 or spec.stride[1] != 1 or spec.kernel[1] < 2
            or spec.out_size[1] < 2):
        return 1
    rows = min(ROWS_PER_THREAD, spec.out_size[1])
    items = spec.planes * spec.out_size[0] * -(-spec.out_size[1] // rows) * (spec.out_size[2] // vec)
    return rows if items >= MIN_ITEMS else 1


def _outputs_per_thread(spec: PoolSpec) -> int:
    """Neighbouring outputs along W per thread: their windows overlap or touch (dilation 1, stride at
    most the kernel), so the thread loads the `(vec - 1) * stride + kernel` columns they span once per
    window row instead of `vec * kernel`, and stores them as one vector."""
    if spec.adaptive or spec.dilation[2] != 1 or spec.stride[2] > spec.kernel[2]:
        return 1
    for vec in (4, 2):
        if spec.out_size[2] % vec == 0 and (vec - 1) * spec.stride[2] + spec.kernel[2] <= MAX_SPAN:
            return vec
    return 1

