"""The IR: one immutable node type and a graph of them.

A `Node` is an operation with its inputs (other nodes), attributes, and output shape and dtype.
Graph leaves are nodes too: `input` (a forward argument), `param` and `buffer` (by fully qualified name,
so emitted code can reach `self.<fqn>`), and `const` (a Python scalar). Nodes compare by identity; passes
build new nodes and return new graphs (see `substitute`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

LEAF_OPS = frozenset({"input", "param", "buffer", "const"})


def freeze_attrs(attrs: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """Attributes as a sorted tuple of pairs, with lists turned into tuples, so nodes stay immutable."""

    def freeze(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return tuple(freeze(v) for v in value)
        return value

    return tuple(sorted((key, freeze(value)) for key, value in (attrs or {}).items()))


@dataclass(frozen=True, eq=False)
class Node:
    op: str
    inputs: tuple[Node, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()
    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    name: str = ""

    @staticmethod
    def make(op: str, inputs: Iterable[Node] = (), attrs: Mapping[str, Any] | None = None, *,
             shape: Iterable[int] = (), dtype: torch.dtype = torch.float32, name: str = "") -> Node:
        return Node(op, tuple(inputs), freeze_attrs(attrs), tuple(int(s) for s in shape), dtype, name)

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)

    def with_(self, **changes: Any) -> Node:
        """A copy with some fields replaced (`attrs` may be given as a dict)."""
        if "attrs" in changes and isinstance(changes["attrs"], Mapping):
            changes["attrs"] = freeze_attrs(changes["attrs"])
        if "inputs" in changes:
            changes["inputs"] = tuple(changes["inputs"])
        fields = {"op": self.op, "inputs": self.inputs, "attrs": self.attrs, "shape": self.shape,
                  "dtype": self.dtype, "name": self.name}
        fields.update(changes)
        return Node(**fields)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def is_leaf(self) -> bool:
        return self.op in LEAF_OPS

    def __repr__(self) -> str:
        dtype = _dtype_name(self.dtype)
        return f"Node({self.op}, shape={list(self.shape)}, dtype={dtype}, name={self.name!r})"


@dataclass(frozen=True)
class Graph:
    """A model's forward as IR. `inputs` are the forward arguments in order; `params` the parameters
    and buffers it reads (by FQN); `mutations` the in-place buffer updates the forward performs
    (e.g. BatchNorm running stats in training mode), as (buffer FQN, node computing the new value).
    `output_kind` records how forward returned its outputs: "tensor" (one), "tuple" or "list"."""

    inputs: tuple[Node, ...]
    params: tuple[Node, ...]
    outputs: tuple[Node, ...]
    mutations: tuple[tuple[str, Node], ...] = ()
    output_kind: str = "tensor"
    training: bool = False
    meta: tuple[tuple[str, Any], ...] = field(default=())

    def roots(self) -> list[Node]:
        return list(self.outputs) + [node for _, node in self.mutations]

    def nodes(self) -> list[Node]:
        """Every node reachable from the outputs and mutations, in topological order; graph inputs and
        params first, in their declared order, whether used or not."""
        order: list[Node] = list(self.inputs) + list(self.params)
        seen = {id(n) for n in order}
        stack: list[tuple[Node, bool]] = [(root, False) for root in reversed(self.roots())]
        while stack:
            node, expanded = stack.pop()
            if id(node) in seen:
                continue
            if expanded:
                seen.add(id(node))
                order.append(node)
                continue
            stack.append((node, True))
            stack.extend((inp, False) for inp in reversed(node.inputs) if id(inp) not in seen)
        return order

    def users(self) -> dict[int, list[Node]]:
        """For each node id, the nodes that read it (a node reading an input twice is listed twice)."""
        result: dict[int, list[Node]] = {id(n): [] for n in self.nodes()}
        for node in self.nodes():
            for inp in node.inputs:
                result[id(inp)].append(node)
        return result

    def with_(self, **changes: Any) -> Graph:
        fields = {"inputs": self.inputs, "params": self.params, "outputs": self.outputs,
                  "mutations": self.mutations, "output_kind": self.output_kind, "training": self.training,
                  "meta": self.meta}
        fields.update(changes)
        return Graph(**fields)

    def __str__(self) -> str:
        return format_graph(self)

    def to_json(self) -> dict:
        names = _value_names(self)
        nodes = []
        for node in self.nodes():
            nodes.append({
                "name": names[id(node)],
                "op": node.op,
                "inputs": [names[id(i)] for i in node.inputs],
                "attrs": {k: _jsonable(v) for k, v in node.attrs},
                "shape": list(node.shape),
                "dtype": _dtype_name(node.dtype),
                **({"fqn": node.name} if node.op in ("param", "buffer", "input") else {}),
            })
        return {
            "training": self.training,
            "output_kind": self.output_kind,
            "nodes": nodes,
            "outputs": [names[id(n)] for n in self.outputs],
            "mutations": {fqn: names[id(n)] for fqn, n in self.mutations},
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def substitute(graph: Graph, rebuild: Callable[[Node, tuple[Node, ...]], Node]) -> Graph:
    """Rebuild a graph bottom-up: `rebuild(old_node, new_inputs)` returns the node to use in its place
    (return `old_node.with_(inputs=new_inputs)` to keep it). Leaves are kept as they are."""
    done: dict[int, Node] = {}
    for node in graph.nodes():
        if node.is_leaf:
            done[id(node)] = node
        else:
            done[id(node)] = rebuild(node, tuple(done[id(i)] for i in node.inputs))
    return graph.with_(
        outputs=tuple(done[id(n)] for n in graph.outputs),
        mutations=tuple((fqn, done[id(n)]) for fqn, n in graph.mutations),
    )


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "") if dtype is not None else "none"


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.dtype):
        return _dtype_name(value)
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return repr(value)


def _value_names(graph: Graph, inline_consts: bool = False) -> dict[int, str]:
    names: dict[int, str] = {}
    counter = 0
    for node in graph.nodes():
        if node.op in ("input", "param", "buffer"):
            names[id(node)] = node.name
        elif inline_consts and node.op == "const":
            # Shown inline, but a const still takes its number, so text and JSON dumps agree on names.
            names[id(node)] = repr(node.attr("value"))
            counter += 1
        else:
            names[id(node)] = f"%{counter}"
            counter += 1
    return names


def format_graph(graph: Graph) -> str:
    """A readable dump, one line per node: `%3: float32[8, 16] = mul(%1, 0.5)`; consts are shown inline."""
    names = _value_names(graph, inline_consts=True)
    lines = [f"graph(training={graph.training}):"]
    for node in graph.nodes():
        if node.op == "const":
            continue
        type_text = f"{_dtype_name(node.dtype)}{list(node.shape)}"
        if node.op in ("input", "param", "buffer"):
            lines.append(f"  {node.op} {node.name}: {type_text}")
            continue
        args = ", ".join(names[id(i)] for i in node.inputs)
        attrs = "  ".join(f"{k}={_jsonable(v)}" for k, v in node.attrs)
        lines.append(f"  {names[id(node)]}: {type_text} = {node.op}({args}){'  ' + attrs if attrs else ''}")
    outs = ", ".join(names[id(n)] for n in graph.outputs)
    lines.append(f"  return ({outs})" if graph.output_kind != "tensor" else f"  return {outs}")
    for fqn, node in graph.mutations:
        lines.append(f"  update {fqn} <- {names[id(node)]}")
    return "\n".join(lines)
