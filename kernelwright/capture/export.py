"""Run torch.export on a problem's model, on fake tensors, and decompose to the IR's op set.

Fake tensors carry shapes and dtypes but no data, so even full-size problems export without allocating
their inputs or weights. The model keeps its own training/eval mode: a fresh `nn.Module` is in training
mode, and BatchNorm then normalizes with batch statistics and updates its running stats; export records
those updates as buffer mutations, which become `graph.mutations`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import warnings
from collections.abc import Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernelwright.capture.aten import IGNORED_OPS, LOWERINGS
from kernelwright.errors import CaptureError, KernelwrightError, ProblemInputsError, ProblemLoadError
from kernelwright.problem import DEFAULT_SEED, Problem

# Composite ops the IR keeps whole (docs/ir.md) although torch's default table would decompose them:
# each has, or will have, its own fused kernel family. Everything else decomposes to core ATen.
KEPT_COMPOSITES = (
    "softmax.int",
    "log_softmax.int",
    "layer_norm.default",
    "group_norm.default",
    "gelu.default",
    "silu.default",
    "mish.default",
    "hardswish.default",
    "hardsigmoid.default",
    "softplus.default",
    "elu.default",
    "leaky_relu.default",
    "logsumexp.default",
    "var.correction",
    "std.correction",
    "tril.default",
    "triu.default",
    "linear.default",
    "addmm.default",
)


def decomposition_table() -> dict:
    """torch's default export decompositions minus the composites we keep (names missing from an older
    torch are skipped, so the table works across versions)."""
    table = torch.export.default_decompositions()
    for name in KEPT_COMPOSITES:
        packet_name, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet_name, None), overload, None)
        if op is not None and op in table:
            del table[op]
    return table


def export_problem(
    problem: Problem, seed: int = DEFAULT_SEED, decompose: bool | None = None
) -> tuple[torch.export.ExportedProgram, torch.nn.Module, list]:
    """The problem's model exported on fake tensors and decomposed, with the fake model and the
    arguments it was traced with (scalars are real; tensors fake). `decompose=None` decomposes only when
    the export holds an op the lowering table does not know (see `needs_decomposition`). Python values the
    constructor computes (`self.scale = float(...)`) are baked into the graph as consts: the model is
    built with the same default seed as `Problem.build_model`."""
    model, inputs = _build_fake(problem, seed)
    _check_arguments(problem, inputs)
    try:
        with _quiet_torch():
            program = torch.export.export(model, tuple(inputs), strict=False)
            if decompose or (decompose is None and needs_decomposition(program)):
                program = program.run_decompositions(decomposition_table())
    except Exception as exc:  # torch raises many types here; each becomes one clear message
        raise CaptureError(
            f"{problem.id}: torch.export cannot capture Model.forward: {explain_export_error(exc)}"
        ) from exc
    return program, model, inputs


@contextlib.contextmanager
def _quiet_torch() -> Iterator[None]:
    """Silence what torch.export writes itself: pytree deprecation notices, symbolic-shape warnings, the
    partial graph it prints to stderr on failure and fake-tensor tracebacks. Failures still surface, as one
    CaptureError message."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore", FutureWarning)
            for logger in loggers:
                logger.setLevel(logging.CRITICAL)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# fake_tensor logs the traceback of an op that fails on fake tensors (a shape error in forward) at ERROR
_NOISY_LOGGERS = ("torch.fx.experimental.symbolic_shapes", "torch.export", "torch._export.non_strict_utils",
                  "torch._subclasses.fake_tensor")


def needs_decomposition(program: torch.export.ExportedProgram) -> bool:
    """Whether the export holds ops outside the lowering table (composites such as matmul, in-place
    updates such as BatchNorm's). If not, decomposing would give the same graph: skipping it saves
    `run_decompositions`' fixed cost (~1 s: it scans every composite op torch registers)."""
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            name = str(node.target)
            if name not in LOWERINGS and name not in IGNORED_OPS:
                return True
    return False


def _build_fake(problem: Problem, seed: int) -> tuple[torch.nn.Module, list]:
    """The model and its arguments on fake tensors. A constructor that reads tensor values (e.g.
    `float(torch.randn(1))`) cannot run on fake tensors: that model is built for real (its parameters take
    memory), and its arguments stay fake."""
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with fake_mode:
            model = problem.build_model(seed)
    except KernelwrightError:
        try:
            model = problem.build_model(seed)
        except ProblemLoadError:
            raise  # the constructor fails on real tensors too: the problem's error, not capture's
        except KernelwrightError as exc:
            raise CaptureError(f"{problem.id}: cannot build the model: {exc}") from exc
    try:
        with fake_mode:
            inputs = problem.inputs(seed)
    except ProblemInputsError:
        raise  # wrong on any tensors, fake or not: the problem's error, not capture's
    except KernelwrightError as exc:
        problem.inputs(seed)  # raises if get_inputs() fails on real tensors too: the problem's error
        raise CaptureError(f"{problem.id}: cannot build the inputs on fake tensors: {exc}") from exc
    return model, inputs


def _check_arguments(problem: Problem, inputs: list) -> None:
    for index, value in enumerate(inputs):
        if isinstance(value, (list, tuple, dict)):
            raise CaptureError(
                f"{problem.id}: forward argument {index} is a {type(value).__name__}; capture "
                "supports tensors and Python scalars as arguments"
            )


def explain_export_error(exc: BaseException) -> str:
    """The first meaningful line of an export failure, with the kind of problem named."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    name = type(exc).__name__
    lowered = text.lower()
    if "data-dependent" in lowered or "guardondatadependent" in name.lower() or "could not guard" in lowered:
        kind = "data-dependent control flow or shape"
    elif "unsupported" in lowered or "not supported" in lowered:
        kind = "unsupported construct"
    else:
        kind = name
    return f"{kind} ({first[:300]})"
