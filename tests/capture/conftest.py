"""Captures are slow-ish (torch.export), so each problem is captured once per test session."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelwright.capture import capture
from kernelwright.ir.graph import Graph
from kernelwright.problem import Problem, load_shrunk


@pytest.fixture(scope="session")
def captured() -> Callable[[str], tuple[Problem, Graph]]:
    """`captured(problem_id)` → (the shrunk problem, its graph), memoized for the session."""
    cache: dict[str, tuple[Problem, Graph]] = {}

    def get(problem_id: str) -> tuple[Problem, Graph]:
        if problem_id not in cache:
            problem = load_shrunk(problem_id)
            cache[problem_id] = (problem, capture(problem))
        return cache[problem_id]

    return get
