"""`kernelwright optimize` on the CPU: emits, compile-checks the CUDA part, says verification was skipped;
falls back to Model's forward when capture fails."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from kernelwright.cli import main
from kernelwright.compiler import optimize
from kernelwright.environment import nvcc_path
from kernelwright.problem import load_problem, load_shrunk

UNCAPTURABLE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:          # data-dependent control flow: torch.export cannot trace it
            return torch.relu(x)
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def test_optimize_cli_without_gpu(tmp_path, capsys):
    output = tmp_path / "relu_new.py"
    assert main(["optimize", "level1/01_ReLU", "-o", str(output), "--explain"]) == 0
    captured = capsys.readouterr()
    assert "verification skipped" in captured.err and "no CUDA GPU" in captured.err
    assert ("nvcc check" in captured.err) == (nvcc_path() is not None)
    assert "fusion plan" in captured.out and "kernel[pointwise]" in captured.out
    source = output.read_text()
    assert "NOT verified" in source and "class ModelNew(Model):" in source


def test_the_profile_tells_what_came_out(tmp_path):
    """`--profile`'s outcome: the layout, replay, the kernels by family, what fell back and the notes; a
    whole-model fallback has no kernels and says why."""
    import json

    profile = tmp_path / "profile.json"
    assert main(["optimize", "level1/01_ReLU", "-o", str(tmp_path / "relu_new.py"), "--profile",
                 str(profile)]) == 0
    outcome = json.loads(profile.read_text())["outcome"]
    assert outcome["layout"] == "nchw" and outcome["replay"] is False and outcome["fallback"] is None
    assert outcome["kernels"] == {"pointwise": 1} and outcome["dropped"] == []
    assert isinstance(outcome["notes"], list)
    path = tmp_path / "branchy.py"
    path.write_text(UNCAPTURABLE)
    outcome = optimize(load_problem(path)).profile()["outcome"]
    assert outcome["fallback"].startswith("capture failed") and outcome["kernels"] == {}


def test_capture_failure_gives_the_whole_model_fallback(tmp_path):
    path = tmp_path / "branchy.py"
    path.write_text(UNCAPTURABLE)
    problem = load_problem(path)
    stages = []
    result = optimize(problem, on_stage=lambda stage, event, detail, seconds: stages.append((stage, event)))
    assert result.fallback_reason.startswith("capture failed")
    assert stages == [("capture", "start"), ("capture", "fail")]
    module = types.ModuleType("emitted")
    exec(compile(result.source, "branchy_new.py", "exec"), module.__dict__)
    x = torch.randn(4, 8)
    torch.testing.assert_close(module.ModelNew()(x), module.Model()(x))
    first_lines = result.source.splitlines()[:3]
    assert first_lines[1] == "# no custom kernel in this file: ModelNew runs Model's own forward"
    assert first_lines[2].startswith("# whole-model fallback: capture failed: ")
    assert "data-dependent" in first_lines[2]


def test_optimize_cli_shows_a_failed_capture_as_a_failed_step(tmp_path, capsys):
    path = tmp_path / "branchy.py"
    path.write_text(UNCAPTURABLE)
    output = tmp_path / "new.py"
    assert main(["optimize", str(path), "-o", str(output)]) == 0
    err = capsys.readouterr().err
    assert "✓ capture" not in err
    failed = next(line for line in err.splitlines() if "✗ capture" in line)
    assert "data-dependent" in failed and "as a whole" not in failed
    assert "whole-model fallback: capture failed" in err
    assert "# whole-model fallback: capture failed" in output.read_text()


def test_output_may_not_overwrite_the_problem(tmp_path):
    path = tmp_path / "p.py"
    path.write_text(UNCAPTURABLE)
    assert main(["optimize", str(path), "-o", str(path)]) == 2


def test_derived_weights_alone_are_worth_emitting(tmp_path):
    """level2/03 rewrites to a GEMV on a reduced weight: no kernel is left per call, yet the file is
    emitted (the reduced weight is computed per call by ATen), runs without a GPU and follows weight
    changes."""
    problem = load_shrunk("level2/03_GemmDivideSumScale")
    result = optimize(problem)
    assert result.fallback_reason is None and not result.plan.groups and result.plan.derived
    assert "derived weights: 1 value(s)" in result.source and "load_inline" not in result.source
    module = types.ModuleType("emitted")
    exec(compile(result.source, str(tmp_path / "new.py"), "exec"), module.__dict__)
    model = problem.build_model(3)
    new = problem.build_model(3, model_class=module.ModelNew)
    inputs = problem.inputs(5)
    for seed in (3, 4):
        state = problem.build_model(seed).state_dict()
        model.load_state_dict(state)
        new.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(new(*inputs), model(*inputs), rtol=1e-4, atol=1e-4)
    assert list(new.state_dict()) == list(model.state_dict())


def test_channels_last_layout_runs_the_convolutions_on_nhwc_data(tmp_path, monkeypatch):
    """`layout="channels_last"` (what `auto` keeps on a GPU when it judges faster): the emitted plan runs the
    convolution on NHWC data with the bias and softmax over channels after it, and computes Model's values."""
    monkeypatch.setattr("kernelwright.compiler.nvcc_path", lambda: None)   # the plan is under test, not nvcc
    from kernelwright.compiler import OptimizeOptions
    from kernelwright.verify.execute import execute_plan

    problem = load_shrunk("level2/21_Conv2dBiasSoftmaxChannels")
    result = optimize(problem, OptimizeOptions(layout="channels_last"))
    assert result.layout == "channels_last" and result.fallback_reason is None
    conv = next(n for n in result.graph.nodes() if n.op == "conv")
    assert conv.attr("channels_last") and not conv.attr("has_bias")
    softmax = next(n for n in result.graph.nodes() if n.op == "softmax")
    assert softmax.attr("dim") == 3                       # over the contiguous channel dim
    assert "memory_format=torch.channels_last" in result.source
    model = problem.build_model(0)
    inputs = problem.inputs(0)
    outputs, _, _ = execute_plan(result.plan, inputs, model)
    torch.testing.assert_close(outputs[0], model(*inputs), rtol=1e-5, atol=1e-5)
    # without a GPU to measure on, `auto` keeps NCHW and says so
    auto = optimize(problem)
    assert auto.layout == "nchw" and any("layout: NCHW" in note for note in auto.notes)


def test_output_paths_are_checked_before_any_work(tmp_path):
    """An existing file is kept unless --force; a missing folder or a directory as -o is a one-line error
    before capture runs; --output-dir names the file after the problem."""
    problem = tmp_path / "branchy.py"
    problem.write_text(UNCAPTURABLE)

    def optimize_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kernelwright.cli", "optimize", str(problem), *args],
                              capture_output=True, text=True, timeout=300)

    keep = tmp_path / "keep.py"
    keep.write_text("mine")
    result = optimize_cli("-o", str(keep))
    assert result.returncode == 2 and keep.read_text() == "mine"
    assert result.stderr.strip() == f"error: -o {keep}: the file exists; add --force to overwrite it"
    for bad, why in ((tmp_path / "no_such_dir" / "x.py", "the folder"), (tmp_path, "is a directory")):
        result = optimize_cli("-o", str(bad))
        assert result.returncode == 2 and why in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "capture" not in result.stderr
    assert optimize_cli("-o", str(keep), "--force").returncode == 0
    assert "class ModelNew(Model)" in keep.read_text()
    assert optimize_cli("--output-dir", str(tmp_path / "out")).returncode == 0
    assert (tmp_path / "out" / "branchy_new.py").is_file()
    result = optimize_cli("--output-dir", str(keep))
    assert result.returncode == 2 and "not a directory" in result.stderr
    # a folder that cannot be made although its parent looks writable (root may write /proc, not mkdir in it)
    result = optimize_cli("--output-dir", "/proc/kernelwright_out")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_measured_launch_alternative_replaces_the_planners_launch(monkeypatch):
    """lower() renders the planner's launch of a cluster-cached reduction and its alternatives (uncached,
    persistent); measure() keeps the one the measurement says is fastest: the plan's group, the called
    kernel and a note change together, and the losing kernels stay built (the verified extension)."""
    from pathlib import Path
    from types import SimpleNamespace

    from kernelwright import compiler, verify
    from kernelwright.verify.measure import GroupReport

    sys.path.insert(0, str(Path(__file__).parent / "codegen"))
    from reduction_cases import log_softmax_divergence

    graph = log_softmax_divergence((64, 81920), row_sums=True)
    pipeline = compiler._Pipeline(SimpleNamespace(), compiler.DEFAULT_OPTIONS, None)
    variant = pipeline.lower(compiler.Variant("nchw", graph))
    ((group, other, other_kernel), (same, walking, _)) = variant.alternatives
    assert group.config[0].cache and not other.config[0].cache
    assert same is group and walking.config[0].persistent
    (kernel,) = [k for g, k in zip(variant.plan.groups, variant.kernels, strict=True) if g is group]
    variant = compiler.replace(variant, built=(*variant.kernels, other_kernel),
                               build=SimpleNamespace(module=None))

    def measured(plan, kernels, module, problem, seeds, alternatives):
        assert [alternative for alternative, _ in alternatives[id(group)]] == [other, walking]
        return [GroupReport(other_kernel.name, True, "launches tried: ...", 3.9, 18.0, choice=1,
                            tried=((kernel.name, 6.0), (other_kernel.name, 3.9)))
                if g is group else GroupReport(k.name, True, "", 1.0, 2.0)
                for g, k in zip(plan.groups, kernels, strict=True)]

    monkeypatch.setattr(verify, "measure_groups", measured)
    kept = pipeline.measure(variant)
    assert other in kept.plan.groups and group not in kept.plan.groups
    assert other_kernel in kept.kernels and kernel not in kept.kernels and kernel in kept.built
    assert any(other_kernel.name in note and "fastest" in note for note in pipeline.result.notes)


def test_an_alternative_the_renderer_makes_the_planners_kernel_is_not_built(monkeypatch):
    """An alternative launch whose code is the planner's but for its name (a persistent form of rows the
    renderer does not walk: shifted, 16383 long) is neither built nor measured; one that differs is."""
    import dataclasses
    from types import SimpleNamespace

    from kernelwright import compiler
    from kernelwright.ir.graph import Graph
    from kernelwright.ir.ops import input_node, make_node

    x = input_node("x", 0, (64, 16383))
    graph = Graph(inputs=(x,), params=(), outputs=(make_node("softmax", [x], dim=-1),))
    pipeline = compiler._Pipeline(SimpleNamespace(), compiler.DEFAULT_OPTIONS, None)
    variant = pipeline.lower(compiler.Variant("nchw", graph))
    (group,) = variant.plan.groups
    assert group.config[0].cache and group.config[0].vec == 4
    walking = dataclasses.replace(group, config=(dataclasses.replace(group.config[0], persistent=True),))
    rolled = dataclasses.replace(group, config=(dataclasses.replace(group.config[0], full_unroll=False),))
    monkeypatch.setattr(compiler, "launch_alternatives", lambda g: [walking, rolled])
    assert [other for _, other, _ in pipeline.alternatives(variant.plan, variant.kernels)] == [rolled]


def _linear_softmax_variant(pipeline):
    """A lowered variant with a GEMM group (linear + GELU) and a reduction group (softmax after it)."""
    from kernelwright import compiler
    from kernelwright.ir.graph import Graph
    from kernelwright.ir.ops import input_node, make_node, param_node

    x, w, b = input_node("x", 0, (1024, 1024)), param_node("w", (1024, 1024)), param_node("b", (1024,))
    y = make_node("softmax", [make_node("gelu", [make_node("linear", [x, w, b])], approximate="none")],
                  dim=-1)
    variant = pipeline.lower(compiler.Variant("nchw", Graph(inputs=(x,), params=(w, b), outputs=(y,))))
    assert {g.family for g in variant.plan.groups} == {"gemm", "reduction"}
    return variant


def test_a_mismatch_is_retried_a_family_at_a_time_with_aten_before_the_whole_model_fallback(monkeypatch):
    """The judge rejects the file with our GEMM (mismatch): the same plan with ATen's GEMM is judged next and
    emitted, its header naming the dropped GEMM kernel and the rejection. Where that is rejected too, the
    plan with ATen's softmax (our GEMM kept) is judged; where every retry is rejected, or the rejection is
    not about values, the whole-model fallback. With two variants, the retry is of the one whose values
    were wrong (the other was merely slower)."""
    import threading
    from types import SimpleNamespace

    from kernelwright import compiler

    def run(verdict_of, layouts=("nchw",)):
        pipeline = compiler._Pipeline(SimpleNamespace(), compiler.DEFAULT_OPTIONS, None)
        variants = [compiler.replace(_linear_softmax_variant(pipeline), layout=layout) for layout in layouts]
        judged, emitted = [], []
        monkeypatch.setattr(pipeline, "build_all", lambda variants: variants)
        monkeypatch.setattr(pipeline, "rank", lambda variants: variants)
        monkeypatch.setattr(pipeline, "replay", lambda v: v)

        def judge(v):
            judged.append(v)
            return verdict_of(v)

        monkeypatch.setattr(pipeline, "judge", judge)
        monkeypatch.setattr(pipeline, "emit", lambda v, verification: emitted.append(v) or pipeline.result)
        monkeypatch.setattr(pipeline, "fallback", lambda reason, v=None: ("fallback", reason))
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "GPU")
        pipeline.judge_starting = threading.Thread(target=lambda: None)
        pipeline.judge_starting.start()
        return pipeline, variants[0], judged, emitted, pipeline.verify(variants)

    mismatch = {"status": "mismatch", "detail": "trial 5 (scale1000): 5 values off"}
    correct = {"status": "correct", "detail": "", "speedup_vs_eager": 1.2}

    def without_gemm_passes(v):
        return mismatch if any(g.family == "gemm" for g in v.plan.groups) else correct

    pipeline, variant, judged, emitted, result = run(without_gemm_passes)
    assert result is pipeline.result and len(judged) == 2 and emitted == [judged[1]]
    (kept,) = emitted
    assert [g.family for g in kept.plan.groups] == ["reduction"] and len(kept.kernels) == 1
    (gemm_kernel,) = [k for g, k in zip(variant.plan.groups, variant.kernels, strict=True)
                      if g.family == "gemm"]
    assert any(d.startswith(gemm_kernel.name) and "wrong values" in d for d in kept.dropped)
    assert gemm_kernel in kept.built and not kept.replay
    assert any("retried with ATen's GEMMs" in note for note in pipeline.result.notes)
    # the rejection is told once, in the kept file's list of rejected files
    assert sum("scale1000" in note for note in pipeline.result.notes) == 1
    assert any(note.startswith("kept after the judge rejected: ") and "scale1000" in note
               for note in pipeline.result.notes)

    def only_our_gemm_passes(v):
        return mismatch if any(g.family == "reduction" for g in v.plan.groups) else correct

    pipeline, variant, judged, emitted, result = run(only_our_gemm_passes)
    assert result is pipeline.result and len(judged) == 3 and emitted == [judged[2]]
    assert [g.family for g in judged[1].plan.groups] == ["reduction"]
    assert [g.family for g in emitted[0].plan.groups] == ["gemm"]
    # the kept file's header says what it retried with, and names each rejected file
    assert [n for n in pipeline.result.notes if n.startswith("retried")] == [
        "retried with ATen's reductions and norms: the judge found wrong values with ours"]
    (kept_after,) = [n for n in pipeline.result.notes if n.startswith("kept after the judge rejected: ")]
    assert "the judge found the compiled file mismatch" in kept_after
    assert "the judge found the compiled file with ATen's GEMMs mismatch" in kept_after

    pipeline, _, judged, emitted, result = run(lambda v: mismatch)
    assert result[0] == "fallback" and len(judged) == 3 and not emitted and result[1].count("mismatch") == 3
    assert "with ATen's reductions and norms mismatch" in result[1]
    assert not any(n.startswith("retried") for n in pipeline.result.notes)

    _, _, judged, emitted, result = run(lambda v: {"status": "error", "detail": "CUDA error"})
    assert result[0] == "fallback" and len(judged) == 1 and not emitted

    slow = {"status": "correct", "detail": "", "speedup_vs_eager": 0.5}

    def first_slow_second_wrong(v):
        if v.layout == "nchw":
            return slow
        has_gemm = any(g.family == "gemm" for g in v.plan.groups)
        return {"status": "nan", "detail": "inf"} if has_gemm else correct

    pipeline, _, judged, emitted, result = run(first_slow_second_wrong, ("nchw", "channels_last"))
    assert [v.layout for v in judged] == ["nchw", "channels_last", "channels_last"]
    assert emitted == [judged[2]] and [g.family for g in judged[2].plan.groups] == ["reduction"]
    # The kept file's header says why the files judged before it were not kept, naming their layouts.
    (kept_after,) = [n for n in pipeline.result.notes if n.startswith("kept after the judge rejected: ")]
    assert "the compiled nchw file was slower than eager" in kept_after
    assert "the judge found the compiled channels_last file nan: inf" in kept_after

    # A slower file's rejection (the fallback header's reason) shows the two times it was judged on.
    slow["timings"] = {"candidate": {"median_ms": 2.0}, "eager": {"median_ms": 1.0}}
    _, _, _, _, result = run(lambda v: slow)
    assert result == ("fallback",
                      "the compiled file was slower than eager: 0.50x vs eager (2.000 ms vs 1.000 ms)")
    slow["timings"]["candidate"]["wall_median_ms"] = 2.5  # events and wall clock disagree: the wall counts
    slow.update(flags={"timing_disagreement": True}, speedup_vs_eager=0.4)
    _, _, _, _, result = run(lambda v: slow)
    assert result[1].endswith("0.40x vs eager (2.500 ms wall clock vs 1.000 ms)")


def test_our_convolutions_are_a_variant_of_their_own(monkeypatch):
    """The channels-last plan with our conv kernel and the same layout planned without it (cuDNN's
    convolutions) are judged as two variants: wrong values from ours keep the cuDNN plan; a conv variant
    whose conv kernel lost to ATen is not judged at all (its file would build CUTLASS for nothing)."""
    import threading
    from pathlib import Path
    from types import SimpleNamespace

    import kernelwright.fuse.conv as fuse_conv
    from kernelwright import compiler

    monkeypatch.setattr(fuse_conv, "cutlass_include_dir", lambda: Path("/cutlass/include"))
    monkeypatch.setattr(fuse_conv, "hopper_gpu", lambda: True)
    sys.path.insert(0, str(Path(__file__).parent / "fuse"))
    from test_conv_match import conv_chain

    def run(verdict_of, drop_conv=False):
        options = compiler.OptimizeOptions(conv_kernels=True)
        pipeline = compiler._Pipeline(SimpleNamespace(), options, None)
        graph = conv_chain()
        ours = pipeline.lower(compiler.Variant("channels_last", graph))
        cudnn = pipeline.lower(compiler.Variant("channels_last", graph, families_off=("conv",)))
        assert [g.family for g in ours.plan.groups] == ["conv"] and ours.name == "channels_last+conv"
        assert "conv" not in {g.family for g in cudnn.plan.groups} and cudnn.name == "channels_last"
        if drop_conv:
            ours = ours.keep([], ours.plan.without(ours.plan.groups[0]), ["conv: slower than ATen"])
        judged, emitted = [], []
        monkeypatch.setattr(pipeline, "build_all", lambda variants: variants)
        ours_first = lambda variants: sorted(variants, key=lambda v: "+" not in v.name)  # noqa: E731
        monkeypatch.setattr(pipeline, "rank", ours_first)
        monkeypatch.setattr(pipeline, "replay", lambda v: v)
        monkeypatch.setattr(pipeline, "judge", lambda v: judged.append(v) or verdict_of(v))
        monkeypatch.setattr(pipeline, "emit", lambda v, verification: emitted.append(v) or pipeline.result)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "GPU")
        pipeline.judge_starting = threading.Thread(target=lambda: None)
        pipeline.judge_starting.start()
        pipeline.verify([cudnn, ours])
        return pipeline, judged, emitted

    def ours_wrong(v):
        if v.name.endswith("+conv"):
            return {"status": "mismatch", "detail": "TF32"}
        return {"status": "correct", "detail": "", "speedup_vs_eager": 1.3}

    pipeline, judged, emitted = run(ours_wrong)
    assert [v.name for v in judged] == ["channels_last+conv", "channels_last"] and emitted == [judged[1]]
    assert any("the compiled channels_last+conv file mismatch" in n for n in pipeline.result.notes)
    _, judged, emitted = run(ours_wrong, drop_conv=True)
    assert [v.name for v in judged] == ["channels_last"] and emitted == judged

    # the TF32 note is said in the header of a file with our convolutions, once however often such a file is
    # emitted (timed, judged, kept), and never in the cuDNN plan's
    pipeline, (ours, cudnn), _ = run(ours_wrong)
    pipeline.problem.id = "p"
    for _ in range(3):
        notes = pipeline.info(ours, "verified").notes
    assert sum("TF32 tensor cores" in note for note in notes) == 1
    assert not any("TF32 tensor cores" in note for note in pipeline.info(cudnn, "verified").notes)


def test_the_judge_starts_before_capture_and_is_closed_whatever_happens(monkeypatch):
    """On a GPU the judge's processes start first (they load while we capture and build) and are closed
    when the pipeline ends, also when a stage raises."""
    import threading
    from types import SimpleNamespace

    from kernelwright import compiler

    events = []

    class FakeJudge:
        def __init__(self, path, options):
            events.append("judge")

        def prepare(self):
            events.append("prepare")

        def stop_loading(self):
            events.append("stop")

        def close(self):
            events.append("close")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("kernelwright.judge.Judge", FakeJudge)
    pipeline = compiler._Pipeline(SimpleNamespace(path="p.py"), compiler.DEFAULT_OPTIONS, None)

    def stages(measured):
        assert measured and isinstance(pipeline.judge_starting, threading.Thread)
        events.append("capture")
        raise RuntimeError("a stage failed")

    monkeypatch.setattr(pipeline, "stages_to_emit", stages)
    with pytest.raises(RuntimeError):
        pipeline.run()
    assert events[0] == "judge" and events[-2:] == ["stop", "close"]
    assert set(events) == {"judge", "prepare", "capture", "stop", "close"}
    assert pipeline.judge_session is None


def test_replay_is_timed_in_alternating_rounds_and_judged_by_their_ratios():
    """One disturbed series (a replay of a tiny ResNet read 2.2 ms beside another task where it runs
    0.5-0.7) is outvoted by the other rounds' ratios; a slow host episode over a whole round cancels in
    its ratio; the rounds take turns going first."""
    from kernelwright.compiler import REPLAY_ROUNDS, _alternating_ms

    calls = []
    series = iter([2.0, 0.5,      # round 0: step first
                   1.1, 2.4,      # round 1: replay first, its series disturbed
                   4.0, 1.0])     # round 2: a slow episode over both

    def timed(replay):
        calls.append(replay)
        return next(series)

    step_ms, replay_ms = _alternating_ms(timed)
    assert REPLAY_ROUNDS == 3 and calls == [False, True, True, False, False, True]
    # round 1's pair is (step 2.4, replay 1.1): ratios 4.0, 2.18, 4.0 -> median 4.0; step median 2.4
    assert step_ms == 2.4 and replay_ms == pytest.approx(0.6)
    calls.clear()
    series = iter([40.0, 39.9])   # a long forward: one round
    assert _alternating_ms(timed) == pytest.approx((40.0, 39.9)) and calls == [False, True]
