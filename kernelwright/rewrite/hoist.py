"""Derived weights: the parameter-only subgraphs a rewrite leaves behind (reduced or folded weights),
which the emitted module computes with ATen at the top of every forward (never cached: a write through
`param.data` would go unseen).

Contract for the emitter (docs/rewrites.md, "Derived weights"):
- `hoistable_nodes(graph)` lists, in topological order, the roots of the maximal subgraphs whose leaves
  are only `param`/`buffer`/`const` (and input-free creation ops such as `full`/`arange`/`literal`), that
  some per-call node reads. Everything under a root is needed only to compute that root.
- Never listed: graph outputs and mutation values (they stay per-call steps), values reading a buffer
  the graph mutates (it changes every call), pure view chains over a leaf (no work to save), and
  anything random. Views on top of a derived value stay per call (they are
  free, and the planner may fold them into a kernel: a GEMM reads a transposed operand directly), so
  the root is the computed value under them.
- `hoist_sources(root)` gives the FQNs of the parameters/buffers it reads (listed in the emitted file's
  header).
"""

from __future__ import annotations

import torch

from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import COMPARISONS
from kernelwright.rewrite.engine import is_param_only
from kernelwright.rewrite.match import view_of_leaf

# Ops that return a view of a freshly computed (contiguous) tensor: free per call.
FREE_VIEWS = frozenset({"reshape", "permute", "expand", "slice", "select"})


def hoist_sources(node: Node) -> tuple[str, ...]:
    """FQNs of the parameters and buffers `node` reads, in first-seen order."""
    seen: dict[int, None] = {}
    names: dict[str, None] = {}
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen[id(current)] = None
        if current.op in ("param", "buffer"):
            names[current.name] = None
        stack.extend(reversed(current.inputs))
    return tuple(names)


def _broadcast_predicate(node: Node, users: list[Node]) -> bool:
    """A comparison of float values whose every reader broadcasts it (a [T, T] causal mask over [B, H, T, T]
    scores): computed per element inside the reader's kernel, which reads its float operands, instead of
    a derived bool tensor (reduction kernels read float32 only, so a masked softmax kept the mask apart)."""
    return (node.op in COMPARISONS and node.dtype == torch.bool and bool(users)
            and all(i.dtype == torch.float32 or i.op == "const" for i in node.inputs)
            and all(u.numel > node.numel for u in users))


def hoistable_nodes(graph: Graph) -> list[Node]:
    """Roots of the parameter-only subgraphs the emitter computes apart (see the module docstring)."""
    mutated = {fqn for fqn, _ in graph.mutations}
    roots = {id(n) for n in graph.roots()}
    memo: dict[int, bool] = {}
    nodes = graph.nodes()
    cacheable = {
        id(n) for n in nodes
        if not n.is_leaf and id(n) not in roots and is_param_only(n, memo)
        and not mutated.intersection(hoist_sources(n))
    }
    users = graph.users()
    for node in reversed(nodes):  # users first, so a chain of views is peeled from the top
        if id(node) in cacheable and (node.op in FREE_VIEWS or _broadcast_predicate(node, users[id(node)])) \
                and not any(id(u) in cacheable for u in users[id(node)]):
            cacheable.discard(id(node))
    read_per_call: set[int] = set()
    for node in nodes:
        if id(node) not in cacheable:
            read_per_call.update(id(i) for i in node.inputs)
    return [n for n in nodes if id(n) in cacheable and id(n) in read_per_call and not view_of_leaf(n)]
