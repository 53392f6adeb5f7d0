"""The reference interpreter: runs any IR graph with PyTorch on the CPU. It is the oracle that every
rewrite and fusion plan is checked against.

Each node executes its op's ATen source (`ir/ops.py`), the same expression the emitter writes into
ModelNew files. With `dtype=torch.float64` every floating tensor (inputs, parameters, and dtypes named in
attributes such as `cast`/`full`) is upcast, giving a higher-precision oracle for the same computation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import compiled

_CPU = torch.device("cpu")


def interpret(
    graph: Graph,
    inputs: Sequence[Any],
    params: Mapping[str, torch.Tensor] | torch.nn.Module,
    dtype: torch.dtype | None = None,
) -> tuple[list[Any], dict[str, torch.Tensor]]:
    """Execute `graph` on the forward arguments `inputs` with parameters/buffers `params` (by FQN, or a
    module to read them from). Returns the outputs in `graph.outputs` order and the new values of the
    buffers the forward updates (`graph.mutations`); `params` itself is never modified."""
    values: dict[int, Any] = {}
    for node in graph.nodes():
        if node.op == "input":
            values[id(node)] = upcast(_argument(node, inputs), dtype)
        elif node.op in ("param", "buffer"):
            values[id(node)] = upcast(parameter(params, node.name), dtype)
        elif node.op == "const":
            values[id(node)] = node.attr("value")
        else:
            values[id(node)] = run_node(node, [values[id(i)] for i in node.inputs], dtype)
    outputs = [values[id(n)] for n in graph.outputs]
    updated = {fqn: values[id(n)] for fqn, n in graph.mutations}
    return outputs, updated


def run_node(node: Node, args: Sequence[Any], dtype: torch.dtype | None = None,
             device: torch.device = _CPU) -> Any:
    """One node on concrete values (tensors on `device` or Python scalars); with `dtype`, the floating
    dtypes named in its attributes are `dtype` too."""
    attrs = _upcast_attrs(node.attrs, dtype) if dtype is not None else node.attrs
    return compiled(node.op, attrs, len(args))(device, *args)


def _argument(node: Node, inputs: Sequence[Any]) -> Any:
    index = node.attr("index")
    if index is None or index >= len(inputs):
        raise ValueError(f"the graph reads forward argument {index} ({node.name}); {len(inputs)} were given")
    return inputs[index]


def parameter(params: Mapping[str, torch.Tensor] | torch.nn.Module, fqn: str) -> torch.Tensor:
    """The parameter or buffer `fqn` ("layer.0.weight"), from a mapping by FQN or read off a module."""
    if isinstance(params, torch.nn.Module):
        value: Any = params
        for part in fqn.split("."):
            value = getattr(value, part)
        return value
    return params[fqn]


def upcast(value: Any, dtype: torch.dtype | None) -> Any:
    if dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    return value


def _upcast_attrs(attrs: Any, dtype: torch.dtype) -> Any:
    """Attributes with every floating dtype replaced by `dtype` (a `cast` to float32 stays a no-op)."""
    if isinstance(attrs, torch.dtype):
        return dtype if attrs.is_floating_point else attrs
    if isinstance(attrs, tuple):
        return tuple(_upcast_attrs(a, dtype) for a in attrs)
    return attrs
