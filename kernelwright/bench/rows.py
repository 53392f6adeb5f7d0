"""Result rows: one flat JSON object per (problem, system), built from judge verdicts.

Fields: problem, level, category, system, status, detail, time_ms, iqr_ms, eager_ms, compile_ms,
speedup_vs_eager, speedup_spread (half the IQR of the judge's timing rounds' ratios over their median:
the "±" of speedup_vs_eager), speedup_vs_compile, measured_speedup_vs_eager, measured_speedup_vs_compile,
credited,
gpu_busy_share and eager_gpu_busy_share (the share of a forward's wall time the GPU was busy, the
system's own and eager's, where the judge measured them: judge/busy.py), memory, build_seconds,
optimize_seconds, optimize_profile (where optimize's time went: stages, build steps, judge phases),
judge_profile (where the judge's time went: the verdict's profile, lock waits included), flags,
device, gpu, seconds, finished, candidate, verdict (the judge's verdict without its environment block).

`status` is a judge status, or one of the bench's own: `missing` (a candidates folder has no file for
the problem), `optimize_error` (`kernelwright optimize` produced no file), `problem_error` (the problem
itself fails to load, or its reference fails: for lack of memory only when it ran alone on its GPU),
`host_oom` (the task process was killed by the kernel's out-of-memory killer: host memory ran out;
rerun alone, then redone by --resume), `bench_error` (the bench's task process failed otherwise, e.g.
killed by a signal from outside kernelwright: not the candidate's fault, redone by --resume).

Out of memory: `oom` is the judge's status for a candidate that ran out of memory; the bench also gives it
to a kernelwright optimize, a task process, or the reference (`flags.reference_failed`) that ran out of
GPU memory. A task that ran out of memory, or whose reference failed, while sharing its GPU with other
tasks is not recorded: it is rerun alone (pool.py), and only then is the failure its own; a reference out
of memory alone on its GPU becomes `problem_error` (the problem does not fit this device).

Crediting: a candidate whose verdict says `flags.no_custom_kernel` (it runs only PyTorch ops, e.g. a
compiler's fallback to the original Model) is credited 1.00x eager and torch.compile's own ratio vs
eager (`credited: false`), whatever its timing measured: a speedup there is timing noise or a different
measurement, not the candidate's work. The judge's ratios are kept in `measured_speedup_vs_eager` /
`measured_speedup_vs_compile` on every row. The A/A system (`eager-copy`, the reference judged as a
candidate) is exempt: its measured ratio is the point.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from kernelwright.bench.plan import BenchTask, SystemRun

DETAIL_LIMIT = 600
# CUDA's and torch's words for it; cuBLAS and cuDNN say ALLOC_FAILED when they cannot get a workspace.
OUT_OF_MEMORY = re.compile(r"out[ -]of[ -]memory|memoryerror|can't allocate memory|alloc_failed",
                           re.IGNORECASE)


def base_row(task: BenchTask, run: SystemRun) -> dict[str, Any]:
    return {
        "problem": task.problem_id, "level": task.level, "category": task.category, "system": run.system,
        "status": None, "detail": "", "time_ms": None, "iqr_ms": None, "eager_ms": None, "compile_ms": None,
        "speedup_vs_eager": None, "speedup_spread": None, "speedup_vs_compile": None,
        "measured_speedup_vs_eager": None, "measured_speedup_vs_compile": None, "credited": True,
        "gpu_busy_share": None,
        "eager_gpu_busy_share": None, "memory": None, "build_seconds": None,
        "optimize_seconds": None, "optimize_profile": None, "judge_profile": None, "flags": {},
        "device": None, "gpu": None, "seconds": None, "finished": None, "candidate": run.candidate,
    }


def failure_row(task: BenchTask, run: SystemRun, status: str, detail: str) -> dict[str, Any]:
    row = base_row(task, run)
    row.update(status=status, detail=trim(detail))
    return row


def missing_row(task: BenchTask, run: SystemRun) -> dict[str, Any]:
    return failure_row(task, run, "missing", f"no {task.problem_id}.py/.md/.txt in the {run.system} folder")


def reference_failure_row(task: BenchTask, run: SystemRun, detail: str) -> dict[str, Any]:
    """The problem failed to load or its reference failed: `oom` when for lack of memory (settled by
    `settle` once it is known whether the task ran alone), else `problem_error`."""
    row = failure_row(task, run, "oom" if OUT_OF_MEMORY.search(detail) else "problem_error", detail)
    row["flags"] = {"reference_failed": True}
    return row


def candidate_row(task: BenchTask, run: SystemRun, verdict: dict) -> dict[str, Any]:
    """The row of a judged candidate (a folder's file, kernelwright's output or the A/A copy), credited."""
    row = base_row(task, run)
    candidate, eager, compiled = (_timing(verdict, key) for key in ("candidate", "eager", "compile"))
    row.update(
        status=verdict.get("status"), detail=trim(_text(verdict.get("detail"))),
        time_ms=candidate.get("median_ms"), iqr_ms=candidate.get("iqr_ms"),
        eager_ms=eager.get("median_ms"), compile_ms=compiled.get("median_ms"),
        speedup_vs_eager=verdict.get("speedup_vs_eager"),
        speedup_spread=verdict.get("speedup_vs_eager_spread"),
        speedup_vs_compile=verdict.get("speedup_vs_compile"),
        measured_speedup_vs_eager=verdict.get("speedup_vs_eager"),
        measured_speedup_vs_compile=verdict.get("speedup_vs_compile"),
        gpu_busy_share=_busy(verdict, "candidate"), eager_gpu_busy_share=_busy(verdict, "eager"),
        memory=verdict.get("memory"),
        build_seconds=verdict.get("build_seconds"), flags=dict(verdict.get("flags") or {}),
        judge_profile=verdict.get("profile"), verdict={k: v for k, v in verdict.items() if k != "env"},
    )
    reduce_overhead = (verdict.get("options") or {}).get("reduce_overhead")
    if reduce_overhead:  # `--reduce-overhead`: torch.compile with CUDA graphs, timed beside the default mode
        row.update(compile_reduce_overhead_ms=_timing(verdict, "compile_reduce_overhead").get("median_ms"),
                   speedup_vs_compile_reduce_overhead=verdict.get("speedup_vs_compile_reduce_overhead"))
    if row["flags"].get("no_custom_kernel") and run.kind != "copy":
        # credited as eager itself: eager's ratio to each compile mode, the verdict's two ratios divided
        # (both paired by timing rounds: judge/timing.py), else the ratio of the medians
        eager_ratio = row["speedup_vs_eager"]
        row.update(credited=False, speedup_vs_eager=1.0 if eager_ratio is not None else None,
                   speedup_spread=None,   # 1.00x is not a measurement
                   speedup_vs_compile=_as_eager(row, "speedup_vs_compile", eager_ratio, "compile_ms"))
        if reduce_overhead:
            row["speedup_vs_compile_reduce_overhead"] = _as_eager(
                row, "speedup_vs_compile_reduce_overhead", eager_ratio, "compile_reduce_overhead_ms")
    return row


def _as_eager(row: dict, key: str, eager_ratio: float | None, compile_key: str) -> float | None:
    """Eager's speedup over a compile mode, from a row whose candidate is not credited: its `key` ratio over
    its ratio to eager, or the mode's median over eager's."""
    return _ratio(row[key], eager_ratio) or _ratio(row[compile_key], row["eager_ms"])


def reference_row(task: BenchTask, run: SystemRun, report: dict) -> dict[str, Any]:
    """The `eager` or `compile` row from the judge's reference report: the system's time is the
    reference timing, and its speedups are ratios of the two timings of that same measurement."""
    eager, compiled = _timing(report, "eager"), _timing(report, "compile")
    eager_ms, compile_ms = eager.get("median_ms"), compiled.get("median_ms")
    row = base_row(task, run)
    row.update(eager_ms=eager_ms, compile_ms=compile_ms, memory=report.get("memory"),
               eager_gpu_busy_share=_busy(report, "eager"),
               gpu_busy_share=_busy(report, "eager") if run.system == "eager" else None,
               verdict={k: v for k, v in report.items() if k != "env"})
    own = (eager if run.system == "eager" else compiled).get("median_ms")
    if own is None:
        warnings = "; ".join(w.get("message", "") for w in report.get("warnings") or [])
        detail = warnings or f"no {run.system} timing in the reference run"
        row.update(status="runtime_error", detail=trim(detail))
    else:
        # The reference is correct by definition; torch.compile is trusted as a baseline, not judged.
        # eager's time over compile's paired by timing rounds where the report has it (judge/timing.py),
        # else the ratio of the two medians
        over = report.get("eager_over_compile") or _ratio(eager_ms, compile_ms)
        if run.system == "eager":
            row.update(iqr_ms=eager.get("iqr_ms"), speedup_vs_eager=1.0, speedup_vs_compile=_ratio(1.0, over))
        else:
            row.update(iqr_ms=compiled.get("iqr_ms"), speedup_vs_eager=over, speedup_vs_compile=1.0)
        row.update(status="correct", time_ms=own)
        row.update(measured_speedup_vs_eager=row["speedup_vs_eager"],
                   measured_speedup_vs_compile=row["speedup_vs_compile"])
    return row


def out_of_memory(row: dict) -> bool:
    """The row failed for lack of GPU or host memory (whoever ran out)."""
    return row.get("status") in ("oom", "host_oom") or (
        row.get("status") != "correct" and bool(OUT_OF_MEMORY.search(str(row.get("detail") or ""))))


def settle(row: dict, alone: bool) -> dict:
    """A row's final status once it is known whether its task ran `alone` on its GPU (DESIGN.md §7: an
    environment failure is never blamed on the problem): the reference out of memory alone → the problem
    does not fit this device; the task process or optimize out of memory → `oom`."""
    if not out_of_memory(row) or row["status"] == "host_oom":
        return row
    if (row.get("flags") or {}).get("reference_failed"):
        if alone and row["status"] == "oom":
            cause = "the reference ran out of memory alone on its GPU (the problem does not fit)"
            row.update(status="problem_error", detail=trim(f"{cause}: {row['detail']}"))
    elif row["status"] in ("bench_error", "optimize_error"):
        row["status"] = "oom"
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


def _busy(verdict: dict, side: str) -> float | None:
    return (verdict.get("launch_bound") or {}).get(f"{side}_gpu_busy_share")


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return numerator / denominator
