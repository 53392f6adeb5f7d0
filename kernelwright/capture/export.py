"""Run torch.export on a problem's model, on fake tensors, and decompose to the IR's op set.

Fake tensors carry shapes and dtypes but no data, so even full-size problems export without allocating
their inputs or weights. The model keeps its own training/eval mode: a fresh `nn.Module` is in training
mode, and BatchNorm then normalizes with batch statistics and updates its running stats; export records
those updates as buffer mutations, which become `graph.mutations`.
"""

from __future__ import annotations

import warnings

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernelwright.errors import CaptureError, KernelwrightError
from kernelwright.problem import Problem

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
    problem: Problem, seed: int = 0
) -> tuple[torch.export.ExportedProgram, torch.nn.Module, list]:
    """The problem's model exported on fake tensors and decomposed, with the fake model and the
    arguments it was traced with (scalars are real; tensors fake)."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        try:
            model = problem.build_model(seed)
            inputs = problem.inputs(seed)
        except KernelwrightError as exc:
            raise CaptureError(f"{problem.id}: cannot build the model on fake tensors: {exc}") from exc
    _check_arguments(problem, inputs)
    try:
        with warnings.catch_warnings():
            # torch's own pytree deprecation notices (torch internals, not the user's model).
            warnings.simplefilter("ignore", FutureWarning)
            program = torch.export.export(model, tuple(inputs), strict=False)
            program = program.run_decompositions(decomposition_table())
    except Exception as exc:  # torch raises many types here; each becomes one clear message
        raise CaptureError(
            f"{problem.id}: torch.export cannot capture Model.forward: {explain_export_error(exc)}; "
            "the original forward will be used as a whole"
        ) from exc
    return program, model, inputs


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
