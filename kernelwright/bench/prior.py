"""The bench's order on a machine that has never run the bundled suite. `plan.longest_first` orders tasks
by the seconds their systems took in an earlier run on the same GPU model and torch (memory.PeakCache).
The lent GPU machines start empty, so a bench there knew no task's length: it started level 3 first and
level 1 last, and the bundled suite's longest level-1 tasks (level1/73 and level1/74 at 100-125 s) were
among its last (bench/results/2026-11-28-h200-suite-onepiece).

`problems/task_seconds.json` keeps the seconds of a committed GPU run's correct rows, per bundled problem
and system. A task whose problem file is the bundled one and that the local cache does not know takes its
length from there. Only the order depends on it, never a result. To rewrite it from results files (a
later file's rows win):

    python -m kernelwright.bench.prior bench/results/RUN/results.jsonl ...
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from kernelwright.bench.plan import BenchTask
from kernelwright.problem_files import BUNDLED_DIR

PRIOR_FILE = BUNDLED_DIR / "task_seconds.json"

Seconds = Callable[[BenchTask], float | None]


def read_prior(path: Path = PRIOR_FILE) -> dict[str, dict[str, float]]:
    """{problem id: {system: seconds}} from `path`; {} when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())["seconds"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def with_prior(known: Seconds | None, prior: dict[str, dict[str, float]]) -> Seconds:
    """`known(task)` where it has an answer, else the task's length from `prior`: the sum over its systems
    when every one of them is there and its problem file is the bundled one (None otherwise)."""
    def seconds(task: BenchTask) -> float | None:
        own = known(task) if known else None
        if own is not None:
            return own
        entry = prior.get(task.problem_id)
        if entry is None or not _is_bundled(task):
            return None
        values = [entry.get(system) for system in task.systems]
        return None if None in values else float(sum(values))

    return seconds


def _is_bundled(task: BenchTask) -> bool:
    """Whether the task's problem file is the bundled one of its id (a copy elsewhere may be edited)."""
    path = Path(task.problem_path).resolve()
    return path == (BUNDLED_DIR / f"{task.problem_id}.py").resolve()


def prior_from_results(paths: list[Path]) -> dict:
    """The file's content from results files: the seconds of each correct row (later files win), with the
    files and GPUs they came from."""
    seconds: dict[str, dict[str, float]] = {}
    gpus = set()
    for path in paths:
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("status") != "correct" or row.get("seconds") is None:
                continue
            seconds.setdefault(row["problem"], {})[row["system"]] = round(float(row["seconds"]), 1)
            if row.get("device"):
                gpus.add(str(row["device"]))
    return {"from": [str(p) for p in paths], "gpus": sorted(gpus),
            "seconds": dict(sorted(seconds.items()))}


def render(content: dict) -> str:
    """The file's text: one line per problem."""
    lines = [f' "from": {json.dumps(content["from"])},', f' "gpus": {json.dumps(content["gpus"])},',
             ' "seconds": {']
    items = list(content["seconds"].items())
    lines += [f'  {json.dumps(k)}: {json.dumps(v)}{"," if i < len(items) - 1 else ""}'
              for i, (k, v) in enumerate(items)]
    return "{\n" + "\n".join(lines) + "\n }\n}\n"


def main(argv: list[str]) -> int:
    """Rewrite PRIOR_FILE from the results files in `argv`; 2 with a one-line message on bad input."""
    if not argv:
        print("usage: " + __doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    paths = [Path(arg) for arg in argv]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"no such results file: {', '.join(missing)}", file=sys.stderr)
        return 2
    content = prior_from_results(paths)
    PRIOR_FILE.write_text(render(content))
    print(f"{PRIOR_FILE}: {len(content['seconds'])} problems")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
