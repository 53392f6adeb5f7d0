"""The fusion plan: which IR nodes form one kernel (a `FusedGroup`) and which stay ATen calls.

Matchers (one per kernel family, listed in priority order in `kernelwright.fuse.MATCHERS`) propose
groups; the planner accepts a group only if it is convex in the graph where the groups accepted before it
are contracted to single nodes (no path leaves the group and comes back, so every group runs as one step
and the steps have a valid order), then orders the steps topologically. Every non-leaf node nobody
claimed becomes an `AtenStep`. Running a plan is `verify/execute.py`'s: this module only decides.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kernelwright.ir.graph import Graph, Node

VIEW_OPS = frozenset({"reshape", "permute", "expand", "slice", "select"})


@dataclass(frozen=True)
class FusedGroup:
    """One kernel. `nodes` in topological order; `inputs` the values read from outside the group (leaves
    other than consts, or other steps' outputs), in the order the kernel takes them; `outputs`
    the nodes whose values are needed after the group, in the order the kernel returns them; `config`
    family-specific frozen settings (block size, vector width, ...)."""

    family: str
    nodes: tuple[Node, ...]
    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]
    config: tuple = ()


@dataclass(frozen=True)
class AtenStep:
    """A node executed by its ATen call (`aten_source` in `kernelwright.ir.ops`)."""

    node: Node


Step = FusedGroup | AtenStep
Matcher = Callable[[Graph, frozenset[int]], list[FusedGroup]]


@dataclass(frozen=True)
class FusionPlan:
    """`steps` run on every call; `derived_steps` compute the `derived` values (roots of parameter-only
    subgraphs, see the module docstring), which `steps` read as if they were leaves."""

    steps: tuple[Step, ...]
    graph: Graph
    derived: tuple[Node, ...] = ()
    derived_steps: tuple[AtenStep, ...] = ()

    @property
    def groups(self) -> list[FusedGroup]:
        return [s for s in self.steps if isinstance(s, FusedGroup)]

    def without(self, group: FusedGroup) -> FusionPlan:
        """The same plan with `group` dissolved into ATen steps (the per-group fallback)."""
        return self.replace(group, [AtenStep(n) for n in group.nodes])

    def replace(self, group: FusedGroup, steps: Sequence[Step]) -> FusionPlan:
        index = next(i for i, s in enumerate(self.steps) if s is group)
        return dataclasses.replace(self, steps=self.steps[:index] + tuple(steps) + self.steps[index + 1:])


def make_group(graph: Graph, family: str, nodes: Iterable[Node], config: tuple = (),
               users: dict[int, list[Node]] | None = None) -> FusedGroup:
    """A group with `inputs` and `outputs` derived from the graph: inputs are the non-const values read
    from outside (first-use order), outputs the members read outside the group, by graph outputs or by
    buffer mutations (topological order)."""
    users = graph.users() if users is None else users
    member_ids = {id(n) for n in nodes}
    ordered = tuple(n for n in graph.nodes() if id(n) in member_ids)
    roots = {id(n) for n in graph.roots()}
    inputs: list[Node] = []
    for node in ordered:
        for inp in node.inputs:
            if id(inp) not in member_ids and inp.op != "const" and all(inp is not i for i in inputs):
                inputs.append(inp)
    outputs = tuple(n for n in ordered
                    if id(n) in roots or any(id(u) not in member_ids for u in users[id(n)]))
    return FusedGroup(family, ordered, tuple(inputs), outputs, tuple(config))


class Partition:
    """Groups accepted so far, and the convexity test against them. Matchers may use one internally to
    keep their own groups mutually consistent; the planner uses one across all matchers."""

    def __init__(self, graph: Graph, users: dict[int, list[Node]] | None = None):
        self.graph = graph
        self.users = graph.users() if users is None else users
        self._unit: dict[int, int] = {}          # node id -> index of the accepted group holding it
        self._members: list[list[Node]] = []

    @property
    def claimed(self) -> frozenset[int]:
        return frozenset(self._unit)

    def is_convex(self, nodes: Iterable[Node]) -> bool:
        """No path leaves `nodes` and re-enters them, walking accepted groups as single nodes (a path that
        enters an accepted group may leave it from any of its members)."""
        ids = {id(n) for n in nodes}
        if ids & self._unit.keys():
            return False
        stack = [u for n in nodes for u in self.users[id(n)] if id(u) not in ids]
        seen: set[tuple[str, int]] = set()
        while stack:
            node = stack.pop()
            unit = self._unit.get(id(node))
            key = ("group", unit) if unit is not None else ("node", id(node))
            if key in seen:
                continue
            seen.add(key)
            for member in self._members[unit] if unit is not None else [node]:
                for user in self.users[id(member)]:
                    if id(user) in ids:
                        return False
                    stack.append(user)
        return True

    def add(self, nodes: Iterable[Node]) -> None:
        index = len(self._members)
        self._members.append(list(nodes))
        for node in self._members[index]:
            self._unit[id(node)] = index


class Matching:
    """What one matcher works with: each node's readers (`users`), the ids of the graph's outputs
    (`roots`), the ids claimed so far (`taken`: by the matchers before it, then by its own groups) and the
    convexity test against its own groups (`partition`)."""

    def __init__(self, graph: Graph, claimed: frozenset[int]):
        self.users = graph.users()
        self.roots = {id(n) for n in graph.roots()}
        self.taken = set(claimed)
        self.partition = Partition(graph, self.users)

    def claim(self, members: Iterable[Node]) -> None:
        """Accept `members` as one group: no later group of this matcher may take any of them."""
        members = list(members)
        self.partition.add(members)
        self.taken.update(id(n) for n in members)


def plan_fusion(graph: Graph, matchers: Sequence[Matcher] | None = None,
                derived: Sequence[Node] = (), split_statistics: bool = True) -> FusionPlan:
    """Run the matchers in priority order, keep the groups that are valid, order all steps. `derived`:
    roots of parameter-only subgraphs to compute once (`rewrite.hoistable_nodes`), kept out of the groups
    and the per-call steps. First, norms read only by reductions over other rows are split into their
    statistics and a prologue of those reductions (`fuse/statistics.py`, off with `split_statistics`),
    and where the conv family matches, the train-mode BatchNorms and GroupNorms of its chains into
    statistics its epilogue computes and a pointwise apply (`conv.norms_apart`); the plan's `graph` is the
    graph after that."""
    if matchers is None:
        from kernelwright.fuse import MATCHERS

        matchers = MATCHERS
    if split_statistics:
        from kernelwright.fuse.statistics import statistics_apart

        graph = statistics_apart(graph)
    from kernelwright.fuse import conv

    if conv.match in matchers:
        graph = conv.norms_apart(graph)
    users = graph.users()
    partition = Partition(graph, users)
    once = derived_nodes(graph, derived, users)
    if once:
        partition.add(once)  # claimed up front: no matcher may put a derived node into a per-call kernel
    groups: list[FusedGroup] = []
    for match in matchers:
        for group in match(graph, partition.claimed):
            if group.nodes and partition.is_convex(group.nodes):
                partition.add(group.nodes)
                groups.append(group)
    skip = frozenset(id(n) for n in once)
    return FusionPlan(_order_steps(graph, groups, users, skip), graph, tuple(derived),
                      tuple(AtenStep(n) for n in once))


def descendants(node: Node, users: dict[int, list[Node]]) -> set[int]:
    """Ids of the nodes computed from `node` (not itself)."""
    seen: set[int] = set()
    stack = list(users[id(node)])
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(users[id(n)])
    return seen


def derived_nodes(graph: Graph, roots: Sequence[Node], users: dict[int, list[Node]] | None = None
                  ) -> list[Node]:
    """The non-leaf nodes computing `roots`, in topological order. Raises ValueError unless every root is
    computed from parameters, buffers and constants only, is not itself a graph output or buffer update,
    and is the only node of its subgraph that per-call nodes read (the `hoistable_nodes` contract)."""
    if not roots:
        return []
    users = graph.users() if users is None else users
    root_ids = {id(r) for r in roots}
    if root_ids & {id(n) for n in graph.roots()}:
        raise ValueError("a derived value is a graph output or buffer update: it would alias across calls")
    inside: set[int] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node.op == "input":
            raise ValueError(f"derived value {node!r} depends on a forward input")
        if id(node) in inside or node.is_leaf:
            continue
        inside.add(id(node))
        stack.extend(node.inputs)
    for node in graph.nodes():
        if id(node) in inside and id(node) not in root_ids \
                and any(id(u) not in inside for u in users[id(node)]):
            raise ValueError(f"{node!r} inside a derived subgraph is read per call; only its root may be")
    return [n for n in graph.nodes() if id(n) in inside]


def _order_steps(graph: Graph, groups: list[FusedGroup], users: dict[int, list[Node]],
                 skip: frozenset[int] = frozenset()) -> tuple[Step, ...]:
    """Kahn's algorithm on the graph with each group contracted, ties broken by original position so
    the plan reads like the model's forward. Nodes in `skip` (derived values) are not steps."""
    order = [n for n in graph.nodes() if not n.is_leaf and id(n) not in skip]
    position = {id(n): i for i, n in enumerate(order)}
    steps: list[Step] = []
    step_of: dict[int, int] = {}
    for group in groups:
        for node in group.nodes:
            step_of[id(node)] = len(steps)
        steps.append(group)
    for node in order:
        if id(node) not in step_of:
            step_of[id(node)] = len(steps)
            steps.append(AtenStep(node))

    def members(step: Step) -> tuple[Node, ...]:
        return step.nodes if isinstance(step, FusedGroup) else (step.node,)

    pending = [0] * len(steps)
    successors: list[set[int]] = [set() for _ in steps]
    for index, step in enumerate(steps):
        for node in members(step):
            for inp in node.inputs:
                source = step_of.get(id(inp))
                if source is not None and source != index and index not in successors[source]:
                    successors[source].add(index)
                    pending[index] += 1
    heap = [(min(position[id(n)] for n in members(s)), i) for i, s in enumerate(steps) if pending[i] == 0]
    heapq.heapify(heap)
    result: list[Step] = []
    while heap:
        _, index = heapq.heappop(heap)
        result.append(steps[index])
        for succ in successors[index]:
            pending[succ] -= 1
            if pending[succ] == 0:
                heapq.heappush(heap, (min(position[id(n)] for n in members(steps[succ])), succ))
    if len(result) != len(steps):
        raise AssertionError("fusion groups form a cycle; Partition.is_convex should have prevented it")
    return tuple(result)


def describe_plan(plan: FusionPlan) -> str:
    """One line per step, for `--explain`."""
    names = _short_names(plan.graph)
    lines = []
    for step in plan.derived_steps:
        ins = ", ".join(names.get(id(n), n.op) for n in step.node.inputs)
        lines.append(f"once {names[id(step.node)]} = {step.node.op}({ins})")
    for step in plan.steps:
        if isinstance(step, FusedGroup):
            ops = " → ".join(n.op for n in step.nodes)
            ins = ", ".join(names.get(id(n), n.op) for n in step.inputs)
            outs = ", ".join(names.get(id(n), n.op) for n in step.outputs)
            lines.append(f"kernel[{step.family}] ({ins}) -> ({outs}): {ops}")
        else:
            ins = ", ".join(names.get(id(n), n.op) for n in step.node.inputs)
            lines.append(f"aten {names[id(step.node)]} = {step.node.op}({ins})")
    return "\n".join(lines)


def _short_names(graph: Graph) -> dict[int, str]:
    names: dict[int, str] = {}
    counter = 0
    for node in graph.nodes():
        if node.op in ("input", "param", "buffer"):
            names[id(node)] = node.name
        else:
            # numbered like `format_graph`, so --explain's plan and graph dumps agree
            names[id(node)] = repr(node.attr("value")) if node.op == "const" else f"%{counter}"
            counter += 1
    return names
