"""Fixtures of the judge tests: the hostile corpus, fast CPU options, one Judge per corpus problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus import CPU_OPTIONS, PROBLEMS

from kernelwright.judge import Judge, JudgeOptions


@pytest.fixture(scope="session")
def cpu_judges():
    """Judge per (problem, options), created on first use and shared by the whole session: the reference
    process starts once per problem."""
    judges: dict[tuple, Judge] = {}

    def get(problem: str, options: JudgeOptions = CPU_OPTIONS) -> Judge:
        key = (problem, options)
        if key not in judges:
            judges[key] = Judge(PROBLEMS / f"{problem}.py", options)
        return judges[key]

    yield get
    for judge in judges.values():
        judge.close()


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory) -> Path:
    """One extension build directory for the session (compiled objects are reused between tests)."""
    return tmp_path_factory.mktemp("judge-builds")
