"""Running a fusion plan step by step, as the emitted forward will: the derived steps, then each step
either a group (a kernel, or its nodes run with ATen) or one ATen call. It is how each kernel is checked
on the values the model really produces (`measure.py`), how the compiler times a whole variant, and how
the tests check a plan against the interpreter (`ir/interpret.py`, whose node runner it uses)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from kernelwright.fuse.plan import FusedGroup, FusionPlan
from kernelwright.ir.graph import Node
from kernelwright.ir.interpret import parameter, run_node, upcast
from kernelwright.ir.ops import compiled

GroupRunner = Callable[[FusedGroup, list[Any]], Sequence[Any]]


def execute_plan(plan: FusionPlan, inputs: Sequence[Any],
                 params: Mapping[str, torch.Tensor] | torch.nn.Module, device: str | torch.device = "cpu",
                 run_group: GroupRunner | None = None) -> tuple[list[Any], dict[str, Any], dict[int, Any]]:
    """Run a plan step by step: the derived steps, then ATen steps with their ATen source, groups with
    `run_group(group, input values) -> output values` (default: their nodes' ATen sources). Later steps
    see only a group's outputs, so a plan with wrong inputs/outputs fails here. Returns (graph outputs,
    new buffer values by FQN, every visible value by node id)."""
    device = torch.device(device)
    run_group = run_group or (lambda group, args: run_group_with_aten(group, args, device))
    values: dict[int, Any] = {}
    for node in plan.graph.inputs:
        values[id(node)] = inputs[node.attr("index", 0)]
    for node in plan.graph.params:
        values[id(node)] = parameter(params, node.name)

    def value(node: Node) -> Any:
        return node.attr("value") if node.op == "const" else values[id(node)]

    for step in plan.derived_steps + plan.steps:
        if isinstance(step, FusedGroup):
            results = run_group(step, [value(i) for i in step.inputs])
            values.update((id(n), r) for n, r in zip(step.outputs, results, strict=True))
        else:
            node = step.node
            run = compiled(node.op, node.attrs, len(node.inputs))
            values[id(node)] = run(device, *map(value, node.inputs))
    outputs = [value(n) for n in plan.graph.outputs]
    return outputs, {fqn: value(n) for fqn, n in plan.graph.mutations}, values


def run_group_with_aten(group: FusedGroup, args: Sequence[Any], device: torch.device,
                        dtype: torch.dtype | None = None) -> list[Any]:
    """A group's outputs computed node by node with ATen: the reference a kernel is checked against. With
    `dtype` (float64) every floating value is upcast first: the group's higher-precision oracle."""
    local: dict[int, Any] = {id(n): upcast(a, dtype) for n, a in zip(group.inputs, args, strict=True)}
    for node in group.nodes:
        operands = [i.attr("value") if i.op == "const" else local[id(i)] for i in node.inputs]
        local[id(node)] = run_node(node, operands, dtype, device)
    return [local[id(n)] for n in group.outputs]
