"""What a bench run has to do: one task per (problem, system), except that the `eager` and `compile`
systems of a problem share one reference task (one process times both)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from kernelwright.bench.suite import SuiteProblem
from kernelwright.bench.systems import System


@dataclass(frozen=True)
class BenchTask:
    problem_id: str
    problem_path: str
    level: str
    category: str
    kind: str                      # "reference", "kernelwright" or "candidates"
    systems: tuple[str, ...]       # the rows this task produces
    candidate: str | None = None   # the candidate file (candidates), or where optimize writes (kernelwright)
    compile_baseline: bool = True  # ask the judge to time torch.compile too (else the reference task does)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BenchTask:
        data = json.loads(text)
        data["systems"] = tuple(data["systems"])
        return cls(**data)


def plan_tasks(problems: list[SuiteProblem], systems: list[System], done: set[tuple[str, str]],
               output_dir: str) -> list[BenchTask]:
    """The tasks still to run, problem by problem (so a run cut short has every system on the same
    problems). `done` holds (problem, system) keys already in the results; kernelwright's files are
    written under `output_dir/<system>/`."""
    has_compile_system = any(s.name == "compile" for s in systems)
    tasks = []
    for problem in problems:
        common = dict(problem_id=problem.id, problem_path=str(problem.path), level=problem.level,
                      category=problem.category)
        reference = tuple(s.name for s in systems
                          if s.kind == "reference" and (problem.id, s.name) not in done)
        if reference:
            tasks.append(BenchTask(kind="reference", systems=reference, **common))
        for system in systems:
            if system.kind == "reference" or (problem.id, system.name) in done:
                continue
            if system.kind == "kernelwright":
                candidate = f"{output_dir}/{system.name}/{problem.id}.py"
            else:
                found = system.candidate_for(problem.id)
                candidate = str(found) if found else None
            # torch.compile is timed once per problem, by the reference task, when that system is run.
            tasks.append(BenchTask(kind=system.kind, systems=(system.name,), candidate=candidate,
                                   compile_baseline=not has_compile_system, **common))
    return tasks
