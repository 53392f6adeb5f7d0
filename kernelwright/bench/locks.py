"""Where a bench run's wall time went, from the lock log its processes write (`locks.jsonl` in the results
folder: gpulock.py `KERNELWRIGHT_LOCK_LOG`, one line per hold of a lock, with when it was asked for, got
and released). A timing excludes all other work on its GPU and the CPU work on its CPU (builds, captures,
torch's import in every new process: everywhere on the host, unless timings have CPUs of their own;
kernelwright/gpulock.py), so a busy bench is a chain of timings and the work between them; the summary
says how long each class of lock was held (the union of its holds), how long processes waited for each,
and how much of the run no lock was held at all.

    python -m kernelwright.bench.locks RESULTS_DIR_OR_LOG      # the summary as text
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

LOCKS_FILE = "locks.jsonl"
LOCKS = ("machine_timing", "machine_pinned", "machine_work", "machine_offwork", "gpu_exclusive", "gpu_shared")
# Stretches of a log with nothing asked for or held this long between them are separate runs (a resumed
# bench appends to the same file, maybe from another machine): the span counts each run alone.
RUN_GAP_S = 60.0


def read_holds(path: Path) -> list[dict]:
    """The log's holds (lines that do not parse, e.g. a line cut by a crash, are skipped)."""
    holds = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            hold = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(hold, dict) and all(isinstance(hold.get(k), (int, float))
                                          for k in ("asked", "got", "released")) and "lock" in hold:
            holds.append(hold)
    return holds


def merged(intervals: list[tuple[float, float]], gap: float = 0.0) -> list[tuple[float, float]]:
    """The intervals' union as disjoint intervals; intervals less than `gap` apart are joined."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1] + gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in merged(intervals))


def lock_summary(holds: list[dict]) -> dict:
    """{"span_s", "runs", "holds", "locks": {lock: held_s, share, holds, wait_s, median_hold_s,
    median_wait_s}, "unlocked_s", "by_who": {who: held_s, wait_s}}; {} for no holds."""
    if not holds:
        return {}
    runs = merged([(h["asked"], h["released"]) for h in holds], gap=RUN_GAP_S)
    span = sum(end - start for start, end in runs)
    locks = {}
    for lock in LOCKS:
        mine = [h for h in holds if h["lock"] == lock]
        if not mine:
            continue
        held = _length([(h["got"], h["released"]) for h in mine])
        waits = [h["got"] - h["asked"] for h in mine]
        locks[lock] = {
            "held_s": round(held, 1),
            "share": round(held / span, 3) if span > 0 else None,
            "holds": len(mine),
            "wait_s": round(sum(waits), 1),
            "median_hold_s": round(statistics.median(h["released"] - h["got"] for h in mine), 3),
            "median_wait_s": round(statistics.median(waits), 3),
        }
    by_who: dict[str, dict[str, float]] = {}
    for h in holds:
        entry = by_who.setdefault(h.get("who") or "?", {"held_s": 0.0, "wait_s": 0.0})
        entry["held_s"] += h["released"] - h["got"]
        entry["wait_s"] += h["got"] - h["asked"]
    return {
        "span_s": round(span, 1),
        "runs": len(runs),
        "holds": len(holds),
        "locks": locks,
        "unlocked_s": round(span - _length([(h["got"], h["released"]) for h in holds]), 1),
        "by_who": {who: {k: round(v, 1) for k, v in entry.items()}
                   for who, entry in sorted(by_who.items(), key=lambda item: -item[1]["wait_s"])},
    }


def render_lines(summary: dict) -> list[str]:
    """The summary as markdown (a section of report.md)."""
    if not summary:
        return []
    lines = [
        "## Where the wall time went (locks)",
        "",
        f"{summary['span_s']:.0f} s of run time ({summary['runs']} run(s)), {summary['holds']} holds; "
        f"no lock held for {summary['unlocked_s']:.0f} s. Held: the union of the holds. Waits are summed "
        "over the processes (they overlap).",
        "",
        "| lock | held s | of the run | holds | median hold s | waits s | median wait s |",
        "|---|---|---|---|---|---|---|",
    ]
    for lock, entry in summary["locks"].items():
        share = f"{entry['share']:.0%}" if entry["share"] is not None else "-"
        lines.append(f"| {lock} | {entry['held_s']:.0f} | {share} | {entry['holds']} | "
                     f"{entry['median_hold_s']:.2f} | {entry['wait_s']:.0f} | {entry['median_wait_s']:.2f} |")
    lines += ["", "| process | held s | waited s |", "|---|---|---|"]
    lines += [f"| {who} | {entry['held_s']:.0f} | {entry['wait_s']:.0f} |"
              for who, entry in summary["by_who"].items()]
    return lines + [""]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    path = Path(argv[0])
    path = path / LOCKS_FILE if path.is_dir() else path
    if not path.is_file():
        print(f"kernelwright: no lock log at {path}", file=sys.stderr)
        return 2
    print("\n".join(render_lines(lock_summary(read_holds(path)))) or "the lock log has no holds")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
