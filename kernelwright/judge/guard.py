"""Defences installed in the candidate's process before its code runs.

- `FunctionSnapshot`: identities of the functions a candidate could patch to fool a judge (timing, events,
  synchronization, comparison, torch entry points); any change afterwards is a rejection.
- `precision_state`: the global TF32 / reduced-precision switches; any change is reported as `downcast`.
- `protect_paths`: an audit hook that refuses (and records) opening the reference problem, the bundled
  problems, or another process's memory.
- `ExtensionRecorder`: wraps `load_inline` / `load` so that the extension functions a candidate builds are
  counted (did forward run a custom kernel at all?) and their exceptions seen (a silent fallback).
- `SwallowedExceptions`: a trace hook over the candidate's own frames that notices an exception raised
  and caught inside forward (the classic `try: kernel() except: torch_op()` fallback).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import threading
import time
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernelwright.judge.progress import report_step

WATCHED: dict[str, object] = {
    "time": time,
    "torch": torch,
    "torch.Tensor": torch.Tensor,
    "torch.nn.Module": torch.nn.Module,
    "torch.nn.functional": F,
    "torch.cuda": torch.cuda,
    "torch.cuda.Event": torch.cuda.Event,
    "torch.cuda.Stream": torch.cuda.Stream,
    "torch.testing": torch.testing,
}
# Attributes of those objects worth watching: everything a timing loop or a comparison touches, plus the
# public compute functions of torch and torch.nn.functional (patched, they would change what "PyTorch
# ops" mean inside the candidate).
_JUDGE_ATTRS = {
    "time": ["time", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time", "sleep"],
    "torch.cuda": [
        "synchronize",
        "Event",
        "Stream",
        "current_stream",
        "default_stream",
        "stream",
        "set_stream",
        "empty_cache",
        "max_memory_allocated",
        "memory_allocated",
    ],
    "torch.cuda.Event": ["record", "elapsed_time", "synchronize", "query", "wait"],
    "torch.cuda.Stream": ["synchronize", "wait_event", "wait_stream", "record_event", "query"],
    "torch.Tensor": [
        "__eq__",
        "__ne__",
        "clone",
        "copy_",
        "cpu",
        "to",
        "detach",
        "contiguous",
        "equal",
        "allclose",
        "isclose",
        "data_ptr",
        "untyped_storage",
        "view",
        "reshape",
        "__repr__",
        "tolist",
        "item",
        "numpy",
        "__torch_function__",
        "abs",
        "sub",
        "max",
    ],
    "torch.nn.Module": ["__call__", "_call_impl", "to", "cuda", "state_dict", "named_buffers", "buffers"],
    "torch.testing": ["assert_close"],
}


def _watched_attributes() -> list[tuple[str, str]]:
    pairs = [(owner, attr) for owner, attrs in _JUDGE_ATTRS.items() for attr in attrs]
    for owner in ("torch", "torch.nn.functional"):
        module = WATCHED[owner]
        pairs += [
            (owner, name)
            for name in dir(module)
            if not name.startswith("_")
            and callable(getattr(module, name, None))
            and not isinstance(getattr(module, name, None), types.ModuleType)
        ]
    return pairs


class FunctionSnapshot:
    """Identities of watched attributes now; `changes()` lists those replaced since."""

    def __init__(self) -> None:
        self._values = {}
        for owner, attr in _watched_attributes():
            value = _identity(getattr(WATCHED[owner], attr, None))
            if value is not None:
                self._values[(owner, attr)] = value

    def changes(self) -> list[str]:
        return [
            f"{owner}.{attr}"
            for (owner, attr), value in self._values.items()
            if not _same_or_torch_wrapper(_identity(getattr(WATCHED[owner], attr, None)), value)
        ]


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _same_or_torch_wrapper(current: object, original: object) -> bool:
    """True when unchanged, or when torch itself wrapped it: importing torch._dynamo replaces e.g.
    torch.manual_seed by a `functools.wraps` wrapper defined in torch, around the same function."""
    if current is original:
        return True
    code = getattr(current, "__code__", None)
    return (
        getattr(current, "__wrapped__", None) is original
        and code is not None
        and code.co_filename.startswith(_TORCH_DIR)
    )


def _identity(value: object) -> object:
    # Bound methods (classmethods looked up on a class) are new objects on every lookup; their
    # function is not.
    return getattr(value, "__func__", value)


def precision_state() -> dict:
    """The global precision switches a candidate could flip to trade accuracy for speed."""
    state = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "default_dtype": str(torch.get_default_dtype()),
    }
    matmul = torch.backends.cuda.matmul
    for name in (
        "allow_tf32",
        "allow_fp16_reduced_precision_reduction",
        "allow_bf16_reduced_precision_reduction",
    ):
        state[f"cuda.matmul.{name}"] = getattr(matmul, name, None)
    return state


def precision_changes(before: dict, after: dict) -> list[str]:
    return [f"{key}: {before[key]} -> {after.get(key)}" for key in before if after.get(key) != before[key]]


# ----------------------------------------------------------------------------------------------- files

_PROC_MEMORY = re.compile(r"^/proc/(\d+)/(mem|maps|environ|cmdline|fd/\d+)$")


def protect_paths(protected: list[str], violations: list[str]) -> None:
    """Refuse to open the reference problem file, anything under the bundled problems, and other processes'
    memory, cmdline or environment (where a problem path or reference data could be found). Audit hooks
    cannot be removed, so the candidate cannot undo this."""
    roots = [os.path.realpath(p) for p in protected]
    own_pid = str(os.getpid())

    def hook(event: str, args: tuple) -> None:
        if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        path = os.fsdecode(args[0])
        real = os.path.realpath(path)
        proc = _PROC_MEMORY.match(real)
        if proc and proc.group(1) != own_pid:
            hit = f"opened {path} (another process's memory or command line)"
        elif any(real == root or real.startswith(root + os.sep) for root in roots):
            hit = f"opened the reference problem {path}"
        else:
            return
        violations.append(hit)
        raise PermissionError(f"kernelwright judge: a candidate may not read {path}")

    sys.addaudithook(hook)


# ----------------------------------------------------------------------------------------------- extensions


def _is_installed_file(path: str) -> bool:
    """Whether a compiled module comes with the Python installation or its packages (torch, numpy, ...)."""
    import site

    roots = {sys.prefix, sys.base_prefix, *site.getsitepackages(), site.getusersitepackages()}
    resolved = os.path.realpath(path)
    return any(resolved.startswith(os.path.realpath(root) + os.sep) for root in roots if root)


def _quiet(loader: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The loader's arguments with verbose=False: torch puts the compiler's output into the exception it
    raises only when the build is quiet (verbose builds print it to stdout, and the verdict would say no
    more than "Error building extension")."""
    try:
        signature = inspect.signature(loader)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs  # the loader raises its own error for bad arguments
    if "verbose" in signature.parameters:
        bound.arguments["verbose"] = False
    return bound.args, bound.kwargs


class ExtensionRecorder:
    """Wraps torch.utils.cpp_extension.load_inline/load: records each module built, wraps its functions with
    counters (exceptions included), and marks failures raised while building as build errors."""

    def __init__(self) -> None:
        self.modules: list[types.ModuleType] = []
        self.raw: dict[tuple[int, str], Callable] = {}
        self.calls = 0
        self.errors: list[str] = []
        self.build_failure: BaseException | None = None
        self.build_seconds = 0.0

    def install(self) -> None:
        import importlib.machinery

        import torch.utils.cpp_extension as cpp_extension

        for name in ("load_inline", "load"):
            setattr(cpp_extension, name, self._wrap_loader(getattr(cpp_extension, name)))
        # A candidate may also import an already-built extension directly (our own emitted files load their
        # cached build that way): every compiled module imported from outside the installed packages counts.
        loader_class = importlib.machinery.ExtensionFileLoader
        original = loader_class.exec_module

        def exec_module(loader, module):
            original(loader, module)
            if not _is_installed_file(getattr(module, "__file__", None) or ""):
                self._instrument(module)

        loader_class.exec_module = exec_module

    def _wrap_loader(self, loader: Callable) -> Callable:
        # functools.wraps keeps the loader's __module__ (torch's): the candidate holds this wrapper, and the
        # check that a candidate does not use kernelwright must not see it as ours.
        @functools.wraps(loader)
        def wrapped(*args, **kwargs):
            args, kwargs = _quiet(loader, args, kwargs)
            report_step(f"extension {kwargs.get('name', args[0] if args else '?')}: building")
            start = time.perf_counter()
            try:
                module = loader(*args, **kwargs)
            except BaseException as exc:
                self.build_failure = exc
                raise
            finally:
                self.build_seconds += time.perf_counter() - start
            if isinstance(module, types.ModuleType):
                self._instrument(module)
            return module

        return wrapped

    def _instrument(self, module: types.ModuleType) -> None:
        if any(known is module for known in self.modules):
            return
        self.modules.append(module)
        for name in dir(module):
            fn = getattr(module, name)
            if name.startswith("_") or not callable(fn) or isinstance(fn, type):
                continue
            self.raw[(id(module), name)] = fn
            try:
                setattr(module, name, self._counting(fn, name))
            except (AttributeError, TypeError):
                continue

    def _counting(self, fn: Callable, name: str) -> Callable:
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            self.calls += 1
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                first_line = (str(exc).strip().splitlines() or [""])[0]
                self.errors.append(f"{name}: {type(exc).__name__}: {first_line}")
                raise

        return counted

    def uninstrument(self) -> None:
        """Put the raw functions back: no wrapper overhead in timing for candidates that look them up
        per call."""
        for module in self.modules:
            for (ident, name), fn in self.raw.items():
                if ident == id(module):
                    setattr(module, name, fn)


# ----------------------------------------------------------------------------------------------- fallbacks


class SwallowedExceptions:
    """While active, records exceptions raised in frames of `filename` (the candidate's source). If forward
    then returns normally, each one was caught by the candidate: a fallback that hides a failing kernel."""

    IGNORED = (StopIteration, StopAsyncIteration, GeneratorExit)

    def __init__(self, filename: str) -> None:
        self.filename = os.path.realpath(filename)
        self.seen: list[str] = []
        self._is_candidate: dict[object, bool] = {}  # code object -> defined in the candidate file

    def _local(self, frame, event, arg):
        if event == "exception":
            exc_type, exc, _ = arg
            if not issubclass(exc_type, self.IGNORED):
                text = str(exc).strip().splitlines()
                entry = f"{exc_type.__name__}{': ' + text[0] if text else ''} (line {frame.f_lineno})"
                if entry not in self.seen:
                    self.seen.append(entry)
        return self._local

    def _global(self, frame, event, arg):
        code = frame.f_code
        mine = self._is_candidate.get(code)
        if mine is None:
            mine = self._is_candidate[code] = os.path.realpath(code.co_filename) == self.filename
        return self._local if mine else None

    def __enter__(self) -> SwallowedExceptions:
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc_info) -> None:
        sys.settrace(self._previous)


def live_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}
