"""Load KernelBench-format problem files, validate them, build models and inputs, and shrink them.

A problem file defines `Model(nn.Module)`, `get_inputs()`, `get_init_inputs()` and module-level integer
constants that size everything. Each file is executed in its own module namespace, so two problems
never share globals. Every failure becomes a `ProblemLoadError` naming the file and the cause.
"""

from __future__ import annotations

import ast
import itertools
import json
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelwright.errors import ProblemLoadError

BUNDLED_DIR = Path(__file__).parent / "problems"
SHRINK_OVERRIDES_FILE = BUNDLED_DIR / "shrink_overrides.json"
CATEGORIES_FILE = BUNDLED_DIR / "categories.json"

# Caps tried in order when shrinking: the smallest that still runs wins.
SHRINK_CAPS = (16, 32, 64)
DEFAULT_SEED = 42

_module_counter = itertools.count()


@dataclass
class Problem:
    """A loaded problem file: its module namespace and the three validated entry points."""

    path: Path
    id: str
    source: str
    module: types.ModuleType
    constants: dict[str, int] = field(default_factory=dict)

    @property
    def model_class(self) -> type[torch.nn.Module]:
        return self.module.Model

    @property
    def description(self) -> str:
        doc = self.module.__doc__ or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    def init_inputs(self) -> list:
        return list(self._call("get_init_inputs"))

    def inputs(self, seed: int = DEFAULT_SEED, device: str | torch.device | None = None) -> list:
        """`get_inputs()` under `seed`, on `device` when given. For a CUDA device the tensors are drawn there
        directly (torch's CPU generator fills ~1e8 values/s on one core: seconds per gigabyte, every trial),
        unless `get_inputs` cannot run that way; then on the CPU and moved. The values depend on the seed
        and on where they are drawn: a caller comparing two runs draws both on the same device."""
        if device is not None and torch.device(device).type == "cuda":
            torch.manual_seed(seed)
            try:
                with torch.device(device):
                    return to_device(list(self._call("get_inputs")), device)
            except ProblemLoadError:
                pass  # e.g. get_inputs converts through numpy: draw on the CPU below
        torch.manual_seed(seed)
        values = list(self._call("get_inputs"))
        return to_device(values, device) if device is not None else values

    def build_model(
        self,
        seed: int = DEFAULT_SEED,
        device: str | torch.device | None = None,
        model_class: type[torch.nn.Module] | None = None,
        init_inputs: list | None = None,
    ) -> torch.nn.Module:
        """Construct `Model` (or `model_class`, e.g. a ModelNew) after seeding: the KernelBench convention,
        so that a seeded Model and ModelNew get identical parameters."""
        init = self.init_inputs() if init_inputs is None else init_inputs
        cls = model_class or self.model_class
        torch.manual_seed(seed)
        try:
            model = cls(*init)
        except Exception as exc:
            raise ProblemLoadError(
                f"{self.path}: {cls.__name__}(*get_init_inputs()) raised {_describe(exc)}"
            ) from exc
        return model.to(device) if device is not None else model

    def _call(self, name: str) -> Any:
        try:
            result = getattr(self.module, name)()
        except Exception as exc:
            raise ProblemLoadError(f"{self.path}: {name}() raised {_describe(exc)}") from exc
        if not isinstance(result, (list, tuple)):
            raise ProblemLoadError(f"{self.path}: {name}() must return a list, got {type(result).__name__}")
        return result


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def to_device(value: Any, device: str | torch.device) -> Any:
    """Move every tensor inside nested lists/tuples/dicts to `device`; other values pass through."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


# ----------------------------------------------------------------------------------------------- lookup


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


def bundled_categories() -> dict[str, str]:
    if CATEGORIES_FILE.is_file():
        return json.loads(CATEGORIES_FILE.read_text())
    return {}


# ----------------------------------------------------------------------------------------------- loading


def integer_constants(tree: ast.Module) -> dict[str, int]:
    """Top-level `name = <int literal>` (or `name: int = <int literal>`) assignments."""
    found = {}
    for name, value_node in _constant_assignments(tree):
        found[name] = value_node.value
    return found


def _constant_assignments(tree: ast.Module) -> Iterator[tuple[str, ast.Constant]]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        else:
            continue
        if isinstance(value, ast.Constant) and type(value.value) is int:
            yield target, value


def load_problem(spec: str | Path, overrides: dict[str, int] | None = None) -> Problem:
    """Execute a problem file in a fresh module and validate it. `overrides` replaces the values of
    top-level integer constants before execution, so constants derived from them follow."""
    path = resolve_problem_path(spec)
    try:
        source = path.read_text()
    except OSError as exc:
        raise ProblemLoadError(f"{path}: cannot read the file ({exc.strerror})") from exc
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemLoadError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from exc

    overrides = dict(overrides or {})
    constants = {}
    for name, value_node in _constant_assignments(tree):
        if name in overrides:
            value_node.value = int(overrides.pop(name))
        constants[name] = value_node.value
    if overrides:
        unknown = ", ".join(sorted(overrides))
        raise ProblemLoadError(f"{path}: shrink overrides name unknown constants: {unknown}")

    module = types.ModuleType(f"kernelwright_problem_{next(_module_counter)}_{path.stem}")
    module.__file__ = str(path)
    # Registered so that inspect/torch.export can find the module of `Model`.
    sys.modules[module.__name__] = module
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    except Exception as exc:
        sys.modules.pop(module.__name__, None)
        raise ProblemLoadError(f"{path}: executing the file raised {_describe(exc)}") from exc
    _validate(path, module)
    return Problem(path=path, id=problem_id_for(path), source=source, module=module, constants=constants)


def _validate(path: Path, module: types.ModuleType) -> None:
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, name)]
    if missing:
        raise ProblemLoadError(
            f"{path}: missing {', '.join(missing)} (a problem defines Model, get_inputs, get_init_inputs)"
        )
    model = module.Model
    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
        raise ProblemLoadError(f"{path}: Model must be a subclass of torch.nn.Module, got {model!r}")
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name)):
            raise ProblemLoadError(f"{path}: {name} must be a function")


# ----------------------------------------------------------------------------------------------- shrinking


def shrink_value(value: int, cap: int) -> int:
    """A small stand-in for a size constant: the largest divisor of `value` in [cap/2, cap] (keeps
    divisibility with small constants such as group counts), else `cap` (`cap + 1` if `value` was odd,
    so odd sizes stay odd)."""
    if value <= cap:
        return value
    for candidate in range(cap, cap // 2 - 1, -1):
        if value % candidate == 0:
            return candidate
    return cap + 1 if value % 2 else cap


def shrink_overrides_for(problem_id: str) -> dict[str, int]:
    if SHRINK_OVERRIDES_FILE.is_file():
        return json.loads(SHRINK_OVERRIDES_FILE.read_text()).get(problem_id, {})
    return {}


def shrunk_constants(spec: str | Path, cap: int, explicit: dict[str, int] | None = None) -> dict[str, int]:
    """The constant overrides that shrink a problem with `cap`; explicit values win."""
    path = resolve_problem_path(spec)
    tree = ast.parse(path.read_text(), filename=str(path))
    values = {name: shrink_value(v, cap) for name, v in integer_constants(tree).items() if v > cap}
    values.update(shrink_overrides_for(problem_id_for(path)))
    values.update(explicit or {})
    return values


def load_shrunk(
    spec: str | Path,
    overrides: dict[str, int] | None = None,
    check: Callable[[Problem], Any] | None = None,
) -> Problem:
    """Load a small variant of a problem that runs on the CPU in milliseconds. Tries the caps in
    `SHRINK_CAPS` and keeps the first variant whose model builds and runs (or passes `check`)."""
    check = check or run_forward_on_cpu
    errors = []
    for cap in SHRINK_CAPS:
        problem = load_problem(spec, shrunk_constants(spec, cap, overrides))
        try:
            check(problem)
        except Exception as exc:
            errors.append(f"cap {cap}: {_describe(exc)}")
            continue
        return problem
    raise ProblemLoadError(
        f"{spec}: no shrunk variant runs ({'; '.join(errors)}); add an entry to {SHRINK_OVERRIDES_FILE.name}"
    )


def run_forward_on_cpu(problem: Problem, seed: int = DEFAULT_SEED) -> Any:
    model = problem.build_model(seed)
    inputs = problem.inputs(seed)
    with torch.no_grad():
        return model(*inputs)
