"""What a bench run has to do: one task per problem, holding the systems still to run on it. The task's
process keeps one judge (one reference process) for the problem, so eager and torch.compile are loaded
and timed once and every system's speedups come from the same reference measurement; each candidate
still runs in its own judge subprocess."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

from kernelwright.bench.suite import SuiteProblem
from kernelwright.bench.systems import System


@dataclass(frozen=True)
class SystemRun:
    system: str
    kind: str                      # "reference", "kernelwright", "copy" or "candidates" (systems.py)
    candidate: str | None = None   # the candidate file, or where it is written (kernelwright, copy)


@dataclass(frozen=True)
class BenchTask:
    problem_id: str
    problem_path: str
    level: str
    category: str
    runs: tuple[SystemRun, ...]
    compile_baseline: bool = True  # time torch.compile: the `compile` system is run and not done yet

    @property
    def systems(self) -> tuple[str, ...]:
        return tuple(run.system for run in self.runs)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BenchTask:
        data = json.loads(text)
        data["runs"] = tuple(SystemRun(**run) for run in data["runs"])
        return cls(**data)


def plan_tasks(problems: list[SuiteProblem], systems: list[System], done: set[tuple[str, str]],
               output_dir: str) -> list[BenchTask]:
    """The tasks still to run, in suite order (`longest_first` reorders them), one per problem (so a run
    cut short has every system on the same problems). `done` holds (problem, system) keys already in the
    results; kernelwright's files are written under `output_dir/<system>/`, and so are the A/A copies."""
    # torch.compile is timed only for the `compile` system (its cost is the user's choice); candidates'
    # speedups vs compile come from that same timing, or from the compile row of an earlier, resumed run.
    has_compile = any(system.name == "compile" for system in systems)
    tasks = []
    for problem in problems:
        runs = []
        for system in systems:
            if (problem.id, system.name) in done:
                continue
            if system.kind in ("kernelwright", "copy"):
                candidate = f"{output_dir}/{system.name}/{problem.id}.py"
            elif system.kind == "candidates":
                found = system.candidate_for(problem.id)
                candidate = str(found) if found else None
            else:
                candidate = None
            runs.append(SystemRun(system.name, system.kind, candidate))
        if runs:
            compile_baseline = has_compile and (problem.id, "compile") not in done
            tasks.append(BenchTask(problem.id, str(problem.path), problem.level, problem.category,
                                   tuple(runs), compile_baseline=compile_baseline))
    return tasks


def longest_first(tasks: list[BenchTask], seconds: Callable[[BenchTask], float | None]) -> list[BenchTask]:
    """`tasks` in the order a bench starts them: the longest first, so that no long task starts last and
    holds the run's end while the other slots idle (the bundled suite's tasks, 8 at a time on one GPU: the
    suite order's last task ended ~9% after the longest-first order's in a replay of their measured
    seconds, 2026-11-28). A task's length is `seconds(task)`, its systems' measured seconds from an
    earlier run (memory.PeakCache, else the bundled suite's committed run: bench/prior.py); tasks never
    measured come first (they may be the longest), higher levels before lower ones (networks before single
    operators). Ties keep suite order."""
    def key(item: tuple[int, BenchTask]) -> tuple:
        index, task = item
        known = seconds(task)
        if known is None:
            return (0, -_level_rank(task.level), index)
        return (1, -known, index)

    return [task for _, task in sorted(enumerate(tasks), key=key)]


def _level_rank(level: str) -> int:
    """A level's number ("3", "level3"), 0 when it has none."""
    digits = "".join(ch for ch in level if ch.isdigit())
    return int(digits) if digits else 0
