"""The delta between two bench runs (`kernelwright report NEW --compare OLD`): summary scores side by
side per device model and system, then the problems whose verdict changed or whose speedup moved by
more than a threshold. Timings are compared only between rows of the same device model."""

from __future__ import annotations

from kernelwright.bench.report import fmt_fraction, fmt_ms, fmt_speedup
from kernelwright.bench.summary import summarize, with_derived_speedups

MOVED_RATIO = 1.10   # a speedup change smaller than this (either way) is treated as timing noise


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
        if old["status"] != row["status"] or (ratio and not 1 / MOVED_RATIO < ratio < MOVED_RATIO):
            changes.append((row, old, ratio))
    if not changes:
        return [f"No verdict changed and no speedup moved by more than {MOVED_RATIO - 1:.0%}.", ""]
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
