"""Fixtures of the bench tests: a tiny suite copied from the bundled one, a candidates folder, and a
fake judge that returns verdicts shaped like the real one's without running anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelwright.bench.devices import Worker
from kernelwright.bench.plan import BenchTask
from kernelwright.bench.tasks import run_task
from kernelwright.judge.options import JudgeOptions
from kernelwright.problem import problem_id_for, resolve_problem_path

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


class FakeJudge:
    """Deterministic timings per problem: eager 2 ms × (index + 1), torch.compile 20% faster, a candidate
    `scale` times eager; every Sigmoid candidate is wrong. `memory` is the judge's peaks block."""

    scale = 0.5
    memory: dict | None = None

    def __init__(self, problem_path: str, options: JudgeOptions):
        self.problem_id = problem_id_for(Path(problem_path))
        self.eager = 2.0 * (TINY_SUITE.index(self.problem_id) + 1)
        self.compile_baseline = options.compile_baseline

    def __enter__(self) -> FakeJudge:
        return self

    def __exit__(self, *exc_info) -> None:
        pass

    def _timings(self) -> dict:
        eager = {"median_ms": self.eager, "iqr_ms": 0.01, "n": 100}
        compiled = {"median_ms": self.eager * 0.8, "iqr_ms": 0.01, "n": 100}
        compiled = compiled if self.compile_baseline else None
        return {"candidate": None, "eager": eager, "compile": compiled}

    def reference_report(self) -> dict:
        return {"status": "reference", "detail": "", "timings": self._timings(), "warnings": [],
                "memory": self.memory}

    def evaluate(self, candidate: str) -> dict:
        timings = self._timings()
        if self.problem_id.endswith("Sigmoid"):
            return {"status": "mismatch", "detail": "max abs error 0.5 at (0, 1)", "timings": timings,
                    "flags": {"precision": "fp32"}}
        time_ms = self.eager * self.scale
        timings["candidate"] = {"median_ms": time_ms, "iqr_ms": 0.02, "n": 100}
        compiled = timings["compile"]
        return {"status": "correct", "detail": "", "timings": timings, "memory": self.memory,
                "speedup_vs_eager": self.eager / time_ms,
                "speedup_vs_compile": compiled["median_ms"] / time_ms if compiled else None,
                "build_seconds": 1.5, "flags": {"no_custom_kernel": False, "precision": "fp32"}}


class FakeExecutor:
    """Runs tasks in this process (no subprocess) with `judge` (FakeJudge by default), recording what it
    was asked."""

    def __init__(self, scale: float = 0.5, judge: type[FakeJudge] = FakeJudge):
        self.scale, self.judge = scale, judge
        self.calls: list[tuple[BenchTask, Worker]] = []

    def __call__(self, task: BenchTask, worker: Worker) -> list[dict]:
        self.calls.append((task, worker))
        judge = type("ScaledJudge", (self.judge,), {"scale": self.scale})
        return run_task(task, JudgeOptions(device="cpu"), judge_factory=judge)
