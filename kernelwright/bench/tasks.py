"""Runs one bench task (a problem and the systems still to run on it) inside its own process:
`python -m kernelwright.bench.tasks SPEC.json ROWS.jsonl`. Whatever happens to that process, the bench
goes on; rows are written as each system finishes, so a crash loses only the systems not yet done.

The judge and the compiler are reached only through their entry points: `kernelwright.judge.Judge`
(one per problem: the reference is loaded and timed once, each candidate runs in its own judge
subprocess) and the `kernelwright optimize` command line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.rows import (
    candidate_row,
    failure_row,
    missing_row,
    reference_failure_row,
    reference_row,
    trim,
)
from kernelwright.bench.store import ENVIRONMENT_DETAIL
from kernelwright.bench.systems import copy_candidate
from kernelwright.errors import KernelwrightError
from kernelwright.gpulock import keep_off_timing_cpus
from kernelwright.judge.options import JudgeOptions

# `Judge(problem_path, options)`: a context manager with `reference_report()` and `evaluate(candidate)`.
JudgeFactory = Callable[[str, JudgeOptions], Any]


def run_task(task: BenchTask, options: JudgeOptions, judge_factory: JudgeFactory | None = None,
             emit: Callable[[dict], None] | None = None) -> list[dict]:
    """The rows of one task, each passed to `emit` as soon as it exists. `judge_factory` defaults to
    the judge's `Judge` (tests inject fakes)."""
    if judge_factory is None:
        from kernelwright.gpulock import cpu_work

        with cpu_work():   # the judge's import brings torch's: seconds of CPU work, kept out of timings
            from kernelwright.judge import Judge as judge_factory
    compile_baseline = options.compile_baseline and task.compile_baseline
    options = dataclasses.replace(options, compile_baseline=compile_baseline)
    rows: list[dict] = []

    def add(row: dict, started: float) -> None:
        row["seconds"] = round(time.monotonic() - started + (row.get("optimize_seconds") or 0), 2)
        rows.append(row)
        if emit:
            emit(row)

    # `kernelwright optimize` runs before the judge starts its reference worker, whose model, inputs and
    # cached allocator blocks would otherwise hold GPU memory the compiler needs (a 4.5 GiB problem's
    # optimize ran out of memory beside its own bench's reference, alone on the GPU).
    optimized = {run.system: _optimize_run(task, run, options.build_timeout_s)
                 for run in task.runs if run.kind == "kernelwright"}
    started = time.monotonic()
    try:
        judge = judge_factory(task.problem_path, options)
    except KernelwrightError as exc:  # the problem itself does not load: every system fails alike
        for run in task.runs:
            add(reference_failure_row(task, run, str(exc)), started)
        return rows
    with judge:
        reference: dict | None = None
        for run in task.runs:
            started = time.monotonic()
            try:
                if run.kind == "reference":
                    reference = reference or judge.reference_report()
                    row = reference_row(task, run, reference)
                else:
                    row = _judge_candidate(judge, task, run, optimized.get(run.system))
            except KernelwrightError as exc:  # the reference Model failed (out of memory: `oom`)
                row = reference_failure_row(task, run, str(exc))
            add(row, started)
    return rows


def _optimize_run(task: BenchTask, run: SystemRun, timeout_s: float) -> dict:
    """`kernelwright optimize` for a kernelwright run: its failure row (None when it wrote the candidate),
    wall time and profile."""
    started = time.monotonic()
    error, status, profile = optimize(task.problem_path, Path(run.candidate), timeout_s)
    seconds = round(time.monotonic() - started, 2)
    failure = failure_row(task, run, status, error) if error else None
    return {"failure": failure, "optimize_seconds": seconds, "optimize_profile": profile}


def _judge_candidate(judge, task: BenchTask, run: SystemRun, optimized: dict | None) -> dict:
    extra = {"optimize_seconds": None, "optimize_profile": None}
    if optimized is not None:
        extra = {k: optimized[k] for k in extra}
        if optimized["failure"] is not None:
            return {**optimized["failure"], **extra}
    if run.kind == "copy":
        Path(run.candidate).parent.mkdir(parents=True, exist_ok=True)
        Path(run.candidate).write_text(copy_candidate(Path(task.problem_path).read_text()))
    if run.candidate is None:
        return missing_row(task, run)
    row = candidate_row(task, run, judge.evaluate(run.candidate))
    row.update(extra)
    return row


# `kernelwright optimize`'s exit code for an environment failure (EnvironmentFailure.exit_code).
ENVIRONMENT_EXIT = 4


def optimize(problem_path: str, output: Path, timeout_s: float) -> tuple[str | None, str, dict | None]:
    """Run `kernelwright optimize` fresh (its time is what the row reports; its builds and checks bounded
    like a candidate's build): (None when it wrote `output`, else what went wrong; the row status for a
    failure: `optimize_error`, or `oom` / `bench_error` for an environment failure, which is retried;
    where its time went, from `--profile`)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)
    profile_path = output.with_suffix(".profile.json")
    profile_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "kernelwright.cli", "optimize", problem_path, "-o", str(output),
               "--fresh", "--profile", str(profile_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace", start_new_session=True)
    try:
        log, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"`kernelwright optimize` ran past {timeout_s:.0f} s and was killed", "optimize_error", None
    profile = json.loads(profile_path.read_text()) if profile_path.is_file() else None
    profile_path.unlink(missing_ok=True)
    if process.returncode != 0 or not output.is_file():
        error = f"`kernelwright optimize` exited with {process.returncode}: {what_optimize_said(log)}"
        if process.returncode == ENVIRONMENT_EXIT:
            status = "oom" if "out of" in log and "memory" in log else "bench_error"
            return f"{ENVIRONMENT_DETAIL}: {error}", status, profile
        return error, "optimize_error", profile
    return None, "", profile


def what_optimize_said(log: str) -> str:
    """The error `kernelwright optimize` printed (after its last "error:", rewrapped; its start holds an
    OOM's cause, "Tried to allocate ..."), else the end of its log."""
    at = log.rfind("error:")
    return trim(" ".join(log[at + len("error:"):].split()) if at >= 0 else log.strip()[-2000:])


def main(argv: list[str] | None = None) -> int:
    """SPEC.json holds {"task", "options"}; rows are appended to ROWS.jsonl."""
    spec_path, rows_path = argv if argv is not None else sys.argv[1:]
    keep_off_timing_cpus()
    spec = json.loads(Path(spec_path).read_text())
    task = BenchTask.from_json(json.dumps(spec["task"]))
    with open(rows_path, "a") as out:
        def emit(row: dict) -> None:
            out.write(json.dumps(row) + "\n")
            out.flush()

        run_task(task, JudgeOptions(**spec["options"]), emit=emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
