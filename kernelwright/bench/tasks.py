"""Runs one bench task: inside its own process (`python -m kernelwright.bench.tasks SPEC OUT`), so that
whatever a candidate or the judge does to that process, the bench itself goes on.

The judge and the compiler are reached only through their entry points: `kernelwright.judge.evaluate` /
`evaluate_reference`, and the `kernelwright optimize` command line.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kernelwright.bench.plan import BenchTask
from kernelwright.bench.rows import candidate_row, failure_row, missing_row, reference_rows, trim
from kernelwright.judge.options import JudgeOptions

Evaluate = Callable[..., dict]


def run_task(task: BenchTask, options: JudgeOptions, evaluate: Evaluate | None = None,
             evaluate_reference: Evaluate | None = None) -> list[dict]:
    """The rows of one task. `evaluate`/`evaluate_reference` default to the judge's (tests inject fakes)."""
    if evaluate is None or evaluate_reference is None:
        from kernelwright import judge

        evaluate = evaluate or judge.evaluate
        evaluate_reference = evaluate_reference or judge.evaluate_reference
    if task.kind == "reference":
        return reference_rows(task, evaluate_reference(task.problem_path, options))
    system = task.systems[0]
    optimize_seconds = None
    if task.kind == "kernelwright":
        started = time.monotonic()
        error = optimize(task, options)
        optimize_seconds = round(time.monotonic() - started, 2)
        if error:
            row = failure_row(task, system, "optimize_error", error)
            row["optimize_seconds"] = optimize_seconds
            return [row]
    if task.candidate is None:
        return [missing_row(task, system)]
    compile_baseline = task.compile_baseline and options.compile_baseline
    options = dataclasses.replace(options, compile_baseline=compile_baseline)
    row = candidate_row(task, evaluate(task.problem_path, task.candidate, options))
    row["optimize_seconds"] = optimize_seconds
    return [row]


def optimize(task: BenchTask, options: JudgeOptions) -> str | None:
    """Run `kernelwright optimize` for the task's problem; None when it wrote the candidate file, else
    what went wrong. The caller's wall-clock limit (the bench kills the whole task) bounds it."""
    output = Path(task.candidate)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)
    command = [sys.executable, "-m", "kernelwright.cli", "optimize", task.problem_path, "-o", str(output)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not output.is_file():
        tail = (result.stderr or result.stdout).strip()
        return f"`kernelwright optimize` exited with {result.returncode}: {trim(tail[-2000:])}"
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m kernelwright.bench.tasks SPEC.json ROWS.json`: SPEC holds {"task", "options"}."""
    spec_path, rows_path = argv if argv is not None else sys.argv[1:]
    spec = json.loads(Path(spec_path).read_text())
    task = BenchTask.from_json(json.dumps(spec["task"]))
    rows = run_task(task, JudgeOptions(**spec["options"]))
    Path(rows_path).write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
