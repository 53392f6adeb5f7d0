"""Problem files as text: finding them (paths, bundled ids), reading them, and what can be known about them
without executing them. Nothing here imports torch, so `kernelwright problems` and `kernelwright prompt`
start in well under a second; executing a problem (`problem.load_problem`) is for the commands that need
its model.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

from kernelwright.errors import ProblemLoadError

BUNDLED_DIR = Path(__file__).parent / "problems"
CATEGORIES_FILE = BUNDLED_DIR / "categories.json"
# Input shapes, GFLOP and least bytes moved of each bundled problem, computed on the meta device by
# `problem_estimates.py` (a test keeps this file in step with the problems).
ESTIMATES_FILE = BUNDLED_DIR / "estimates.json"
ENTRY_POINTS = ("Model", "get_inputs", "get_init_inputs")


def bundled_levels() -> list[int]:
    return sorted(int(path.name[len("level"):]) for path in BUNDLED_DIR.glob("level*") if path.is_dir())


def bundled_problem_ids(level: int | None = None) -> list[str]:
    """Ids (`level1/19_ReLU`) of the problems shipped in the package, sorted by level then number."""
    ids = []
    for path in sorted(BUNDLED_DIR.glob("level*/*.py")):
        if level is None or path.parent.name == f"level{level}":
            ids.append(f"{path.parent.name}/{path.stem}")
    return sorted(ids, key=_id_sort_key)


def _id_sort_key(problem_id: str) -> tuple:
    level, _, name = problem_id.partition("/")
    number = name.split("_", 1)[0]
    return (level, int(number) if number.isdigit() else 0, name)


def resolve_problem_path(spec: str | Path) -> Path:
    """A path to an existing file, or a bundled id (`level1/19_ReLU`, with or without `.py`)."""
    path = Path(spec)
    if path.is_file():
        return path
    if path.is_dir():
        raise ProblemLoadError(f"{spec}: is a directory, not a problem file")
    bundled = BUNDLED_DIR / (str(spec) if str(spec).endswith(".py") else f"{spec}.py")
    if bundled.is_file():
        return bundled
    # A unique prefix of a bundled id is accepted too: `level1/19` → `level1/19_ReLU`.
    matches = [pid for pid in bundled_problem_ids() if pid.startswith(str(spec))]
    if len(matches) == 1:
        return BUNDLED_DIR / f"{matches[0]}.py"
    hint = f" (ambiguous: {', '.join(matches[:5])})" if matches else ""
    raise ProblemLoadError(
        f"{spec}: no such file and no bundled problem with that id{hint}; `kernelwright problems` lists them"
    )


def problem_id_for(path: Path) -> str:
    """`level1/19_ReLU` for a file inside a `levelN` folder (bundled or not), else the file's stem."""
    path = Path(path)
    if path.parent.name.startswith("level"):
        return f"{path.parent.name}/{path.stem}"
    return path.stem


def read_problem_source(path: Path) -> str:
    """The text of a problem file; a file that cannot be read, or is not UTF-8 text (a binary file, an
    archive), is a ProblemLoadError naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProblemLoadError(f"{path}: not a Python source file (not UTF-8 text: byte {exc.start} is "
                               f"0x{exc.object[exc.start]:02x})") from exc
    except OSError as exc:
        raise ProblemLoadError(f"{path}: cannot read the file ({exc.strerror or exc})") from exc


def parse_problem_source(path: Path, source: str) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemLoadError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from exc
    except ValueError as exc:  # null bytes in the source
        raise ProblemLoadError(f"{path}: not a Python source file ({exc})") from exc


def read_problem_statically(spec: str | Path) -> tuple[Path, str]:
    """(path, source) of a problem file that parses and defines Model, get_inputs and get_init_inputs at
    its top level, checked without executing it (a file that star-imports them is given the benefit of the
    doubt)."""
    path = resolve_problem_path(spec)
    source = read_problem_source(path)
    tree = parse_problem_source(path, source)
    defined = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names = [alias.asname or alias.name.split(".")[0] for alias in stmt.names]
            if "*" in names:
                return path, source
            defined.update(names)
    missing = [name for name in ENTRY_POINTS if name not in defined]
    if missing:
        raise ProblemLoadError(
            f"{path}: missing {', '.join(missing)} (a problem defines Model, get_inputs, get_init_inputs)"
        )
    return path, source


def problem_description(source: str) -> str:
    """The first line of the module docstring."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def bundled_categories() -> dict[str, str]:
    if CATEGORIES_FILE.is_file():
        return json.loads(CATEGORIES_FILE.read_text())
    return {}


def bundled_estimates() -> dict[str, dict]:
    """{problem id: {"inputs": [shape, ...], "gflop": float or None, "mbytes": float}}."""
    if ESTIMATES_FILE.is_file():
        return json.loads(ESTIMATES_FILE.read_text())
    return {}


def integer_constants(tree: ast.Module) -> dict[str, int]:
    """Top-level `name = <int literal>` (or `name: int = <int literal>`) assignments."""
    found = {}
    for name, value_node in constant_assignments(tree):
        found[name] = value_node.value
    return found


def constant_assignments(tree: ast.Module) -> Iterator[tuple[str, ast.Constant]]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        else:
            continue
        if isinstance(value, ast.Constant) and type(value.value) is int:
            yield target, value
