"""Every bundled problem (shrunk) captures, and the interpreter reproduces `Model` exactly: outputs and,
in training mode, the updated buffers, on several input seeds."""

from __future__ import annotations

import copy

import pytest
import torch

from kernelwright.capture.coverage import count_ops
from kernelwright.ir.interpret import interpret
from kernelwright.problem_files import bundled_problem_ids

PROBLEM_IDS = bundled_problem_ids()
SEEDS = (1, 2, 3)


def _as_list(value) -> list:
    return [value] if isinstance(value, torch.Tensor) else list(value)


def _run_reference(problem, seed: int, dtype: torch.dtype | None = None):
    """(untouched copy of the model, inputs, outputs, model after forward) for one seed."""
    model = problem.build_model(seed)
    inputs = problem.inputs(seed)
    pristine = copy.deepcopy(model)  # forward may update buffers (BatchNorm running stats)
    if dtype is not None:
        model = model.to(dtype)
        inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        outputs = _as_list(model(*inputs))
    return pristine, inputs, outputs, model


@pytest.mark.parametrize("problem_id", PROBLEM_IDS)
def test_capture_interprets_like_the_model(problem_id, captured):
    problem, graph = captured(problem_id)
    assert not dict(graph.meta).get("lowering_failures"), dict(graph.meta)
    for seed in SEEDS:
        pristine, inputs, expected, model = _run_reference(problem, seed)
        outputs, updated = interpret(graph, inputs, pristine)
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected, strict=True):
            torch.testing.assert_close(got, want)
        buffers = dict(model.named_buffers())
        assert set(updated) <= set(buffers)
        for fqn, value in updated.items():
            torch.testing.assert_close(value, buffers[fqn], msg=f"buffer {fqn} after forward")
    assert graph.training == problem.build_model().training


@pytest.mark.parametrize("problem_id", PROBLEM_IDS)
def test_float64_interpreter_matches_the_model_in_float64(problem_id, captured):
    problem, graph = captured(problem_id)
    pristine, _, expected, _ = _run_reference(problem, SEEDS[0], dtype=torch.float64)
    inputs = problem.inputs(SEEDS[0])  # float32 inputs: the interpreter upcasts them
    outputs, _ = interpret(graph, inputs, pristine, dtype=torch.float64)
    for got, want in zip(outputs, expected, strict=True):
        if want.is_floating_point():
            assert got.dtype == torch.float64
            torch.testing.assert_close(got, want.to(torch.float64), rtol=1e-6, atol=1e-7)
        else:
            torch.testing.assert_close(got, want)


def test_suite_is_mostly_native(captured):
    native = fallback = 0
    for problem_id in PROBLEM_IDS:
        graph_native, graph_fallback = count_ops(captured(problem_id)[1])
        native += sum(graph_native.values())
        fallback += sum(graph_fallback.values())
    assert native / (native + fallback) >= 0.95
