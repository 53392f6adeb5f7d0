"""Fixtures of the judge tests: the hostile corpus, fast CPU options, one Judge per corpus problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwright.judge import Judge, JudgeOptions

CORPUS = Path(__file__).resolve().parent.parent / "judge_corpus"
CANDIDATES = CORPUS / "candidates"
PROBLEMS = CORPUS / "problems"

# The CPU has nothing to flush or warm up: a few timed runs exercise the timing path.
CPU_OPTIONS = JudgeOptions(device="cpu", min_runs=3, min_time_s=0.0, compile_baseline=False,
                           build_timeout_s=60.0, run_timeout_s=60.0)


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
