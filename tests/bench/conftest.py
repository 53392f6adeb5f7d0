"""Fixtures of the bench tests: a tiny suite copied from the bundled one, a candidates folder, and a
fake executor that produces judge-shaped verdicts without running anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelwright.bench.devices import Worker
from kernelwright.bench.plan import BenchTask
from kernelwright.bench.rows import candidate_row, missing_row, reference_rows
from kernelwright.problem import resolve_problem_path

TINY_SUITE = ["level1/01_ReLU", "level1/06_Sigmoid", "level1/23_Softmax"]


@pytest.fixture
def tiny_suite(tmp_path: Path) -> Path:
    return make_tiny_suite(tmp_path / "suite")


@pytest.fixture
def answers(tmp_path: Path) -> Path:
    return make_answers(tmp_path / "answers")


def make_tiny_suite(root: Path) -> Path:
    for problem_id in TINY_SUITE:
        target = root / f"{problem_id}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(resolve_problem_path(problem_id), target)
    categories = {"level1/01_ReLU": "activation", "level1/06_Sigmoid": "activation",
                  "level1/23_Softmax": "softmax"}
    (root / "categories.json").write_text(json.dumps(categories))
    return root


def make_answers(root: Path) -> Path:
    """A candidates folder answering two of the three problems (one as a raw .md answer)."""
    (root / "level1").mkdir(parents=True)
    (root / "level1" / "01_ReLU.py").write_text("# candidate\n")
    (root / "level1" / "06_Sigmoid.md").write_text("```python\n# candidate\n```\n")
    return root


def fake_verdict(task: BenchTask, scale: float = 1.0) -> dict:
    """Deterministic timings per problem: eager 2 ms × (index + 1), compile 20% faster, the candidate
    `scale` times eager; Sigmoid's candidate is wrong."""
    eager = 2.0 * (TINY_SUITE.index(task.problem_id) + 1)
    timings = {"eager": {"median_ms": eager, "iqr_ms": 0.01, "n": 100},
               "compile": {"median_ms": eager * 0.8, "iqr_ms": 0.01, "n": 100}}
    if task.kind == "reference":
        return {"status": "correct", "detail": "", "timings": timings}
    if task.problem_id.endswith("Sigmoid"):
        return {"status": "mismatch", "detail": "max abs error 0.5 at (0, 1)", "timings": {}}
    candidate = eager * scale
    timings["candidate"] = {"median_ms": candidate, "iqr_ms": 0.02, "n": 100}
    return {"status": "correct", "detail": "", "timings": timings, "speedup_vs_eager": eager / candidate,
            "speedup_vs_compile": None, "build_seconds": 1.5, "flags": []}


class FakeExecutor:
    def __init__(self, scale: float = 0.5):
        self.scale = scale
        self.calls: list[tuple[BenchTask, Worker]] = []

    def __call__(self, task: BenchTask, worker: Worker) -> list[dict]:
        self.calls.append((task, worker))
        if task.kind == "reference":
            return reference_rows(task, fake_verdict(task))
        if task.candidate is None:
            return [missing_row(task, task.systems[0])]
        return [candidate_row(task, fake_verdict(task, self.scale))]
