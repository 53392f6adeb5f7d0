"""The pipeline of `kernelwright optimize` (docs/architecture.md):

    capture → rewrite → plan → render → [no GPU: nvcc check] → emit
                                      → [GPU: build → measure groups → drop losers] → emit → judge

A graph with 2-D/3-D convolutions is compiled twice on a GPU: as captured (NCHW) and after the
channels-last layout pass (`rewrite/layout.py`, `OptimizeOptions.layout`); the faster judged file is kept.

Every stage reports to a callback (the CLI's progress display). Whatever goes wrong with a kernel costs
only that kernel (its group falls back to ATen); whatever cannot be fixed that way (capture fails, no
kernel survives, the judge rejects the file or finds it slower than eager) gives the whole-model
fallback, a ModelNew that keeps Model's forward. So the emitted file is never incorrect or slower than
eager beyond noise, when verified.

Derived weights (parameter-only subgraphs a rewrite leaves, `rewrite.hoistable_nodes`) are planned apart
from the per-call steps and computed once by the emitted module. They are a gain of their own (the
GEMM → GEMV rewrite leaves a per-call matrix-vector product and a reduced weight), so a plan that has them
is emitted and judged even when no kernel survives.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelwright.codegen.binding import assemble
from kernelwright.codegen.build import BuildError, CompileCheck, build_extension, nvcc_check
from kernelwright.codegen.kernel import KernelSource
from kernelwright.codegen.registry import render_group
from kernelwright.emit import EmitInfo, emit_fallback, emit_module
from kernelwright.environment import cache_dir, nvcc_path
from kernelwright.errors import CaptureError
from kernelwright.fuse.plan import FusedGroup, FusionPlan, plan_fusion
from kernelwright.ir.graph import Graph, Node
from kernelwright.problem import Problem

# The judged speedup must reach 1 / (1 + SPEED_NOISE): slower than that is "slower than eager".
SPEED_NOISE = 0.03

# (stage, "start" | "done" | "fail" | "skip", one-line detail, seconds when done or failed)
StageCallback = Callable[[str, str, str, "float | None"], None]


class StageNote(list):
    """What a stage's body reports: a one-line summary appended, and `failed` set when the stage did not
    do its work (the pipeline goes on, e.g. with the whole-model fallback)."""

    failed = False


@dataclass(frozen=True)
class OptimizeOptions:
    verify: bool = True                 # on a GPU: build, check each group, judge the file
    allow_tf32: bool = False            # recorded in the header; FP32 semantics unless set
    seeds: tuple[int, ...] = (0, 1, 2)  # per-group correctness checks
    judge_trials: int = 5
    # Convolutions: "auto" compiles both layouts on a GPU and keeps the faster verified file (without a GPU,
    # or with --no-verify, NCHW); "nchw" or "channels_last" forces one (rewrite/layout.py).
    layout: str = "auto"


@dataclass
class OptimizeResult:
    source: str
    verification: str
    graph: Graph | None = None
    rewrite_log: Any = None
    plan: FusionPlan | None = None
    fallback_reason: str | None = None
    compile_check: CompileCheck | None = None
    build_seconds: float | None = None
    group_reports: list = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)       # "kernel or group: why it fell back to ATen"
    verdict: dict | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    layout: str = "nchw"                # the convolutions' layout in the emitted file
    notes: list[str] = field(default_factory=list)         # decisions worth a line in the header

    @property
    def speedup(self) -> float | None:
        """The judged speedup over eager of the emitted file (1.0 for the whole-model fallback)."""
        if self.fallback_reason:
            return 1.0
        if self.verdict and self.verdict.get("status") == "correct":
            return self.verdict.get("speedup_vs_eager")
        return None


class _Stages:
    def __init__(self, callback: StageCallback | None, result_seconds: dict[str, float]):
        self.callback = callback or (lambda stage, event, detail, seconds: None)
        self.seconds = result_seconds

    @contextmanager
    def run(self, stage: str) -> Iterator[StageNote]:
        """Times a stage; the body may append a one-line summary to the yielded note, or mark it failed."""
        detail = StageNote()
        self.callback(stage, "start", "", None)
        start = time.perf_counter()
        yield detail
        self.seconds[stage] = time.perf_counter() - start
        self.callback(stage, "fail" if detail.failed else "done", detail[0] if detail else "",
                      self.seconds[stage])

    def skip(self, stage: str, why: str) -> None:
        self.callback(stage, "skip", why, None)


def optimize(problem: Problem, options: OptimizeOptions = OptimizeOptions(),
             on_stage: StageCallback | None = None) -> OptimizeResult:
    return _Pipeline(problem, options, on_stage).run()


class _Pipeline:
    def __init__(self, problem: Problem, options: OptimizeOptions, on_stage: StageCallback | None):
        self.problem = problem
        self.options = options
        self.on_stage = on_stage
        self.result = OptimizeResult(source="", verification="")
        self.stages = _Stages(on_stage, self.result.stage_seconds)
        self.last_emit: tuple | None = None    # how `result.source` was made, to redo it with more notes

    def run(self) -> OptimizeResult:
        result, stages = self.result, self.stages
        with stages.run("capture") as note:
            from kernelwright.capture import capture

            try:
                result.graph = capture(self.problem)
                note.append(f"{sum(not n.is_leaf for n in result.graph.nodes())} nodes")
            except CaptureError as exc:
                note.append(f"capture failed: {exc}")
                note.failed = True
        if note.failed:
            return self.fallback(note[0])
        with stages.run("rewrite") as note:
            result.graph, result.rewrite_log, derived = _rewrite(result.graph)
            note.append(f"{len(result.rewrite_log.events)} rewrites" if result.rewrite_log else "skipped")
        return self.choose_layout(derived)

    def choose_layout(self, derived: list[Node]) -> OptimizeResult:
        """Compile the rewritten graph; where it has convolutions, also (or instead) in channels-last
        layout, and keep the faster verified file."""
        from kernelwright.rewrite.layout import channels_last, has_layout_choice

        graph, options = self.result.graph, self.options
        choice = has_layout_choice(graph)
        measured = torch.cuda.is_available() and options.verify
        if not choice or options.layout == "nchw" or (options.layout == "auto" and not measured):
            if choice and options.layout == "auto":
                self.result.notes.append("layout: NCHW (the channels-last variant is only tried where it "
                                         "can be measured: on a GPU, verified)")
            return self.compile(derived)
        other = _Pipeline(self.problem, options, _prefixed(self.on_stage, "[channels-last] "))
        other.result.rewrite_log = self.result.rewrite_log
        with other.stages.run("layout") as note:
            try:
                other.result.graph, layout_log = channels_last(graph)
            except Exception as exc:  # a layout bug must cost the variant, not the problem
                note.append(f"failed: {type(exc).__name__}: {exc}")
                note.failed = True
                self.result.notes.append(f"layout: NCHW (the channels-last pass failed: "
                                         f"{type(exc).__name__}: {exc})")
                return self.compile(derived)
            other.result.layout = "channels_last"
            note.append(f"{len(layout_log.events)} rewrites")
        from kernelwright.rewrite import hoistable_nodes

        variant = other.compile(hoistable_nodes(other.result.graph))
        if options.layout == "channels_last":
            return variant
        base = self.compile(derived)
        ours, theirs = base.speedup, variant.speedup
        text = f"NCHW {_judged(base)}, channels-last {_judged(variant)}"
        winner = other if theirs is not None and (ours is None or theirs > ours) else self
        winner.result.notes.append(f"layout: {winner.result.layout} kept (judged vs eager: {text})")
        winner.redo_emit()
        return winner.result

    def compile(self, derived: list[Node]) -> OptimizeResult:
        """Plan, render, then build, measure and judge on a GPU (or compile-check without one): the stages
        after the rewrite, on `result.graph`."""
        result, stages = self.result, self.stages
        with stages.run("plan") as note:
            plan = plan_fusion(result.graph, derived=derived)
            aten_steps = len(plan.steps) - len(plan.groups)
            note.append(f"{len(plan.groups)} fused group(s), {aten_steps} ATen step(s)"
                        + (f", {len(plan.derived)} derived weight(s)" if plan.derived else ""))
        with stages.run("render") as note:
            plan, kernels = _render(plan, result.dropped)
            note.append(f"{len(kernels)} kernel(s)")
        result.plan = plan
        if not kernels and not plan.derived:
            return self.fallback("no fusable group: every op stays an ATen call")
        if not torch.cuda.is_available():
            return self.without_gpu(plan, kernels)
        if not self.options.verify:
            stages.skip("verify", "--no-verify")
            return self.emit(plan, kernels, "not verified (--no-verify)")
        return self.with_gpu(plan, kernels)

    def emit(self, plan: FusionPlan, kernels: list[KernelSource], verification: str) -> OptimizeResult:
        self.result.plan = plan
        self.result.verification = verification
        sources = assemble(kernels)
        self.result.source = emit_module(self.problem.source, self.info(verification), plan, sources)
        self.last_emit = (self.emit, (plan, kernels, verification))
        return self.result

    def fallback(self, reason: str) -> OptimizeResult:
        self.result.fallback_reason = reason
        self.result.verification = "not needed: ModelNew is Model"
        self.result.source = emit_fallback(self.problem.source, self.info(self.result.verification), reason)
        self.last_emit = (self.fallback, (reason,))
        return self.result

    def redo_emit(self) -> None:
        """Write `result.source` again (the same file, with the notes added since)."""
        if self.last_emit is not None:
            method, args = self.last_emit
            method(*args)

    def info(self, verification: str) -> EmitInfo:
        notes = (*self.result.notes, *(f"fell back to ATen: {d}" for d in self.result.dropped))
        return EmitInfo(self.problem.id, self.options.allow_tf32, verification, notes)

    def without_gpu(self, plan: FusionPlan, kernels: list[KernelSource]) -> OptimizeResult:
        if not kernels:
            self.stages.skip("nvcc check", "no kernels")
            checked = "no CUDA sources"
        elif nvcc_path() is None:
            self.stages.skip("nvcc check", "nvcc not found")
            checked = "CUDA sources not compile-checked (no nvcc)"
        else:
            with self.stages.run("nvcc check") as note:
                plan, kernels, check = _checked(plan, kernels, self.result.dropped)
                self.result.compile_check = check
                note.append(f"{'ok' if check.ok else 'failed'} in {check.seconds:.1f} s")
            if not kernels:
                return self.fallback("no generated kernel compiled")
            checked = "CUDA sources compile-checked with nvcc"
        self.stages.skip("verify", "no CUDA GPU")
        return self.emit(plan, kernels, f"NOT verified: no CUDA GPU where this was generated ({checked})")

    def with_gpu(self, plan: FusionPlan, kernels: list[KernelSource]) -> OptimizeResult:
        result = self.result
        if kernels:
            kept = self.build_and_measure(plan, kernels)
            if isinstance(kept, OptimizeResult):
                return kept
            plan, kernels = kept
        if not kernels and not plan.derived:
            return self.fallback("no kernel was both correct and faster than ATen")
        self.emit(plan, kernels, "being judged")
        with self.stages.run("judge") as note:
            result.verdict = _judge(self.problem, result.source, self.options)
            note.append(_verdict_line(result.verdict))
        verdict = result.verdict
        if verdict["status"] != "correct":
            return self.fallback(f"the judge found the compiled file {verdict['status']}: "
                                 f"{verdict['detail']}")
        speedup = verdict.get("speedup_vs_eager")
        if speedup is not None and speedup < 1 / (1 + SPEED_NOISE):
            return self.fallback(f"the compiled file was slower than eager ({speedup:.2f}x)")
        device = torch.cuda.get_device_name()
        return self.emit(plan, kernels, f"verified on {device}: {_verdict_line(verdict)}")

    def build_and_measure(self, plan: FusionPlan, kernels: list[KernelSource]
                          ) -> tuple[FusionPlan, list[KernelSource]] | OptimizeResult:
        """The plan and kernels that build and beat ATen (rebuilt without the others), or the fallback
        result when nothing builds."""
        from kernelwright.tune import measure_groups

        result = self.result
        with self.stages.run("build") as note:
            try:
                built = build_extension(assemble(kernels))
            except BuildError as first:
                # Find the kernels that do not compile (nvcc alone is fast), drop them, build once more.
                plan, kernels, _ = _checked(plan, kernels, result.dropped)
                if not kernels:
                    return self.fallback(f"build failed: {first}")
                try:
                    built = build_extension(assemble(kernels))
                except BuildError as second:
                    return self.fallback(f"build failed: {second}")
            result.build_seconds = built.seconds
            note.append(f"{built.name} in {built.seconds:.1f} s")
        with self.stages.run("measure") as note:
            reports = measure_groups(plan, kernels, built.module, self.problem, self.options.seeds)
            result.group_reports = reports
            for group, report in zip(list(plan.groups), reports, strict=True):
                if not report.keep:
                    why = report.detail if not report.correct else \
                        f"slower than ATen ({report.kernel_ms:.3f} ms vs {report.aten_ms:.3f} ms)"
                    result.dropped.append(f"{report.kernel}: {why}")
                    plan = plan.without(group)
            kernels = [k for k, r in zip(kernels, reports, strict=True) if r.keep]
            note.append(f"{len(kernels)} of {len(reports)} kernel(s) kept")
        if kernels and len(kernels) < len(reports):
            with self.stages.run("rebuild") as note:
                result.build_seconds = build_extension(assemble(kernels)).seconds
                note.append(f"{result.build_seconds:.1f} s")
        return plan, kernels


# ------------------------------------------------------------------------------------------- helpers


def _rewrite(graph: Graph) -> tuple[Graph, Any, list[Node]]:
    """The rewrite stage, when this checkout has one: (graph, log, roots of its derived weights)."""
    if importlib.util.find_spec("kernelwright.rewrite") is None:
        return graph, None, []
    from kernelwright.rewrite import hoistable_nodes, rewrite_graph

    graph, log = rewrite_graph(graph)
    return graph, log, hoistable_nodes(graph)


def _render(plan: FusionPlan, dropped: list[str]) -> tuple[FusionPlan, list[KernelSource]]:
    """Render every group; a group whose renderer fails falls back to ATen (the reason is kept)."""
    kernels = []
    for group in list(plan.groups):
        try:
            kernels.append(render_group(group))
        except Exception as exc:  # a renderer bug must cost one group, not the whole problem
            dropped.append(f"{_group_label(group)}: renderer failed: {type(exc).__name__}: {exc}")
            plan = plan.without(group)
    return plan, kernels


def _checked(plan: FusionPlan, kernels: list[KernelSource], dropped: list[str]
             ) -> tuple[FusionPlan, list[KernelSource], CompileCheck]:
    """nvcc on the whole CUDA unit; when it fails, on each kernel alone, dropping those that fail."""
    check = nvcc_check(assemble(kernels).cuda_text)
    if check.ok:
        return plan, kernels, check
    kept = []
    for group, kernel in zip(list(plan.groups), kernels, strict=True):
        alone = nvcc_check(assemble([kernel]).cuda_text)
        if alone.ok:
            kept.append(kernel)
        else:
            first_error = alone.log.splitlines()[0] if alone.log else "no log"
            dropped.append(f"{kernel.name}: does not compile: {first_error}")
            plan = plan.without(group)
    return plan, kept, check


def _judge(problem: Problem, source: str, options: OptimizeOptions) -> dict:
    from kernelwright.judge import JudgeOptions, evaluate

    folder = cache_dir() / "optimize"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=folder, delete=False) as handle:
        handle.write(source)
    try:
        # No torch.compile baseline: the decision is against eager, and compiling the reference costs
        # tens of seconds per problem.
        judge_options = JudgeOptions(trials=options.judge_trials, compile_baseline=False)
        return evaluate(problem.path, handle.name, judge_options)
    finally:
        Path(handle.name).unlink(missing_ok=True)


def _verdict_line(verdict: dict) -> str:
    if verdict["status"] != "correct":
        return f"{verdict['status']}: {verdict['detail']}"
    timings = verdict.get("timings") or {}
    speedup = verdict.get("speedup_vs_eager")
    ours, eager = (timings.get("candidate") or {}), (timings.get("eager") or {})
    text = f"correct on {len(verdict.get('trials', []))} trials"
    if speedup is not None:
        text += (f", {speedup:.2f}x vs eager ({ours.get('median_ms', float('nan')):.3f} ms vs "
                 f"{eager.get('median_ms', float('nan')):.3f} ms)")
    return text


def _judged(result: OptimizeResult) -> str:
    if result.fallback_reason:
        return "fell back to Model's forward"
    return f"{result.speedup:.2f}x" if result.speedup is not None else "not verified"


def _prefixed(callback: StageCallback | None, prefix: str) -> StageCallback | None:
    if callback is None:
        return None
    return lambda stage, event, detail, seconds: callback(prefix + stage, event, detail, seconds)


def _group_label(group: FusedGroup) -> str:
    return f"{group.family} group ({' -> '.join(n.op for n in group.nodes)})"
