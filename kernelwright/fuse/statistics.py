"""Norm statistics apart: a normalization whose output only feeds reductions over other rows is split
into its statistics (a reduction kernel of their own) and its elementwise apply, which becomes the prologue
of the reductions that read it. The planner calls this before the matchers (`plan_fusion`).

Why: `GroupNorm -> min over channels` as one norm kernel and one reduction kernel writes the normalized
tensor and reads it back (an NHWC conv's [64, 126, 126, 128] output: 0.52 GB each way), where the
reduction could normalize each element as it loads it. Statistics first (one read of x), then the
reduction reading x with `(x - mean) * rstd * w + b` applied per element (one more read): two passes over
x instead of three or four, and no full-size intermediate.

    y = norm(x); r = reduce(f(y))
      ->  mean, var = stats(x); r = reduce(f((x - mean) * rsqrt(var + eps) * w + b))

It applies when every path from the norm's output runs through pointwise ops of its shape into
reductions (no output, no other reader) that all reduce the same dims, and those dims are not the norm's
own rows (a reduction over the norm's rows is a sibling in the norm's kernel already). One more kind of
reader is allowed (BatchNorm / LayerNorm only): a pointwise op of the norm's shape reading the norm beside
a value computed from it past the reductions (a squeeze-and-excitation gate, through a GEMM). It cannot
join the norm's kernel, so it gets the apply computed afresh and normalizes x in its own kernel.

GroupNorm's rows are no IR shape: the whole region runs on the *domain* view, the channel dim c split
into (groups, channels per group), every full-size value read through a reshape (a view: those values must
be contiguous, so no view op among them), broadcast operands split alike, each reduction's dims mapped
(c -> c, c + 1) and its result reshaped back. BatchNorm (batch statistics) and LayerNorm run on their own
shape.

The pointwise producers of x that only the norm reads (a conv bias add) are computed once more for the
apply: they would otherwise be read by two kernels and so written out. Both copies are prologues.

Not split: a norm of parameters only (a derived value, computed once), a region whose pointwise ops read a
value computed from the norm (a logsumexp by hand reads its own maximum back: the apply would be written
out), rows of one element. One norm is split at a time, on the graph the last split left (a norm whose
input another split rewrote sees the rewritten nodes).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelwright.fuse.plan import VIEW_OPS, descendants
from kernelwright.fuse.pointwise import POINTWISE_OPS
from kernelwright.fuse.reduction import ARG_OPS, REDUCE_OPS, Space, broadcasts_to, space_of
from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import const_node, make_node
from kernelwright.rewrite.engine import is_param_only

NORMS = frozenset({"group_norm", "batch_norm", "layer_norm"})
TERMINALS = REDUCE_OPS - ARG_OPS


def statistics_apart(graph: Graph) -> Graph:
    """`graph` with every norm that qualifies (module docstring) split into statistics and a prologue,
    one at a time. Nodes a split does not reach are kept as they are (derived roots stay valid)."""
    refused: set[int] = set()
    kept: list[Node] = []     # the refused norms, alive: their ids are never reused by new nodes
    while True:
        users = graph.users()
        roots = {id(n) for n in graph.roots()}
        memo: dict[int, bool] = {}
        nodes = graph.nodes()
        position = {id(n): i for i, n in enumerate(nodes)}     # a topological order
        for norm in nodes:
            if id(norm) in refused:
                continue
            region = _region(norm, users, roots, memo, position)
            if region is None:
                refused.add(id(norm))
                kept.append(norm)
                continue
            replaced, apply = _split(norm, region, users, roots)
            graph = _rebuilt(graph, replaced, {id(f) for f in region.foreign}, norm, apply)
            break
        else:
            return graph


def _rebuilt(graph: Graph, replaced: dict[int, Node], foreign: set[int], norm: Node,
             apply: Callable[[], Node]) -> Graph:
    """`graph` with the nodes of `replaced` (old id -> new node, built on nodes of `graph` upstream of
    them) swapped in, each node of `foreign` reading a fresh `apply()` where it read `norm`; every other
    node kept, or rebuilt where its inputs changed."""
    done: dict[int, Node] = {}
    for node in graph.nodes():
        if id(node) in replaced:
            done[id(node)] = replaced[id(node)]
        elif node.is_leaf:
            done[id(node)] = node
        else:
            fresh = apply() if id(node) in foreign else None
            inputs = tuple(fresh if i is norm and fresh is not None else done[id(i)] for i in node.inputs)
            same = all(a is b for a, b in zip(inputs, node.inputs, strict=True))
            done[id(node)] = node if same else node.with_(inputs=inputs)
    return graph.with_(outputs=tuple(done[id(n)] for n in graph.outputs),
                       mutations=tuple((fqn, done[id(n)]) for fqn, n in graph.mutations))


class _Region:
    """The pointwise nodes between a norm and its reductions (`chain`, topological order), the reductions
    (`terminals`), the norm's private producers (`private`, topological order, x last if private) and
    the pointwise ops outside the region that read the norm itself (`foreign`: each gets the apply
    computed once more, which its kernel inlines)."""

    def __init__(self, chain: list[Node], terminals: list[Node], private: list[Node], foreign: list[Node]):
        self.chain, self.terminals, self.private, self.foreign = chain, terminals, private, foreign


def _region(norm: Node, users: dict[int, list[Node]], roots: set[int], memo: dict[int, bool],
            position: dict[int, int]) -> _Region | None:
    if norm.op not in NORMS or norm.dtype != torch.float32 or norm.inputs[0].dtype != torch.float32:
        return None
    if norm.op == "batch_norm" and (not norm.attr("training") or norm.attr("has_running")):
        return None
    space = space_of(norm)
    if space is None or id(norm) in roots or space.row_length <= 1 or is_param_only(norm, memo):
        return None
    downstream = descendants(norm, users)
    # every node reached from the norm through pointwise ops, classified in topological order (so that a
    # node's region inputs are known when it is): a terminal reduction, a chain node (pointwise, the
    # norm's shape, reading nothing computed from the norm outside the region), or a foreign reader
    reached: dict[int, Node] = {}
    stack = [norm]
    while stack:
        for user in users[id(stack.pop())]:
            if id(user) not in reached:
                reached[id(user)] = user
                if user.op in POINTWISE_OPS:
                    stack.append(user)
    chain: dict[int, Node] = {}
    terminals: dict[int, Node] = {}
    foreign: dict[int, Node] = {}
    for user in sorted(reached.values(), key=lambda n: position[id(n)]):
        region = [i for i in user.inputs if i is norm or id(i) in chain]
        if not region:
            continue     # past a foreign reader or a terminal: outside the region
        pointwise = user.op in POINTWISE_OPS and user.dtype == torch.float32 and user.shape == norm.shape
        computed = [i for i in user.inputs if id(i) in downstream and id(i) not in chain]
        if user.op in TERMINALS and user.dtype == torch.float32 and user.inputs[0] in region \
                and len(user.inputs) == 1:
            terminals[id(user)] = user
        elif pointwise and not computed and id(user) not in roots:
            chain[id(user)] = user
        elif pointwise and computed and all(i is norm for i in region) and _split_dim(space) is None:
            # the norm read beside a value computed from the region (the gate of a squeeze-and-excitation
            # block, from the pooled mean through a GEMM): that reader normalizes x itself, in its own kernel
            foreign[id(user)] = user
        else:
            return None
    if not terminals:
        return None
    rank = len(norm.shape)
    mapped = {_kept_dims(space, _mapped_dims(space, t.attr("dims"), rank)) for t in terminals.values()}
    if len(mapped) != 1 or next(iter(mapped)) == _kept_dims(space, space.reduce):
        return None
    inside = {id(norm), *chain}
    outside = [o for n in chain.values() for o in n.inputs if id(o) not in inside and o.op != "const"]
    # every operand a chain node reads from outside broadcasts to the norm's shape (none is computed from
    # the norm: a chain node reads no such value, above)
    if any(o.dtype != torch.float32 or not broadcasts_to(o.shape, norm.shape) for o in outside):
        return None
    private = _private_producers(norm, users, memo, position)
    if space.domain != space.shape:
        # the domain view reads every full-size value through a reshape: contiguous memory only (no view)
        private_ids = {id(n) for n in private}
        leaves = [o for n in private for o in n.inputs if id(o) not in private_ids]
        full = [o for o in [*outside, *leaves, norm.inputs[0]]
                if o.shape == norm.shape and id(o) not in private_ids]
        if any(v.op in VIEW_OPS for v in full):
            return None
    return _Region(sorted(chain.values(), key=lambda n: position[id(n)]), list(terminals.values()), private,
                   list(foreign.values()))


def _split_dim(space: Space) -> int | None:
    """The IR dim the domain splits in two (GroupNorm's channels), or None."""
    return next((d for d, parts in enumerate(space.split) if parts == 2), None)


def _mapped_dims(space: Space, dims: tuple[int, ...], rank: int) -> tuple[int, ...]:
    c = _split_dim(space)
    dims = tuple(range(rank)) if not dims else dims
    if c is None:
        return tuple(dims)
    out: list[int] = []
    for d in dims:
        out += [d] if d < c else [c, c + 1] if d == c else [d + 1]
    return tuple(out)


def _kept_dims(space: Space, reduced: tuple[int, ...]) -> tuple[int, ...]:
    """The domain dims of more than one element that a reduction over `reduced` keeps (what its rows are:
    a GroupNorm of one group reduces the same rows whether its group dim is named or not)."""
    return tuple(d for d, size in enumerate(space.domain) if size > 1 and d not in reduced)


def _in_domain(space: Space, operand: Node) -> Node:
    """`operand` (broadcasting to the norm's shape) as a value broadcasting to the domain."""
    c = _split_dim(space)
    if c is None or operand.op == "const":
        return operand
    rank = len(space.shape)
    shape = (1,) * (rank - len(operand.shape)) + tuple(operand.shape)
    split = space.domain[c:c + 2] if shape[c] != 1 else (1, 1)
    return make_node("reshape", [operand], shape=shape[:c] + tuple(split) + shape[c + 1:])


def _private_producers(norm: Node, users: dict[int, list[Node]], memo: dict[int, bool],
                       position: dict[int, int]) -> list[Node]:
    """The pointwise producers of the norm's input (it included) that only the norm, each other and the
    norm's sibling reductions (BatchNorm's running statistics over the same rows) read, in topological
    order; never a value of parameters only (a derived weight stays computed once)."""
    space = space_of(norm)
    private: dict[int, Node] = {}

    def read_privately(node: Node) -> bool:
        return all(u is norm or id(u) in private or (u.op in REDUCE_OPS and space_of(u) == space)
                   for u in users[id(node)])

    frontier = [norm.inputs[0]]
    while frontier:
        node = frontier.pop()
        if (id(node) in private or node.op not in POINTWISE_OPS or node.dtype != torch.float32
                or is_param_only(node, memo) or not read_privately(node)):
            continue
        private[id(node)] = node
        frontier.extend(node.inputs)
    # a producer found before one of its readers joined may not be private after all: keep the ones whose
    # readers all are (to a fixpoint), then order them
    changed = True
    while changed:
        changed = False
        for key, node in list(private.items()):
            if not read_privately(node):
                del private[key]
                changed = True
    return sorted(private.values(), key=lambda n: position[id(n)])


def _split(norm: Node, region: _Region, users: dict[int, list[Node]], roots: set[int]
           ) -> tuple[dict[int, Node], Callable[[], Node]]:
    """Replacements (old id -> new node, built on nodes of the graph upstream of the norm) for the region's
    reductions, and a maker of the apply (from statistics computed once) for each foreign reader."""
    space = space_of(norm)
    c = _split_dim(space)
    private_ids = {id(n) for n in region.private}

    def copy_of_x() -> Node:
        """x in the domain, its private producers computed once more (a fresh copy per call)."""
        made: dict[int, Node] = {}
        for node in region.private:
            inputs = [made[id(i)] if id(i) in private_ids else _in_domain(space, i) for i in node.inputs]
            made[id(node)] = make_node(node.op, inputs, **node.attr_dict)
        x = norm.inputs[0]
        return made[id(x)] if id(x) in made else _in_domain(space, x)

    # BatchNorm / LayerNorm: the statistics read x itself (its running statistics read it too)
    x_stats = norm.inputs[0] if c is None else copy_of_x()
    mean = make_node("mean", [x_stats], dims=space.reduce, keepdim=True)
    var = make_node("var", [x_stats], dims=space.reduce, correction=0, keepdim=True)
    rstd = make_node("rsqrt", [make_node("add", [var, const_node(float(norm.attr("eps")))])])

    def apply() -> Node:
        """The normalized x from the statistics, its producers and the apply computed afresh (a reader's
        kernel inlines its own copy)."""
        x_apply = copy_of_x() if region.private or c is not None else norm.inputs[0]
        y = make_node("mul", [make_node("sub", [x_apply, mean]), rstd])
        for op, vector in affine(norm):
            y = make_node(op, [y, _in_domain(space, vector)])
        return y

    values: dict[int, Node] = {id(norm): apply()}
    for node in region.chain:
        inputs = [values[id(i)] if id(i) in values else _in_domain(space, i) for i in node.inputs]
        values[id(node)] = make_node(node.op, inputs, **node.attr_dict)
    replaced: dict[int, Node] = {}
    for terminal in region.terminals:
        dims = _mapped_dims(space, terminal.attr("dims"), len(space.shape))
        reduced = make_node(terminal.op, [values[id(terminal.inputs[0])]],
                            **{**terminal.attr_dict, "dims": dims})
        last = terminal
        if reduced.shape != terminal.shape:
            # pointwise ops of the result alone (a clamp) move before the reshape: the epilogue of the
            # reduction's kernel, not a kernel of their own after a view
            while id(last) not in roots and (tail := _tail_op(last, users)) is not None:
                operands = [reduced if i is last else i for i in tail.inputs]
                reduced = make_node(tail.op, operands, **tail.attr_dict)
                last = tail
            reduced = make_node("reshape", [reduced], shape=last.shape)
        replaced[id(last)] = reduced
    return replaced, apply


def _tail_op(value: Node, users: dict[int, list[Node]]) -> Node | None:
    """The one reader of `value` when it is a float32 pointwise op of it and scalars only."""
    readers = {id(u): u for u in users[id(value)]}
    if len(readers) != 1:
        return None
    (op,) = readers.values()
    if op.op not in POINTWISE_OPS or op.dtype != torch.float32 or op.shape != value.shape:
        return None
    return op if all(i is value or i.op == "const" for i in op.inputs) else None


def affine(norm: Node) -> list[tuple[str, Node]]:
    """("mul", weight) and ("add", bias) where present, each broadcasting to the norm's shape."""
    present = iter(norm.inputs[1:])
    rank = len(norm.shape)
    out = []
    for flag, op in (("has_weight", "mul"), ("has_bias", "add")):
        if not norm.attr(flag):
            continue
        vector = next(present)
        if norm.op != "layer_norm":       # a per-channel vector at channel_dim
            c = norm.attr("channel_dim", 1)
            vector = make_node("reshape", [vector], shape=(1,) * c + (vector.numel,) + (1,) * (rank - 1 - c))
        out.append((op, vector))
    return out
