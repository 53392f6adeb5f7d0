"""A bench results folder (layout in bench/README.md):

    results.jsonl      one row per finished (problem, system), appended as tasks finish
    run.json           {"runs": [...]}: options, systems, GPUs and environment of each (resumed) run
    report.md, report.json, *.png          rendered from the two files above
    candidates/<system>/<problem>.py       files written by `kernelwright optimize`
    logs/<system>/<problem>.log            output of tasks that did not end `correct`
    locks.jsonl        every hold of a timing/work/GPU lock by the tasks' processes (bench/locks.py)
"""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path

from kernelwright.errors import UsageError

RESULTS_FILE = "results.jsonl"
# The environment's failures, not the systems': --resume runs them again (as it does a row whose detail
# says so: `kernelwright optimize` exiting for the machine's sake, tasks.py).
REDONE_STATUSES = ("bench_error", "host_oom")
ENVIRONMENT_DETAIL = "environment failure, not a verdict"
RUN_FILE = "run.json"
DEFAULT_ROOT = Path("bench") / "results"


def default_results_dir(device_name: str, root: Path = DEFAULT_ROOT) -> Path:
    """`bench/results/<date>-<gpu>/`, e.g. `2025-06-01-h100-80gb-hbm3`."""
    return root / f"{datetime.date.today().isoformat()}-{device_slug(device_name)}"


def device_slug(device_name: str) -> str:
    name = re.sub(r"^nvidia\s+", "", device_name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown"


class ResultsStore:
    """Reads and appends the files of one results folder. Only the bench's main process writes."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    @property
    def results_path(self) -> Path:
        return self.directory / RESULTS_FILE

    def exists(self) -> bool:
        return self.results_path.is_file()

    def rows(self) -> list[dict]:
        """Every row, in the order written. A torn last line (a run killed mid-write) is skipped."""
        if not self.exists():
            return []
        rows = []
        for line in self.results_path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return rows

    def latest_rows(self) -> list[dict]:
        """One row per (problem, system): the last one written (a resumed task supersedes its retry)."""
        latest = {}
        for row in self.rows():
            latest[(row["problem"], row["system"])] = row
        return list(latest.values())

    def done_keys(self) -> set[tuple[str, str]]:
        """(problem, system) keys that --resume skips: every row except the environment's failures."""
        return {(r["problem"], r["system"]) for r in self.latest_rows() if not _redone(r)}

    def append(self, rows: list[dict]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        torn = self.exists() and not _ends_with_newline(self.results_path)
        with self.results_path.open("a") as handle:
            if torn:  # a run killed mid-write: end its partial line so the next row stays whole
                handle.write("\n")
            for row in rows:
                handle.write(json.dumps(row, sort_keys=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def runs(self) -> list[dict]:
        path = self.directory / RUN_FILE
        return json.loads(path.read_text())["runs"] if path.is_file() else []

    def add_run(self, run: dict) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / RUN_FILE).write_text(json.dumps({"runs": [*self.runs(), run]}, indent=2) + "\n")

    def log_path(self, system: str, problem_id: str) -> Path:
        return self.directory / "logs" / system / f"{problem_id}.log"

    def candidates_dir(self) -> Path:
        return self.directory / "candidates"


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def open_results(directory: str | Path, resume: bool) -> ResultsStore:
    """The store for a new run (refusing to mix into an earlier one unless resuming)."""
    store = ResultsStore(directory)
    if store.exists() and not resume:
        raise UsageError(f"{store.results_path} already exists: add --resume to finish that run, "
                         "or choose another --out")
    return store


def require_results(directory: str | Path) -> ResultsStore:
    store = ResultsStore(directory)
    if not store.exists():
        raise UsageError(f"{directory}: no {RESULTS_FILE} here (a folder written by `kernelwright bench`)")
    return store


def _redone(row: dict) -> bool:
    return row["status"] in REDONE_STATUSES or str(row.get("detail") or "").startswith(ENVIRONMENT_DETAIL)
