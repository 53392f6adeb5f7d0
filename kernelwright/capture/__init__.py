"""Capture: torch.export a problem's model on fake tensors and lower it to the kernelwright IR."""

from __future__ import annotations

from kernelwright.capture.export import export_problem
from kernelwright.capture.lower import lower_program
from kernelwright.ir.graph import Graph
from kernelwright.problem import Problem, load_shrunk


def capture(problem: Problem, shrink: bool = False) -> Graph:
    """The problem's `Model.forward` as an IR graph, in the model's own training/eval mode. With
    `shrink`, the problem's small CPU variant is captured instead. Raises `CaptureError` with the reason
    when the model cannot be exported (callers then keep the whole original forward)."""
    if shrink:
        problem = load_shrunk(problem.path)
    program, model, arguments = export_problem(problem)
    return lower_program(program, model, arguments, problem.id)


__all__ = ["capture"]
