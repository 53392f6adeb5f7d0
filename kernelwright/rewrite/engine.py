"""The graph-rewrite engine: rules are data, applied bottom-up to a fixpoint, with CSE on the way.

A `Rule` names the root ops it looks at and a function `(node, ctx) -> Node | None` that checks its
precondition and returns the replacement (or None). One pass walks the graph in topological order,
rebuilds each node on its already-rewritten inputs, tries the rules on it in list order until none
fires, then merges it with an identical earlier node (CSE). Passes repeat until nothing changes.
Dead nodes vanish on their own: a graph is what is reachable from its outputs and mutations (DCE).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kernelwright.ir.graph import Graph, Node

# ATen targets whose results differ call to call: never merged by CSE.
_NONDETERMINISTIC = ("rand", "dropout", "bernoulli", "normal", "uniform", "multinomial", "empty", "poisson")
# Passes before the engine gives up on a fixpoint (each pass fires at least one rule or stops).
MAX_PASSES = 64
# Rules re-tried on one root within a pass; the next pass resumes if a chain is longer.
MAX_ROOT_REWRITES = 16
# The use count of a node built inside a rule during this pass is not known yet.
UNKNOWN_USES = 1 << 30

RuleFn = Callable[[Node, "RewriteContext"], "Node | None"]


@dataclass(frozen=True)
class Rule:
    """A pattern (root ops + the structural checks inside `fn`) and its replacement."""

    name: str
    ops: frozenset[str]
    fn: RuleFn
    summary: str
    assume_finite: bool = False  # only valid when no input holds NaN or Inf; off unless asked for
    # Reassociates products so that, on inputs with heavy cancellation, the result leaves the FP32
    # tolerance: off unless asked for (like --allow-tf32).
    reassociates: bool = False


def rule(*ops: str, summary: str, assume_finite: bool = False, reassociates: bool = False
         ) -> Callable[[RuleFn], Rule]:
    """Decorator turning a replacement function into a `Rule` matching nodes whose op is in `ops`."""

    def wrap(fn: RuleFn) -> Rule:
        return Rule(fn.__name__, frozenset(ops), fn, summary, assume_finite, reassociates)

    return wrap


@dataclass(frozen=True)
class RewriteEvent:
    rule: str
    where: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.rule:<28} {self.where}{'  — ' + self.detail if self.detail else ''}"


@dataclass
class RewriteLog:
    """What the rewrite stage did: `events` (a rule replaced a node) and `notes` (facts found for later
    stages, e.g. reductions of one input that should share a kernel; the graph is unchanged by them)."""

    events: list[RewriteEvent] = field(default_factory=list)
    notes: list[RewriteEvent] = field(default_factory=list)
    nodes_before: int = 0
    nodes_after: int = 0

    def counts(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for event in self.events:
            result[event.rule] = result.get(event.rule, 0) + 1
        return result

    def __str__(self) -> str:
        lines = [f"rewrite: {len(self.events)} rewrites, "
                 f"{self.nodes_before} -> {self.nodes_after} compute nodes"]
        lines += [f"  {event}" for event in self.events]
        if self.notes:
            lines.append("notes for later stages:")
            lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)


class RewriteContext:
    """What a rule may ask about the graph being rewritten: use counts, training mode, whether a value
    depends on parameters only (so precomputing from it is free at run time), and the finite flag."""

    def __init__(self, graph: Graph, assume_finite: bool) -> None:
        self.training = graph.training
        self.assume_finite = assume_finite
        self._uses: dict[int, int] = {}
        self._users: dict[int, list[Node]] = {}
        for node in graph.nodes():
            for inp in node.inputs:
                self._uses[id(inp)] = self._uses.get(id(inp), 0) + 1
                users = self._users.setdefault(id(inp), [])
                if not users or users[-1] is not node:
                    users.append(node)
        for root in graph.roots():
            self._uses[id(root)] = self._uses.get(id(root), 0) + 1
        self._param_only: dict[int, bool] = {}

    def uses(self, node: Node) -> int:
        return self._uses.get(id(node), UNKNOWN_USES)

    def users(self, node: Node) -> tuple[Node, ...]:
        """The nodes reading `node` in the graph as this pass began (none for a node built in this pass:
        a rule that needs them fires on the next pass)."""
        return tuple(self._users.get(id(node), ()))

    def single_use(self, node: Node) -> bool:
        return self.uses(node) == 1

    def takes_over(self, new: Node, old: Node) -> None:
        """`new` stands in for `old`: it inherits old's users."""
        if new is not old and id(old) in self._uses:
            self._uses[id(new)] = self._uses[id(old)]

    def param_only(self, node: Node) -> bool:
        """True when `node` depends only on parameters, buffers and constants (no forward input, nothing
        random): such a value is computed apart from the per-call work (a derived weight, `hoist.py`)."""
        key = id(node)
        if key not in self._param_only:
            self._param_only[key] = is_param_only(node, self._param_only)
        return self._param_only[key]


def is_param_only(node: Node, memo: dict[int, bool] | None = None) -> bool:
    memo = {} if memo is None else memo
    stack = [node]
    while stack:
        current = stack[-1]
        if id(current) in memo:
            stack.pop()
            continue
        if current.op == "input" or is_nondeterministic(current):
            memo[id(current)] = False
            stack.pop()
            continue
        pending = [i for i in current.inputs if id(i) not in memo]
        if pending:
            stack.extend(pending)
            continue
        memo[id(current)] = all(memo[id(i)] for i in current.inputs)
        stack.pop()
    return memo[id(node)]


def is_nondeterministic(node: Node) -> bool:
    target = str(node.attr("target", ""))
    return node.op == "aten_fallback" and any(word in target for word in _NONDETERMINISTIC)


def describe(node: Node) -> str:
    """A short, stable description of a node for the log: `sum(mm) f32[8, 1]`."""
    args = ", ".join(i.name if i.op in ("input", "param", "buffer") else i.op for i in node.inputs)
    dtype = str(node.dtype).replace("torch.", "")
    label = f"{node.name}=" if node.name else ""
    return f"{label}{node.op}({args}) {dtype}{list(node.shape)}"


def _cse_key(node: Node) -> tuple | None:
    if node.op == "const":
        value = node.attr("value")
        # repr keeps -0.0 apart from 0.0 and True apart from 1.
        return ("const", type(value).__name__, repr(value), node.dtype)
    if node.is_leaf or is_nondeterministic(node):
        return None
    key = (node.op, tuple(id(i) for i in node.inputs), node.attrs, node.shape, node.dtype)
    try:
        hash(key)
    except TypeError:
        key = (node.op, tuple(id(i) for i in node.inputs), repr(node.attrs), node.shape, node.dtype)
    return key


def _index_rules(rules: Iterable[Rule], assume_finite: bool,
                 allow_reassociation: bool) -> dict[str, list[Rule]]:
    by_op: dict[str, list[Rule]] = {}
    for r in rules:
        if (r.assume_finite and not assume_finite) or (r.reassociates and not allow_reassociation):
            continue
        for op in r.ops:
            by_op.setdefault(op, []).append(r)
    return by_op


def _rewrite_root(node: Node, by_op: dict[str, list[Rule]], ctx: RewriteContext, log: RewriteLog) -> Node:
    for _ in range(MAX_ROOT_REWRITES):
        for r in by_op.get(node.op, ()):
            new = r.fn(node, ctx)
            if new is not None and new is not node:
                _check_same_type(r, node, new)
                log.events.append(RewriteEvent(r.name, describe(node), f"-> {describe(new)}"))
                ctx.takes_over(new, node)
                node = new
                break
        else:
            return node
    return node


def _check_same_type(r: Rule, old: Node, new: Node) -> None:
    if new.shape != old.shape or new.dtype != old.dtype:
        raise AssertionError(
            f"rewrite rule {r.name} changed {describe(old)} into {describe(new)}: shape/dtype must be kept")


def _one_pass(graph: Graph, by_op: dict[str, list[Rule]], assume_finite: bool,
              log: RewriteLog) -> tuple[Graph, bool]:
    ctx = RewriteContext(graph, assume_finite)
    done: dict[int, Node] = {}
    seen: dict[tuple, Node] = {}
    changed = False
    for node in graph.nodes():
        inputs = tuple(done[id(i)] for i in node.inputs)
        new = node
        if any(a is not b for a, b in zip(inputs, node.inputs, strict=True)):
            new = node.with_(inputs=inputs)
            ctx.takes_over(new, node)
        if not new.is_leaf:
            new = _rewrite_root(new, by_op, ctx, log)
        key = _cse_key(new)
        if key is not None:
            earlier = seen.setdefault(key, new)
            if earlier is not new:
                if not new.is_leaf:
                    log.events.append(RewriteEvent("cse", describe(new), "same as an earlier node"))
                new = earlier
        changed = changed or new is not node
        done[id(node)] = new
    if not changed:
        return graph, False
    return graph.with_(
        outputs=tuple(done[id(n)] for n in graph.outputs),
        mutations=tuple((fqn, done[id(n)]) for fqn, n in graph.mutations),
    ), True


def graph_rewrite(graph: Graph, rules: Iterable[Rule], *, assume_finite: bool = False,
                  allow_reassociation: bool = False,
                  log: RewriteLog | None = None) -> tuple[Graph, RewriteLog]:
    """Apply `rules` (in order, first match wins) and CSE to a fixpoint. Rules that assume finite
    values or reassociate products run only when the matching flag is set."""
    log = RewriteLog() if log is None else log
    by_op = _index_rules(rules, assume_finite, allow_reassociation)
    for _ in range(MAX_PASSES):
        graph, changed = _one_pass(graph, by_op, assume_finite, log)
        if not changed:
            return graph, log
    log.notes.append(RewriteEvent("engine", "graph", f"no fixpoint after {MAX_PASSES} passes; stopped"))
    return graph, log
