"""The reduction family's matcher: reductions with their pointwise prologue and epilogue, and
reduce-then-pointwise patterns over the same rows (softmax, log_softmax, logsumexp, layer/group/batch/
instance norm, RMS norm and x / ||x|| written out by hand, mean-centering) as ONE kernel.

A group iterates over one *space*: the shape of the values its reductions read, with a set of reduced
dims. Every member is either
- elementwise ("elem"): a value per element of the space (pointwise ops, softmax, the norms), or
- per row ("row"): a value per kept position (the reductions and pointwise ops on their results), in
  keepdim form (size 1 on the reduced dims, so it broadcasts against elem values) or squeezed form.
Reductions whose input depends on another reduction's result run in a later pass over the row (the
kernel keeps the row in shared memory between passes when it fits, so HBM is still read once).

Growth, to a fixpoint: pointwise producers whose every user is in the group (prologue, recomputed per
element, never an extra output; float32 values or bool predicates such as the mask of a `where`, while
every tensor the kernel reads stays float32); other reductions and norm/softmax anchors over the same
space (siblings: BatchNorm's output, its batch mean and its batch variance read x once), also when they
read the group's values through a short pointwise chain of their own (cosine similarity's sum(y * y)
beside the dot product: y read once); pointwise consumers (epilogue), elem when they have the space's
shape, row when they combine row values only. Every candidate keeps the group convex
(`Partition.is_convex`).

The launch shape (row or column layout, threads, cluster size, caching) is decided here from the sizes,
for an H100-class device (`DEVICE`); the generated launcher re-checks cluster support at run time.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from kernelwright.fuse.plan import FusedGroup, Matching, make_group
from kernelwright.fuse.pointwise import POINTWISE_OPS
from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import row_op_dims

REDUCE_OPS = frozenset({"sum", "mean", "amax", "amin", "prod", "var", "std", "logsumexp", "argmax", "argmin"})
ELEM_ANCHORS = frozenset({"softmax", "log_softmax", "layer_norm", "group_norm", "batch_norm"})
ARG_OPS = frozenset({"argmax", "argmin"})
PROLOGUE_DTYPES = (torch.float32, torch.bool)  # values a prologue computes per element


@dataclass(frozen=True)
class Device:
    """The limits the launch shape is planned for. Kernels are compiled for the GPU present; these are
    H100 SXM figures (the launcher falls back when a cluster does not fit)."""

    sms: int = 132
    smem_per_block: int = 227 * 1024
    max_cluster: int = 16        # 16 needs the non-portable cluster size attribute (sm_90)


DEVICE = Device()
# The largest cluster the planner asks for when a smaller one would do (see `plan_launch`).
PACKED_CLUSTER = 8
# A column launch is also measured with its chunk loops unrolled this far (`launch_alternatives`).
COLUMN_UNROLL = 8


@dataclass(frozen=True)
class Space:
    """`shape`: the IR shape the reductions read. `split[d]`: how many domain dims IR dim d becomes (2 for
    the channel dim of group_norm: (groups, channels per group)). `domain`, `reduce`: the iteration space
    and its reduced dims."""

    shape: tuple[int, ...]
    split: tuple[int, ...]
    domain: tuple[int, ...]
    reduce: tuple[int, ...]

    @property
    def ir_reduced(self) -> tuple[int, ...]:
        """IR dims that are reduced entirely (empty for group_norm's channel dim, which is only split)."""
        dims, start = [], 0
        for d, parts in enumerate(self.split):
            if all(start + j in self.reduce for j in range(parts)):
                dims.append(d)
            start += parts
        return tuple(dims)

    @property
    def rows(self) -> int:
        return math.prod(s for d, s in enumerate(self.domain) if d not in self.reduce)

    @property
    def row_length(self) -> int:
        return math.prod(self.domain[d] for d in self.reduce)


@dataclass(frozen=True)
class ReductionSpec:
    """The kernel's launch shape. `layout` "row": the innermost domain dim is reduced, the threads of
    `warps_per_row` warps walk one row, or `lanes` lanes of one warp (a block holds threads // 32 //
    warps_per_row rows, threads // lanes with lanes < 32); "column":
    the innermost dim is kept, lane l owns kept position l of a 32-wide tile and the warps split the
    row. `cluster` blocks share a row through distributed shared memory (sm_90; 1 = none). `cache`: the
    row's loaded inputs stay in shared memory between `passes`. `vec`: elements per load (4 = 16 bytes).
    `split`: the `cluster` blocks of a row are independent blocks instead (any GPU, any count): each writes
    its partial accumulators to global memory and the last to finish combines them (one reduction pass:
    a loss or a full sum over a few very long rows, a norm or softmax over few uncached rows or column
    tiles). Elementwise outputs then take a second launch of the same blocks, which read the combined
    accumulators back; the row is read twice, as an uncached row or column tile is anyway.
    `full_unroll` (row layout): the chunk loops run over their compile-time trip count when a thread takes
    at most a few chunks, each chunk predicated, so that all of a thread's loads are in flight at once;
    off, a runtime loop unrolled by 4 (whose remainder runs one chunk at a time). The planner sets it for
    every unsplit row launch (the kernel still takes the loop when the share is too large for registers):
    on an H100, three sibling sums over 16384 rows of 10240 ran 0.460 ms against 0.651 ms with the loop,
    logsumexp over 4093-long rows 0.399 against 0.461 ms, LayerNorm and a plain row sum within 3%
    (bench/kernels/bench_reductions.py, "+rolled" workloads; 2026-11-26).
    `persistent` (cached rows): as many blocks (or clusters) as fit the GPU at once, each walking its
    rows in turn; the last pass over a row refills each chunk's cache slot with the next row's chunk as
    soon as it has read it, so that the next row's loads overlap this row's stores and nothing waits for
    a cluster to exit and the next to start.
    `one_launch` (split rows with elementwise outputs): both phases in one cooperative launch of as many
    blocks as fit at once, walking the rows' shares in row order; each block stores its partial, waits
    for its row's other blocks, combines all partials and writes its share, re-reading it from L2 while
    it is still there (the rows in flight are few MB) instead of from HBM in a second launch. The
    launcher falls back to the two launches where a cooperative launch is refused.
    `lanes` (row layout, one warp per row, no cluster, unsplit): 8 or 16 when a warp holds several short
    rows, each walked by that many lanes (32: a warp or more per row). A 128-long row on 32 lanes is one
    16-byte load a lane; on 8 lanes, four, all in flight at once, and a warp reduces four rows.
    `unroll`: how far the runtime chunk loop is unrolled, so how many of a thread's loads are in flight at
    once where the loop runs (a column tile's lane loads 4 bytes at a time: `launch_alternatives`)."""

    space: Space
    levels: tuple[str, ...]      # per group node: "elem", "row" (keepdim form) or "rowsq" (squeezed form)
    layout: str
    threads: int
    warps_per_row: int
    cluster: int
    cache: bool
    passes: int
    vec: int
    split: bool = False
    full_unroll: bool = False
    persistent: bool = False
    one_launch: bool = False
    lanes: int = 32
    unroll: int = 4


def space_of(node: Node) -> Space | None:
    """The space an anchor reduces over, or None when the node is no anchor we handle."""
    if not node.inputs or node.inputs[0].dtype != torch.float32 or node.inputs[0].numel == 0:
        return None
    shape = node.inputs[0].shape
    rank = len(shape)
    if rank == 0:
        return None
    ones = (1,) * rank
    if node.op in REDUCE_OPS - ARG_OPS:
        dims = tuple(node.attr("dims") or range(rank))
    elif node.op in ARG_OPS:
        dim = node.attr("dim")
        dims = tuple(range(rank)) if dim is None else (dim,)
    elif (rows := row_op_dims(node)) is not None:
        dims = rows
    elif node.op == "batch_norm" and node.attr("training") and rank >= 2:
        channel = node.attr("channel_dim", 1)
        dims = tuple(d for d in range(rank) if d != channel)
    elif node.op == "group_norm" and rank >= 2:
        # the channel dim c splits into (groups, channels per group): domain dims c and c + 1; a row is
        # one (sample, group), so every domain dim but 0 and the group is reduced
        c, groups = node.attr("channel_dim", 1), node.attr("groups")
        domain = (*shape[:c], groups, shape[c] // groups, *shape[c + 1:])
        split = (1,) * c + (2,) + (1,) * (rank - 1 - c)
        return Space(shape, split, domain, tuple(d for d in range(1, rank + 1) if d != c))
    else:
        return None
    return Space(shape, ones, shape, tuple(sorted(dims)))


def match(graph: Graph, claimed: frozenset[int]) -> list[FusedGroup]:
    matching = Matching(graph, claimed)
    groups = []
    for anchor in graph.nodes():
        if id(anchor) in matching.taken:
            continue
        space = space_of(anchor)
        if space is None:
            continue
        growth = _Growth(space, anchor, matching)
        members = growth.run()
        while (readers := _readers_of_non_float_inputs(members)):
            # a bool prologue value that stayed outside (another reader needs it): the kernel reads float
            # tensors only, so its readers stay out too
            growth = _Growth(space, anchor, matching, banned=growth.banned | readers)
            members = growth.run()
        matching.claim(members)
        group = make_group(graph, "reduction", members, users=matching.users)
        levels = tuple(growth.level[id(n)] for n in group.nodes)
        groups.append(FusedGroup(group.family, group.nodes, group.inputs, group.outputs,
                                 (plan_launch(space, group, levels),)))
    return groups


class _Growth:
    """Grows one group from its anchor; `level[id]` is "elem", "row" (keepdim form) or "rowsq"
    (squeezed form)."""

    def __init__(self, space: Space, anchor: Node, matching: Matching, banned: frozenset[int] = frozenset()):
        self.space = space
        self.banned = banned
        self.users, self.roots, self.taken = matching.users, matching.roots, matching.taken
        self.partition = matching.partition
        self.members = [anchor]
        self.level = {id(anchor): level_of_anchor(anchor)}

    def run(self) -> list[Node]:
        changed = True
        while changed:
            changed = False
            for candidate, level in self._candidates():
                if (id(candidate) in self.level or id(candidate) in self.banned
                        or not self.partition.is_convex(self.members + [candidate])):
                    continue
                self.members.append(candidate)
                self.level[id(candidate)] = level
                changed = True
        return self.members

    def _candidates(self):
        for member in list(self.members):
            for inp in member.inputs:
                # a pointwise producer (prologue), or a reduction/anchor over the same rows whose result a
                # member reads (an earlier pass: log_softmax(t) beside log_softmax(s) in a KL divergence)
                anchor = inp.op in REDUCE_OPS or inp.op in ELEM_ANCHORS
                level = self._as_consumer(inp) if anchor else self._as_producer(inp)
                if level:
                    yield inp, level
            readers = list(self.users[id(member)])
            if self.level[id(member)] == "elem" or member.op in REDUCE_OPS or member.op in ELEM_ANCHORS:
                # siblings reading the same values (BatchNorm's batch mean and variance read x too), also
                # through a pointwise prologue (sum(t * t) beside a member reading t: one read of t)
                read = [inp for inp in member.inputs if inp.op != "const"]
                readers += [u for inp in read for u in self.users[id(inp)]]
                readers += self._reductions_through_pointwise(read)
            for user in readers:
                level = self._as_consumer(user)
                if level:
                    yield user, level

    def _reductions_through_pointwise(self, values: list[Node], depth: int = 3) -> list[Node]:
        """Reductions and anchors reading `values` through a chain of at most `depth` pointwise ops outside
        the group: candidates whose prologue the growth then takes in (`_as_producer`), so that two
        reductions of the same rows read them once."""
        found, frontier, seen = [], list(values), set()
        for _ in range(depth):
            following = []
            for value in frontier:
                for user in self.users[id(value)]:
                    if id(user) in seen or id(user) in self.level or id(user) in self.taken:
                        continue
                    seen.add(id(user))
                    if user.op in REDUCE_OPS or user.op in ELEM_ANCHORS:
                        if value not in values:
                            found.append(user)
                    elif user.op in POINTWISE_OPS and _float_ok(user):
                        following.append(user)
            frontier = following
        return found

    def _as_producer(self, node: Node) -> str | None:
        if (id(node) in self.taken or id(node) in self.level or node.op not in POINTWISE_OPS
                or id(node) in self.roots or not _prologue_ok(node)):
            return None
        readers = self.users[id(node)]
        if any(id(u) not in self.level for u in readers):
            return None     # would become an extra output: left to its own kernel
        if all(self.level[id(u)] == "elem" or _reads_elementwise(u) for u in readers):
            return "elem" if broadcasts_to(node.shape, self.space.shape) else None
        forms = {self.level[id(u)] for u in readers}
        if len(forms) == 1 and next(iter(forms)) in self._row_forms(node.shape):
            return next(iter(forms))
        return None

    def _as_consumer(self, node: Node) -> str | None:
        if id(node) in self.taken or id(node) in self.level or not _float_ok(node, allow_index=True):
            return None
        if node.op in REDUCE_OPS or node.op in ELEM_ANCHORS:
            if space_of(node) != self.space or not self._elem_operand(node.inputs[0]):
                return None
            if any(not broadcasts_to(operand_shape(node, k), self.space.shape) or i.dtype != torch.float32
                   for k, i in enumerate(node.inputs[1:], 1)):
                return None
            return level_of_anchor(node)
        if node.op not in POINTWISE_OPS:
            return None
        inside = [(i, self.level[id(i)]) for i in node.inputs if id(i) in self.level]
        if not inside:
            return None     # reads no member: not an epilogue
        if any(self._is_arg(i) for i, _ in inside):
            return None     # int64 indices stay outputs
        if all(lv != "elem" for _, lv in inside):
            for form in self._row_forms(node.shape):
                if all(lv == form or _is_scalar_like(i) for i, lv in inside):
                    return form
        if node.shape == self.space.shape and all(lv != "rowsq" or _is_scalar_like(i) for i, lv in inside):
            return None if self._prologue_elsewhere(node) else "elem"
        return None

    def _prologue_elsewhere(self, node: Node) -> bool:
        """True when every path from `node` runs through pointwise ops of its shape into reductions or
        norms over other rows, all over the same ones, or into one pointwise op that reads a value computed
        from this group (so it can never join it: the gate of a squeeze-and-excitation block): computed
        here `node` would be written out and read back, computed in that one kernel (a prologue, or a
        producer the pointwise kernel inlines) it is neither (a norm's statistics apart,
        `fuse/statistics.py`)."""
        spaces: list[Space] = []
        later: set[int] = set()
        after: set[int] | None = None
        stack, seen = [node], {id(node)}
        while stack:
            value = stack.pop()
            if id(value) in self.roots:
                return False
            for user in self.users[id(value)]:
                if id(user) in seen:
                    continue
                seen.add(id(user))
                if user.op in REDUCE_OPS or user.op in ELEM_ANCHORS:
                    space = space_of(user)
                    if space == self.space or user.inputs[0] is not value or spaces and space != spaces[0]:
                        return False
                    spaces.append(space)
                elif user.op in POINTWISE_OPS and _prologue_ok(user) and len(user.shape) >= len(node.shape):
                    after = self._after_members() if after is None else after
                    if any(id(i) in after and id(i) not in seen and i is not node for i in user.inputs):
                        if id(user) in self.taken:
                            return False     # a GEMM's epilogue already: it would read a kernel's output
                        later.add(id(user))
                    elif user.shape == node.shape:
                        stack.append(user)
                    else:
                        return False
                else:
                    return False
        return bool(spaces) != bool(later) and len(later) <= 1

    def _after_members(self) -> set[int]:
        """Ids of the nodes computed from the group's members past an op the group cannot take (neither
        pointwise nor a reduction over its rows: a GEMM, a reduction over other rows, a view): values no
        member can ever read, so neither can any op reading them join the group."""
        crossed: set[int] = set()
        reached: set[int] = {id(n) for n in self.members}
        stack = [(n, False) for n in self.members]
        while stack:
            node, past = stack.pop()
            for user in self.users[id(node)]:
                joinable = user.op in POINTWISE_OPS or (
                    (user.op in REDUCE_OPS or user.op in ELEM_ANCHORS) and space_of(user) == self.space)
                beyond = past or not joinable
                if (beyond and id(user) in crossed) or (not beyond and id(user) in reached):
                    continue
                (crossed if beyond else reached).add(id(user))
                stack.append((user, beyond))
        return crossed

    def _elem_operand(self, node: Node) -> bool:
        """An input an elementwise member may read: a member evaluated per element or per row in keepdim
        form, or an outside value that broadcasts to the space."""
        level = self.level.get(id(node))
        if level is not None:
            return level in ("elem", "row") and not self._is_arg(node)
        return broadcasts_to(node.shape, self.space.shape) and (
            node.op == "const" or node.dtype == torch.float32)

    def _is_arg(self, node: Node) -> bool:
        return node.op in ARG_OPS and id(node) in self.level

    def _row_forms(self, shape: tuple[int, ...]) -> tuple[str, ...]:
        """The row forms `shape` is, in order of preference: 'row' when it is a keepdim row shape of the
        space, 'rowsq' when a squeezed one. It may be both: [C] over [N, H, W, C] reduced to C rows (a
        channels-last BatchNorm's statistics) addresses the rows alike either way."""
        space = self.space
        if space.split != (1,) * len(space.shape):
            return ()     # group_norm's rows are not an IR shape
        full = space.shape
        forms = []
        if len(shape) <= len(full) and broadcasts_to(shape, full) and all(
                shape[d - len(full) + len(shape)] == 1 for d in space.reduce if d >= len(full) - len(shape)):
            forms.append("row")
        kept = tuple(s for d, s in enumerate(full) if d not in space.reduce)
        if broadcasts_to(shape, kept):
            forms.append("rowsq")
        return tuple(forms)


def level_of_anchor(node: Node) -> str:
    if node.op in ELEM_ANCHORS:
        return "elem"
    return "row" if node.attr("keepdim") else "rowsq"


def operand_shape(node: Node, k: int) -> tuple[int, ...]:
    """The shape input k of a member broadcasts as: BatchNorm's and GroupNorm's per-channel vectors
    index the channel dim (`channel_dim`, 1 unless the layout pass moved the norm), so they broadcast as
    [C, 1, ..., 1] with one 1 per dim after it; every other operand broadcasts as it is."""
    shape = node.inputs[k].shape
    if k > 0 and node.op in ("batch_norm", "group_norm"):
        return shape + (1,) * (len(node.inputs[0].shape) - 1 - node.attr("channel_dim", 1))
    return shape


def _reads_elementwise(node: Node) -> bool:
    return node.op in REDUCE_OPS or node.op in ELEM_ANCHORS


def _float_ok(node: Node, allow_index: bool = False) -> bool:
    if node.dtype != torch.float32 and not (allow_index and node.op in ARG_OPS):
        return False
    return _operands_of(node, (torch.float32,))


def _prologue_ok(node: Node) -> bool:
    """A pointwise producer computed per element inside the kernel: float32, or a bool predicate (a
    comparison, isnan, a mask for `where`), on float32, bool or const operands. Its operands from outside
    must be float32 (`_readers_of_non_float_inputs` keeps them so)."""
    return node.dtype in PROLOGUE_DTYPES and _operands_of(node, PROLOGUE_DTYPES)


def _operands_of(node: Node, dtypes: tuple[torch.dtype, ...]) -> bool:
    """Every operand of `node` is a const or of one of `dtypes`, and none is a scalar forward argument."""
    return all(i.dtype in dtypes or i.op == "const" for i in node.inputs) and not any(
        i.op == "input" and i.attr("kind") == "scalar" for i in node.inputs)


def _readers_of_non_float_inputs(members: list[Node]) -> frozenset[int]:
    """Members reading a value from outside the group that is neither float32 nor a const."""
    inside = {id(n) for n in members}
    return frozenset(id(n) for n in members for i in n.inputs
                     if id(i) not in inside and i.op != "const" and i.dtype != torch.float32)


def _is_scalar_like(node: Node) -> bool:
    return all(s == 1 for s in node.shape)


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))



def reduction_passes(group: FusedGroup) -> dict[int, int]:
    """The pass (0, 1, ...) in which each reduction or norm/softmax anchor accumulates: one more than
    the latest pass whose results its input depends on."""
    members = {id(n) for n in group.nodes}
    ready: dict[int, int] = {}      # node id -> the pass after which its value is known per row
    passes: dict[int, int] = {}
    for node in group.nodes:
        deps = max((ready.get(id(i), 0) for i in node.inputs if id(i) in members), default=0)
        if node.op in REDUCE_OPS or node.op in ELEM_ANCHORS:
            passes[id(node)] = deps
            ready[id(node)] = deps + 1
        else:
            ready[id(node)] = deps
    return passes


def has_elem_output(group: FusedGroup, levels: tuple[str, ...]) -> bool:
    """Whether the group writes an elementwise output (a softmax's, a norm's) besides per-row values;
    `levels` per group node, as in `ReductionSpec.levels`."""
    level_of = {id(n): lv for n, lv in zip(group.nodes, levels, strict=True)}
    return any(level_of[id(o)] == "elem" for o in group.outputs)


def plan_launch(space: Space, group: FusedGroup, levels: tuple[str, ...],
                device: Device = DEVICE, allow_cache: bool = True) -> ReductionSpec:
    """The launch of a reduction group; `allow_cache` False: rows read again by every pass instead of
    cached in shared memory (`launch_alternatives`)."""
    domain, reduce = space.domain, space.reduce
    live = [d for d, s in enumerate(domain) if s != 1]
    innermost_reduced = not live or live[-1] in reduce
    has_elem_out = has_elem_output(group, levels)
    passes = max(reduction_passes(group).values(), default=0) + 1 + (1 if has_elem_out else 0)
    rows, length = space.rows, space.row_length
    # one pass over the row accumulates everything (then, maybe, one more writes the elementwise outputs)
    one_reduction = passes - (1 if has_elem_out else 0) == 1
    if not innermost_reduced:
        warps = max(1, min(32, length // 64))
        warps = 1 << (warps.bit_length() - 1)
        tiles = -(-rows // 32)
        cluster = _cluster_for_parallelism(tiles, device)
        if one_reduction and tiles * cluster < 2 * device.sms:
            # few column tiles (a channels-last BatchNorm over 128 channels is 4): independent blocks of 16
            # warps, at least 32 positions per warp, as many as fill the SMs; the column layout never
            # caches the row, so splitting the statistics from the outputs reads it no more often
            split = _split(tiles, length, 16 * 32, device)
            if split > cluster:
                return ReductionSpec(space, levels, "column", 512, 16, split, False, passes, 1, split=True)
        return ReductionSpec(space, levels, "column", 32 * warps, warps, cluster, False, passes, 1)

    # 16-byte loads; a row whose length is not a multiple of 4 takes them from its first aligned element,
    # its edges (at most 3 elements each side) one at a time (the renderer's SHIFTED kernels)
    vec = 4 if live and (domain[live[-1]] % 4 == 0 or length >= 128) else 1
    chunks = length // vec
    # at least 16 elements per thread (four 16-byte vectors): fewer leave the threads waiting on the
    # row's reduction barriers more than on memory (a 3071-long row on 1024 threads ran at half bandwidth).
    # A warp per row (shuffles only, no barrier) for one-pass rows lost or tied against these blocks on
    # 1K-64K-long rows (H100, 2026-11-28, bench/results/2026-11-28-h100-80gb-hbm3-group-reduce/).
    warps = 1
    while warps < 32 and length > 32 * warps * 16:
        warps *= 2
    rows_per_block = max(1, 8 // warps)
    row_bytes = length * 4 * max(1, len(cached_inputs(group, space)))
    # Shared memory left after the reduction scratch; half of it lets two blocks share an SM, so one
    # block's loads overlap the other's reductions and stores.
    budget = device.smem_per_block - 8 * 1024
    cache, cluster, one_per_sm = passes > 1, 1, False
    if cache and allow_cache and row_bytes * rows_per_block > budget // 2:
        rows_per_block = 1
        cluster = _smallest_cluster(row_bytes, budget // 2, device)
        if cluster is None or cluster > PACKED_CLUSTER:
            # Clusters above 8 blocks pack poorly into the GPCs: one block per SM in a cluster of at most 8
            # (measured on H100: softmax over 393,216-long rows 6.53 ms vs 6.93 ms as 16 blocks of half the
            # cache). Without one, the row is read twice by uncached blocks: GroupNorm over 3.2 MB rows ran
            # at 62% of copy bandwidth so, against 35-45% cached in clusters of 16 at one block per SM.
            single = _smallest_cluster(row_bytes, budget, device)
            if single is not None and single <= PACKED_CLUSTER:
                cluster, one_per_sm = single, True
    if cache and (cluster is None or not allow_cache):
        # the row read again by every pass (too long for a cluster's shared memory, or not allowed)
        cache, cluster = False, _cluster_for_parallelism(rows, device)
    if rows < device.sms and chunks >= 8192:
        # few long rows: more blocks per row so that every SM has work (the row cache, if any, shrinks)
        rows_per_block = 1
        cluster = max(cluster, _cluster_for_parallelism(rows, device))
    # A norm or softmax whose rows a cluster would read twice anyway (uncached), or cache at one block per
    # SM while the row lies in pieces (a BatchNorm's channel over NCHW, a GroupNorm's group over NHWC):
    # split statistics, whose blocks run the same share of neighbouring rows side by side. Measured on
    # H100: channels-last GroupNorm over 64x126x126x128 (8 groups) 0.685 ms split vs 0.966 ms cached in
    # clusters of 8; NCHW training BatchNorm over 32x128x112x112 0.279 vs 0.327 ms. Contiguous rows keep the
    # cache (softmax over 393,216-long rows: 6.56 ms cached vs 7.17 ms split, which reads them twice).
    reduced_live = [d for d in live if d in reduce]
    pieces = reduced_live != live[len(live) - len(reduced_live):]     # not the innermost dims of the space
    scattered = one_reduction and has_elem_out and cluster > 1 and (not cache or (one_per_sm and pieces))
    if scattered or (one_reduction and not cache and rows * cluster < 2 * device.sms and chunks >= 16 * 512):
        # one pass over uncached rows (a loss, a sum to a scalar, a norm over rows too long to cache):
        # every SM busy with independent blocks, at least 16 chunks per thread each, whose partials the
        # last block combines (and, with elementwise outputs, every block reads back in a second launch)
        split = max(_split(rows, chunks, 16 * 512, device), 2 if scattered else 1)
        if split > cluster or scattered:
            return ReductionSpec(space, levels, "row", 512, 16, split, False, passes, vec, split=True)
    if (cluster > 1 or cache) and not one_per_sm:
        # At most 16 warps per block where two or more blocks share an SM (kernels of 1024 threads take the
        # whole register file at 64 a thread); and when the cache leaves room for three or more blocks per
        # SM, 8 warps, so that the registers admit them too, one block's loads overlapping another's
        # reductions and stores. Measured on H100: LayerNorm over 65,536-long rows in clusters of 4 went
        # from 75% to 83% of copy bandwidth (32 warps: 60%); softmax over 16384 rows of 12288 (one block
        # caches a row) 1.454 ms with 32 warps, 0.668 with 16, 0.558 with 8 (97% of copy; ATen 0.648).
        # A cache that holds the SM to one block keeps 32 warps, the SM's only ones: softmax over
        # 393,216-long rows in clusters of 8, 5.93 ms with 16 warps, 5.07 with 32 (2026-11-28, once a
        # block's first warp merged its partials; bench/results/2026-11-28-h100-80gb-hbm3-startup-w32/).
        warps = min(warps, 16)
        if cache and budget // max(row_bytes * rows_per_block // cluster, 1) >= 3:
            warps = min(warps, 8)
    threads = 32 * warps * rows_per_block
    lanes = 32
    short = max(8, 1 << max(0, (length - 1) // 16).bit_length())
    if warps == 1 and cluster == 1 and short < 32 and (not cache or row_bytes * 256 // short <= budget // 2):
        # short rows: up to 16 elements a lane (as for the warps above), at least 8 lanes (a shifted row's
        # edges take up to 6 threads), several rows to a warp, the same 256-thread blocks (whose row cache,
        # a row per 8 or 16 threads, must still leave room for a second block)
        lanes = short
        rows_per_block, threads = 256 // lanes, 256
    return ReductionSpec(space, levels, "row", threads, warps, cluster, cache, passes, vec, full_unroll=True,
                         lanes=lanes)


def launch_alternatives(group: FusedGroup) -> list[FusedGroup]:
    """Other launches of `group` worth measuring against the planner's (verify.measure_groups keeps the
    fastest). Measured on an H100 (2026-11-26), in bench/kernels/bench_reductions.py:
    - rows cached across a cluster: the same rows read from global memory by every pass (the cluster reads
      a row once but runs its passes, and the cluster-wide reductions between them, while HBM idles; the
      distillation KL's per-row sums over 2 x 81,920 floats: 6.03 ms cached in clusters of 8, 3.91 ms read
      twice), and the cluster made persistent (`ReductionSpec.persistent`; softmax over 4096 x 393216
      6.35 against 6.53 ms, RMSNorm over 4096 x 65536 0.862 against 0.833).
    - split rows with elementwise outputs: both phases in one launch (`ReductionSpec.one_launch`; NCHW
      training BatchNorm over 32x128x112x112 0.243 against 0.268 ms in two launches, channels-last
      GroupNorm 0.770 against 0.671). Cached rows split in one launch never won (softmax 4096 x 393216
      9.06 against 6.47 ms cached, LayerNorm 4096 x 65536 1.50 against 0.85), so they are not offered;
      nor did small items (8192 floats, re-read from L2) whose outputs lag one item behind their
      statistics so that no block waits (softmax 11.9 ms, NCHW GroupNorm 1.58 against 0.91: ~15 us of
      dependent round trips per item, 2026-11-28, bench/results/2026-11-28-h100-80gb-hbm3-lag-bsmall/).
    - short rows several to a warp (`ReductionSpec.lanes` 8 or 16): one row per warp.
    - column tiles: the chunk loops unrolled by COLUMN_UNROLL (`ReductionSpec.unroll`): a lane loads one
      float a position, so four loads in flight are 16 bytes a thread (a channels-last training BatchNorm's
      split phases ran at 73% of their three-pass bound on an H100, 2026-11-26; not yet measured).
    Rows one block caches have no persistent form: blocks walking their rows measured no faster
    (L2-normalizing 12288 rows of 16384, three 64 KB rows an SM, 0.474 ms against 0.476; softmax over
    16384 x 12288 0.471 against 0.405; H200, 2026-11-28, bench/results/2026-11-28-h200-s39/), so the
    launcher sizes persistent grids for clusters only."""
    spec = group.config[0] if group.family == "reduction" and group.config else None
    if spec is None:
        return []
    if spec.layout == "column":
        return [dataclasses.replace(group, config=(dataclasses.replace(spec, unroll=COLUMN_UNROLL),))]
    if spec.split:
        others = [dataclasses.replace(spec, one_launch=True)] if has_elem_output(group, spec.levels) else []
    elif spec.cache and spec.cluster > 1:
        others = [plan_launch(spec.space, group, spec.levels, allow_cache=False)]
        if spec.vec == 1 or spec.space.row_length % 4 == 0:
            # (rows of other lengths take shifted chunks, which persistent clusters do not)
            others.append(dataclasses.replace(spec, persistent=True))
    else:
        others = []
        if spec.lanes < 32:
            # short rows a warp apiece, one 16-byte load a lane at most, as they ran before several shared
            # a warp
            others.append(dataclasses.replace(spec, lanes=32))
    return [dataclasses.replace(group, config=(other,)) for other in others if other != spec]


def launch_label(group: FusedGroup) -> str:
    """A few words telling this group's launch from its alternatives (`--explain`'s "launches tried")."""
    spec = group.config[0] if group.config else None
    if not isinstance(spec, ReductionSpec):
        return ""
    parts = [f"{spec.layout}s", f"{spec.threads} threads"]
    if spec.split:
        parts.append(f"split in {spec.cluster}" + (", one launch" if spec.one_launch else ""))
    elif spec.cluster > 1:
        parts.append(f"cluster of {spec.cluster}")
    if spec.lanes < 32:
        parts.append(f"{spec.lanes} lanes a row")
    parts.append("cached" if spec.cache else "uncached")
    if spec.persistent:
        parts.append("persistent")
    if spec.unroll != 4:
        parts.append(f"unrolled by {spec.unroll}")
    return ", ".join(parts)


def _split(rows: int, units: int, least: int, device: Device) -> int:
    """Independent blocks per row (a power of two) for two to four blocks per SM, each with at least
    `least` of the row's `units` (chunks or positions)."""
    split = 1
    while rows * split * 2 <= 4 * device.sms and units // (split * 2) >= least:
        split *= 2
    return split


def _smallest_cluster(row_bytes: int, budget: int, device: Device) -> int | None:
    cluster = 1
    while row_bytes > budget * cluster:
        cluster *= 2
        if cluster > device.max_cluster:
            return None
    return cluster


def _cluster_for_parallelism(blocks: int, device: Device) -> int:
    """Blocks per row (or column tile) so that there are about two blocks per SM."""
    cluster = 1
    while blocks * cluster < 2 * device.sms and cluster < 8:
        cluster *= 2
    return cluster


def cached_inputs(group: FusedGroup, space: Space) -> list[int]:
    """Positions (in `group.inputs`) of the inputs a row cache holds: those as large as the space, which
    differ from row to row; smaller ones (weights) are re-read and hit in L1/L2."""
    return [k for k, i in enumerate(group.inputs) if i.numel == math.prod(space.shape)]
