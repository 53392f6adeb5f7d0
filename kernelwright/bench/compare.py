"""The delta between two bench runs (`kernelwright report NEW --compare OLD`): summary scores side by
side per device model and system, then the problems whose verdict changed or whose speedup moved by more
than its noise. Timings are compared only between rows of the same device model.

A row's noise is its speedup's spread over the judge's timing rounds (`speedup_spread`, half the rounds'
interquartile range over their median): a move counts when it exceeds twice the two rows' spreads added,
and at least MOVED_FLOOR, the few percent an identical copy of eager reads off 1.00x in another process
(bench/results/2026-11-27-h100-80gb-hbm3-aa). Rows without a spread (reference rows, older results) keep
the fixed MOVED_RATIO: a GPU-bound kernel's 5% gain was hidden by a threshold sized for launch-bound rows'
±10%."""

from __future__ import annotations

from kernelwright.bench.report import fmt_fraction, fmt_ms, fmt_speedup
from kernelwright.bench.summary import summarize, with_derived_speedups

MOVED_RATIO = 1.10   # without spreads: a speedup change smaller than this (either way) is timing noise
MOVED_FLOOR = 0.05   # with spreads: the least relative change that counts


def render_comparison(new_rows: list[dict], old_rows: list[dict], new_name: str, old_name: str) -> str:
    new_rows, old_rows = with_derived_speedups(new_rows), with_derived_speedups(old_rows)
    lines = [f"# {new_name} vs {old_name}", ""]
    old_summary = {s["device"]: s for s in summarize(old_rows)}
    for new in summarize(new_rows):
        old = old_summary.get(new["device"])
        lines += [f"## {new['device']}", ""]
        if old is None:
            lines += [f"{old_name} has no rows on this device model: only verdicts are compared below.", ""]
            continue
        head = ["system", "correct", "geomean ×eager", "geomean ×compile", "fast_1", "fast_1 vs compile"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for system in new["systems"]:
            a = new["overall"]["all"][system]
            b = old["overall"]["all"].get(system)
            if b is None:
                continue
            lines.append("| " + " | ".join([
                system, f"{b['correct']} → {a['correct']}",
                _pair(b["geomean_vs_eager"], a["geomean_vs_eager"], fmt_speedup),
                _pair(b["geomean_vs_compile"], a["geomean_vs_compile"], fmt_speedup),
                _pair(b["fast_p"]["1"], a["fast_p"]["1"], fmt_fraction),
                _pair(b["fast_p_vs_compile"]["1"], a["fast_p_vs_compile"]["1"], fmt_fraction),
            ]) + " |")
        lines.append("")
    lines += _changes(new_rows, old_rows)
    return "\n".join(lines) + "\n"


def noise(row: dict, old: dict) -> float:
    """The relative speedup change below which `row` against `old` is timing noise (module docstring)."""
    spreads = [r.get("speedup_spread") for r in (row, old)]
    if any(s is None for s in spreads):
        return MOVED_RATIO - 1
    return max(MOVED_FLOOR, 2 * sum(spreads))


def _pair(old, new, fmt) -> str:
    return f"{fmt(old)} → {fmt(new)}"


def _changes(new_rows: list[dict], old_rows: list[dict]) -> list[str]:
    old_by_key = {(r["problem"], r["system"]): r for r in old_rows}
    changes = []
    for row in new_rows:
        old = old_by_key.get((row["problem"], row["system"]))
        if old is None:
            continue
        same_device = old["device"] == row["device"]
        ratio = None
        if same_device and row.get("speedup_vs_eager") and old.get("speedup_vs_eager"):
            ratio = row["speedup_vs_eager"] / old["speedup_vs_eager"]
        bound = 1 + noise(row, old)
        if old["status"] != row["status"] or (ratio and not 1 / bound < ratio < bound):
            changes.append((row, old, ratio))
    if not changes:
        floor, fixed = f"{MOVED_FLOOR:.0%}", f"{MOVED_RATIO - 1:.0%}"
        return ["No verdict changed and no speedup moved beyond its noise (twice the rows' spreads over "
                f"their timing rounds, at least {floor}; {fixed} for rows without one).", ""]
    head = ["problem", "system", "verdict", "time ms", "×eager", "change"]
    lines = [f"## Changed problems ({len(changes)})", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for row, old, ratio in sorted(changes, key=lambda c: (c[0]["problem"], c[0]["system"])):
        verdict = row["status"] if old["status"] == row["status"] else f"{old['status']} → {row['status']}"
        lines.append("| " + " | ".join([
            row["problem"], row["system"], verdict, _pair(old["time_ms"], row["time_ms"], fmt_ms),
            _pair(old["speedup_vs_eager"], row["speedup_vs_eager"], fmt_speedup),
            f"{ratio:.2f}×" if ratio else ("other device" if old["device"] != row["device"] else "-"),
        ]) + " |")
    return lines + [""]
