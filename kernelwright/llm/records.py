"""The records of a `generate` run, all under one folder, so that a run can be audited, scored and resumed:

    records.jsonl                      one JSON event per line: run settings, every request and response,
                                       extracted code, verdict, feedback and token usage
    attempts/<problem id>/s1-t2.py     the code extracted from each answer (what the judge ran)
    attempts/<problem id>/kernelwright.py   the compiler's starting point (`--start-from kernelwright`)
    candidates/<problem id>.py         the best correct candidate per problem: the `bench` candidate layout,
                                       so `kernelwright bench --systems <out>/candidates` scores the run
    summary.json                       per problem: best candidate, verdict counts, tokens

Everything is derived from `records.jsonl`; the other files can be rebuilt from it.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

RECORDS_FILE = "records.jsonl"
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


class RunRecords:
    """Append-only event log of a run folder; safe to use from the loop's worker threads."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / RECORDS_FILE
        self._lock = threading.Lock()
        self.events: list[dict] = []
        # Events per problem: the live view asks for every problem's summary several times a second.
        self._by_problem: dict[str, list[dict]] = {}
        for event in _read_events(self.path):
            self._add(event)

    # ------------------------------------------------------------------------------------------ writing

    def append(self, event: dict) -> dict:
        event = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), **event}
        line = json.dumps(event, default=str)
        with self._lock:
            with self.path.open("a") as handle:
                handle.write(line + "\n")
            self._add(event)
        return event

    def _add(self, event: dict) -> None:
        self.events.append(event)
        if "problem" in event:
            self._by_problem.setdefault(event["problem"], []).append(event)

    def write_attempt(self, problem_id: str, name: str, code: str) -> str:
        """Save one answer's code; returns its path relative to the run folder (records stay portable)."""
        relative = Path("attempts") / problem_id / f"{name}.py"
        path = self.out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
        return str(relative)

    def keep_if_best(self, problem_id: str, event: dict) -> bool:
        """Copy the event's code to `candidates/<problem id>.py` when it beats the best recorded so far."""
        with self._lock:
            best = self._best(problem_id, exclude=event)
            if not _is_correct(event) or (best is not None and _rank(event) <= _rank(best)):
                return False
            target = self.candidate_path(problem_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((self.out_dir / event["code_path"]).read_text())
            return True

    def write_summary(self, problem_ids: list[str]) -> dict:
        summary = {
            "problems": {pid: self.problem_summary(pid) for pid in problem_ids},
            "usage": self.usage(),
        }
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    # ------------------------------------------------------------------------------------------ reading

    def candidate_path(self, problem_id: str) -> Path:
        return self.out_dir / "candidates" / f"{problem_id}.py"

    def turns(self, problem_id: str, sample: int) -> list[dict]:
        with self._lock:
            found = [
                e for e in self._of(problem_id) if e.get("event") == "turn" and e.get("sample") == sample
            ]
        return sorted(found, key=lambda e: e["turn"])

    def start_event(self, problem_id: str) -> dict | None:
        with self._lock:
            found = [e for e in self._of(problem_id) if e.get("event") == "start"]
        return found[-1] if found else None

    def best(self, problem_id: str) -> dict | None:
        with self._lock:
            return self._best(problem_id)

    def usage(self, problem_id: str | None = None) -> dict[str, int]:
        totals = dict.fromkeys(USAGE_KEYS, 0)
        with self._lock:
            for event in self.events if problem_id is None else self._of(problem_id):
                if event.get("event") == "turn":
                    usage = (event.get("response") or {}).get("usage") or {}
                    for key in USAGE_KEYS:
                        totals[key] += int(usage.get(key) or 0)
        return totals

    def problem_summary(self, problem_id: str) -> dict:
        with self._lock:
            turns = [e for e in self._of(problem_id) if e.get("event") == "turn"]
            best = self._best(problem_id)
        counts = Counter(e["verdict"].get("status", "unknown") for e in turns)
        return {
            "turns": len(turns),
            "successful_samples": sorted({e["sample"] for e in turns if e.get("success")}),
            "verdicts": dict(sorted(counts.items())),
            "best": None
            if best is None
            else {
                "source": "kernelwright"
                if best["event"] == "start"
                else f"sample {best['sample']} turn {best['turn']}",
                "code_path": best["code_path"],
                "speedup_vs_eager": best["verdict"].get("speedup_vs_eager"),
                "candidate": str(self.candidate_path(problem_id).relative_to(self.out_dir)),
            },
            "usage": self.usage(problem_id),
        }

    def _of(self, problem_id: str) -> list[dict]:
        return self._by_problem.get(problem_id, [])

    def _best(self, problem_id: str, exclude: dict | None = None) -> dict | None:
        correct = [
            e
            for e in self._of(problem_id)
            if e.get("event") in ("turn", "start") and _is_correct(e) and e is not exclude
        ]
        # max() keeps the first of equals, so an earlier candidate is not replaced by an equally fast one.
        return max(correct, key=_rank) if correct else None


def _read_events(path: Path) -> list[dict]:
    """The events of a previous run. A run killed mid-write leaves a last line without its newline: it is
    cut off (so the next event starts on a line of its own) and that turn is simply redone."""
    if not path.is_file():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    if complete != text:
        path.write_text(complete)
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def _is_correct(event: dict) -> bool:
    return bool(event.get("code_path")) and (event.get("verdict") or {}).get("status") == "correct"


def _rank(event: dict) -> float:
    speedup = event["verdict"].get("speedup_vs_eager")
    return float(speedup) if isinstance(speedup, (int, float)) else 0.0
