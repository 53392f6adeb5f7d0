"""Scores of a bench run, computed from its rows: per device model (timings are only compared within
one GPU model), per system, overall / per level / per category.

- correct: rows with status `correct`;
- geomean speedup: geometric mean of the speedups of the correct rows that were timed;
- fast_p (as in KernelBench): the fraction of the group's problems that are correct AND have a speedup
  greater than p; fast_0 is the fraction correct. A problem a system has no row for counts as not correct.
- not_credited: correct rows counted as 1.00x eager because they run no custom kernel (rows.py).

Speedups are the credited ones (`speedup_vs_*`). The A/A check (`aa_check`) reads the `eager-copy`
system's measured ratios: 1.00 ± AA_TOLERANCE on every problem when the timing is fair.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from kernelwright.bench.systems import AA_COPY

FAST_P = (0.0, 1.0, 1.5, 2.0)
AA_TOLERANCE = 0.03


def with_derived_speedups(rows: list[dict]) -> list[dict]:
    """Rows whose candidate was judged without its own torch.compile timing get their speedup vs
    compile from the `compile` row of the same problem on the same device model (same run of the bench):
    through eager, the row's ratio to eager over the compile row's (both paired by timing rounds:
    judge/timing.py), else the ratio of the times; a row not credited gets eager's own, its measured one
    aside."""
    compiled = {(r["problem"], r["device"]): r for r in rows
                if r["system"] == "compile" and r["status"] == "correct" and r["time_ms"]}
    out = []
    for row in rows:
        reference = compiled.get((row["problem"], row["device"]))
        if row.get("speedup_vs_compile") is None and reference and row.get("time_ms"):
            over = reference.get("speedup_vs_eager")   # eager's time over compile's
            mine = row.get("measured_speedup_vs_eager")
            measured = mine / over if mine and over else reference["time_ms"] / row["time_ms"]
            credited = measured
            if row.get("credited") is False:
                if over:
                    credited = 1.0 / over
                else:
                    credited = reference["time_ms"] / row["eager_ms"] if row.get("eager_ms") else None
            row = {**row, "compile_ms": reference["time_ms"], "speedup_vs_compile": credited,
                   "measured_speedup_vs_compile": measured}
        out.append(row)
    return out


def geomean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def fast_p(rows: list[dict], problems: int, p: float, key: str = "speedup_vs_eager") -> float | None:
    if not problems:
        return None
    hits = sum(1 for r in rows if r["status"] == "correct" and (p == 0 or (r.get(key) or 0) > p))
    return hits / problems


def score(rows: list[dict], problems: int) -> dict:
    """The metrics of one system's rows over a group of `problems` problems."""
    correct = [r for r in rows if r["status"] == "correct"]
    # Without any torch.compile timing (the compile system was not run), "vs compile" is unknown, not 0.
    compile_known = any(r.get("speedup_vs_compile") for r in correct)
    return {
        "problems": problems,
        "run": len(rows),
        "correct": len(correct),
        "geomean_vs_eager": geomean(r.get("speedup_vs_eager") for r in correct),
        "geomean_vs_compile": geomean(r.get("speedup_vs_compile") for r in correct),
        "fast_p": {f"{p:g}": fast_p(rows, problems, p) for p in FAST_P},
        "fast_p_vs_compile": {f"{p:g}": fast_p(rows, problems, p, "speedup_vs_compile") if compile_known
                              else None for p in FAST_P},
        "not_credited": sum(r.get("credited") is False for r in correct),
    }


def ordered_systems(rows: list[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        seen.setdefault(row["system"], None)
    return list(seen)


def summarize(rows: list[dict]) -> list[dict]:
    """One entry per device model: {"device", "systems", "overall", "levels", "categories"}, where each
    of the last three maps group → system → score."""
    rows = with_derived_speedups(rows)
    devices = sorted({r["device"] or "unknown" for r in rows})
    summaries = []
    for device in devices:
        on_device = [r for r in rows if (r["device"] or "unknown") == device]
        systems = ordered_systems(on_device)
        summaries.append({
            "device": device,
            "systems": systems,
            "overall": _scores(on_device, systems, lambda r: "all"),
            "levels": _scores(on_device, systems, lambda r: f"level {r['level']}" if r["level"] else "-"),
            "categories": _scores(on_device, systems, lambda r: r["category"]),
        })
    return summaries


def aa_check(rows: list[dict]) -> list[dict]:
    """Per device model with `eager-copy` rows: each problem's measured ratio (eager time / the copy's
    time, from one judge), how many fall outside 1 ± AA_TOLERANCE, the worst, and the rows not timed."""
    checks = []
    copies = [r for r in rows if r["system"] == AA_COPY]
    for device in sorted({r["device"] or "unknown" for r in copies}):
        on_device = [r for r in copies if (r["device"] or "unknown") == device]
        # The copy is exempt from crediting: its speedup is the measured one.
        ratios = {r["problem"]: r["speedup_vs_eager"] for r in on_device
                  if r["status"] == "correct" and r["speedup_vs_eager"]}
        outside = sorted(p for p, ratio in ratios.items() if abs(ratio - 1) > AA_TOLERANCE)
        worst = max(ratios, key=lambda p: abs(math.log(ratios[p])), default=None)
        checks.append({
            "device": device, "tolerance": AA_TOLERANCE, "ratios": ratios, "outside": outside,
            "worst": {"problem": worst, "ratio": ratios[worst]} if worst else None,
            "not_timed": {r["problem"]: r["status"] for r in on_device if r["problem"] not in ratios},
        })
    return checks


def _scores(rows: list[dict], systems: list[str], group_of) -> dict[str, dict[str, dict]]:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(group_of(row), []).append(row)
    result = {}
    for group in sorted(groups, key=_natural):
        problems = len({r["problem"] for r in groups[group]})
        result[group] = {s: score([r for r in groups[group] if r["system"] == s], problems) for s in systems}
    return result


def _natural(text: str) -> tuple:
    head, _, tail = text.rpartition(" ")
    return (head, int(tail)) if tail.isdigit() else (text, 0)
