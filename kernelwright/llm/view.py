"""The live view of a generate run: one row per problem (samples finished, what is happening now, verdict
counts, best speedup, tokens), refreshed while worker threads report through the `LoopObserver` calls."""

from __future__ import annotations

import threading
import time
from collections import Counter

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kernelwright.llm.loop import LoopObserver, LoopSettings, ProblemTask
from kernelwright.llm.records import RunRecords

MAX_NOTES = 5


class LiveView(LoopObserver):
    def __init__(
        self,
        tasks: list[ProblemTask],
        records: RunRecords,
        settings: LoopSettings,
        console: Console | None = None,
    ) -> None:
        self.tasks = tasks
        self.records = records
        self.settings = settings
        self.console = console or Console()
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._active: dict[str, dict[int, str]] = {t.id: {} for t in tasks}
        self._finished: Counter[str] = Counter()
        self._notes: list[str] = []
        self._live: Live | None = None

    def __enter__(self) -> LiveView:
        self._live = Live(
            console=self.console, get_renderable=self.render, refresh_per_second=4, transient=False
        )
        self._live.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._live is not None:
            self._live.__exit__(*exc_info)

    # ------------------------------------------------------------------------------------------ observer

    def turn_stage(self, problem_id: str, sample: int, turn: int, stage: str) -> None:
        with self._lock:
            self._active[problem_id][sample] = f"s{sample} t{turn} {stage}"

    def turn_finished(self, event: dict) -> None:
        with self._lock:
            self._active[event["problem"]].pop(event["sample"], None)

    def sample_finished(self, problem_id: str, sample: int) -> None:
        with self._lock:
            self._active[problem_id].pop(sample, None)
            self._finished[problem_id] += 1

    def note(self, text: str) -> None:
        with self._lock:
            self._notes = (self._notes + [text])[-MAX_NOTES:]

    # ------------------------------------------------------------------------------------------ rendering

    def render(self) -> Group:
        with self._lock:
            active = {pid: sorted(samples.values()) for pid, samples in self._active.items()}
            finished = dict(self._finished)
            notes = list(self._notes)
        table = summary_table(self.tasks, self.records, self.settings, active=active, finished=finished)
        usage = self.records.usage()
        elapsed = time.monotonic() - self._started
        footer = Text(
            f"tokens: {usage['prompt_tokens']:,} prompt + {usage['completion_tokens']:,} completion"
            f"   elapsed: {elapsed:,.0f} s",
            style="dim",
        )
        return Group(table, footer, *(Text(n, style="yellow") for n in notes))


def summary_table(
    tasks: list[ProblemTask],
    records: RunRecords,
    settings: LoopSettings,
    active: dict[str, list[str]] | None = None,
    finished: dict[str, int] | None = None,
) -> Table:
    """Per problem: samples finished, current activity, verdict counts, best speedup and tokens (from the
    records, so the table is also the final report of a resumed run)."""
    table = Table(title=f"kernelwright generate: {settings.samples} sample(s) x {settings.turns} turn(s)")
    for column in ("problem", "samples", "now", "verdicts", "best", "tokens"):
        table.add_column(column, overflow="fold")
    for task in tasks:
        summary = records.problem_summary(task.id)
        verdicts = " ".join(f"{status} {count}" for status, count in summary["verdicts"].items())
        samples = "" if finished is None else f"{finished.get(task.id, 0)}/{settings.samples}"
        now = ", ".join((active or {}).get(task.id, []))
        table.add_row(
            task.id,
            samples,
            now,
            verdicts or "-",
            _best_text(summary["best"]),
            f"{summary['usage']['total_tokens']:,}",
        )
    return table


def _best_text(best: dict | None) -> str:
    if best is None:
        return "-"
    speedup = best["speedup_vs_eager"]
    rate = f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else "correct"
    return f"{rate} ({best['source']})"
