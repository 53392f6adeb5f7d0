"""Result rows: one flat JSON object per (problem, system), built from judge verdicts.

Fields: problem, level, category, system, status, detail, time_ms, iqr_ms, eager_ms, compile_ms,
speedup_vs_eager, speedup_vs_compile, build_seconds, optimize_seconds, flags, device,
gpu, seconds, finished, candidate, verdict (the judge's verdict without its environment block).

`status` is a judge status, or one of the bench's own: `missing` (a candidates folder has no file for
the problem), `optimize_error` (`kernelwright optimize` produced no file), `problem_error` (the problem
itself fails to load or run on this device), `bench_error` (the bench's task process failed: not the
candidate's fault, retried by --resume).
"""

from __future__ import annotations

import datetime
from typing import Any

from kernelwright.bench.plan import BenchTask, SystemRun

DETAIL_LIMIT = 600


def base_row(task: BenchTask, run: SystemRun) -> dict[str, Any]:
    return {
        "problem": task.problem_id, "level": task.level, "category": task.category, "system": run.system,
        "status": None, "detail": "", "time_ms": None, "iqr_ms": None, "eager_ms": None, "compile_ms": None,
        "speedup_vs_eager": None, "speedup_vs_compile": None, "build_seconds": None,
        "optimize_seconds": None, "flags": {}, "device": None, "gpu": None,
        "seconds": None, "finished": None, "candidate": run.candidate,
    }


def failure_row(task: BenchTask, run: SystemRun, status: str, detail: str) -> dict[str, Any]:
    row = base_row(task, run)
    row.update(status=status, detail=trim(detail))
    return row


def missing_row(task: BenchTask, run: SystemRun) -> dict[str, Any]:
    return failure_row(task, run, "missing", f"no {task.problem_id}.py/.md/.txt in the {run.system} folder")


def candidate_row(task: BenchTask, run: SystemRun, verdict: dict) -> dict[str, Any]:
    """The row of a judged candidate (a folder's file or kernelwright's output)."""
    row = base_row(task, run)
    candidate, eager, compiled = (_timing(verdict, key) for key in ("candidate", "eager", "compile"))
    row.update(
        status=verdict.get("status"), detail=trim(_text(verdict.get("detail"))),
        time_ms=candidate.get("median_ms"), iqr_ms=candidate.get("iqr_ms"),
        eager_ms=eager.get("median_ms"), compile_ms=compiled.get("median_ms"),
        speedup_vs_eager=verdict.get("speedup_vs_eager"),
        speedup_vs_compile=verdict.get("speedup_vs_compile"),
        build_seconds=verdict.get("build_seconds"), flags=dict(verdict.get("flags") or {}),
        verdict={k: v for k, v in verdict.items() if k != "env"},
    )
    return row


def reference_row(task: BenchTask, run: SystemRun, report: dict) -> dict[str, Any]:
    """The `eager` or `compile` row from the judge's reference report: the system's time is the
    reference timing, and its speedups are ratios of the two timings of that same measurement."""
    eager, compiled = _timing(report, "eager"), _timing(report, "compile")
    eager_ms, compile_ms = eager.get("median_ms"), compiled.get("median_ms")
    row = base_row(task, run)
    row.update(eager_ms=eager_ms, compile_ms=compile_ms,
               verdict={k: v for k, v in report.items() if k != "env"})
    own = (eager if run.system == "eager" else compiled).get("median_ms")
    if own is None:
        warnings = "; ".join(w.get("message", "") for w in report.get("warnings") or [])
        detail = warnings or f"no {run.system} timing in the reference run"
        row.update(status="runtime_error", detail=trim(detail))
    else:
        # The reference is correct by definition; torch.compile is trusted as a baseline, not judged.
        row.update(status="correct", time_ms=own,
                   iqr_ms=(eager if run.system == "eager" else compiled).get("iqr_ms"),
                   speedup_vs_eager=_ratio(eager_ms, own), speedup_vs_compile=_ratio(compile_ms, own))
    return row


def finish(row: dict, device: str | None, gpu: str | None, seconds: float) -> dict:
    """Stamp where and when a row was produced (`seconds`: the task's, unless the row has its own)."""
    own = row.get("seconds")
    row.update(device=device, gpu=gpu, seconds=round(seconds, 2) if own is None else own,
               finished=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    return row


def trim(text: str) -> str:
    text = text.strip()
    return text if len(text) <= DETAIL_LIMIT else text[:DETAIL_LIMIT] + " …"


def _timing(verdict: dict, key: str) -> dict:
    return (verdict.get("timings") or {}).get(key) or {}


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return numerator / denominator
