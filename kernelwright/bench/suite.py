"""Which problems a bench runs: the bundled suite or any folder of KernelBench-format files.

A suite folder holds problem files directly, or in subfolders that are its levels (`level1/19_ReLU.py`,
as in KernelBench). A problem's id is `<subfolder>/<stem>` (or `<stem>` at the top), the same id used
for candidate files and result rows.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path

from kernelwright.errors import UsageError
from kernelwright.problem_files import BUNDLED_DIR

CATEGORIES_FILE_NAME = "categories.json"


@dataclass(frozen=True)
class SuiteProblem:
    id: str          # "level1/19_ReLU"
    path: Path
    level: str       # "1" for a `level1` folder, the folder name otherwise, "" at the top of the suite
    category: str    # from the suite's categories.json, else "uncategorized"


def discover_suite(suite: str | Path | None = None, level: int | None = None,
                   pattern: str | None = None) -> list[SuiteProblem]:
    """Problems of `suite` (the bundled one when None), keeping only `level` and ids matching the glob
    `pattern` (matched against the id and against the file stem; several globs separated by commas keep
    the problems matching any of them)."""
    root = Path(suite) if suite is not None else BUNDLED_DIR
    if not root.is_dir():
        raise UsageError(f"{root}: the suite must be a folder of problem files (or levelN/ subfolders)")
    categories = _categories(root)
    problems = []
    for path in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        if path.name.startswith("_"):
            continue
        folder = path.parent.name if path.parent != root else ""
        problem_id = f"{folder}/{path.stem}" if folder else path.stem
        problem_level = _level_of(folder)
        if level is not None and problem_level != str(level):
            continue
        if pattern and not any(fnmatch.fnmatch(problem_id, glob) or fnmatch.fnmatch(path.stem, glob)
                               for glob in pattern.split(",")):
            continue
        category = categories.get(problem_id, "uncategorized")
        problems.append(SuiteProblem(problem_id, path, problem_level, category))
    if not problems:
        what = " and ".join(filter(None, [f"level {level}" if level is not None else "",
                                          f"filter {pattern!r}" if pattern else ""]))
        raise UsageError(f"{root}: no problem files{' for ' + what if what else ''}")
    return sorted(problems, key=_sort_key)


def _sort_key(problem: SuiteProblem) -> tuple:
    # Numeric order inside a level: 2_X before 10_X, as the files are numbered.
    number = problem.path.stem.split("_", 1)[0]
    level = int(problem.level) if problem.level.isdigit() else -1
    return (level, problem.level, int(number) if number.isdigit() else 0, problem.path.stem)


def _level_of(folder: str) -> str:
    match = re.fullmatch(r"level[_-]?(\d+)", folder)
    return match.group(1) if match else folder


def _categories(root: Path) -> dict[str, str]:
    path = root / CATEGORIES_FILE_NAME
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
