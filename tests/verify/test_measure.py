"""The per-kernel correctness rule of `optimize` (verify/measure.py), on the CPU: the judge's tolerance
table first, then the float64 oracle for kernels more accurate than ATen's FP32."""

from __future__ import annotations

import torch

from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import input_node, make_node, param_node
from kernelwright.verify.execute import run_group_with_aten
from kernelwright.verify.measure import group_verdict

CPU = torch.device("cpu")


def _mm_group(m: int, k: int, n: int) -> FusedGroup:
    a, b = input_node("a", 0, (m, k)), input_node("b", 1, (k, n))
    y = make_node("mm", [a, b])
    return FusedGroup(family="gemm", nodes=(y,), inputs=(a, b), outputs=(y,))


def test_more_accurate_than_aten_is_accepted_by_the_oracle():
    torch.manual_seed(0)
    group = _mm_group(8, 1 << 16, 8)
    a, b = torch.randn(8, 1 << 16) * 3, torch.randn(1 << 16, 8) * 3
    (aten,) = run_group_with_aten(group, [a, b], CPU)
    exact = (a.double() @ b.double()).float()       # correctly rounded: as accurate as FP32 can be
    assert not torch.allclose(exact, aten, atol=1e-4, rtol=1e-4), "the case must miss the table"
    verdict = group_verdict(group, [a, b], [aten], [exact], "default", CPU)
    assert verdict["status"] == "correct" and "float64 oracle" in verdict["detail"]


def test_less_accurate_than_aten_still_fails():
    torch.manual_seed(0)
    group = _mm_group(8, 1 << 16, 8)
    a, b = torch.randn(8, 1 << 16) * 3, torch.randn(1 << 16, 8) * 3
    (aten,) = run_group_with_aten(group, [a, b], CPU)
    exact = a.double() @ b.double()
    aten_error = float((aten.double() - exact).abs().max())
    tf32_like = (exact + 10 * aten_error).float()      # ten times ATen's error, everywhere
    verdict = group_verdict(group, [a, b], [aten], [tf32_like], "default", CPU)
    assert verdict["status"] == "mismatch" and "float64 oracle" in verdict["detail"]


def test_within_the_table_needs_no_oracle():
    group = _mm_group(3, 5, 4)
    a, b = torch.randn(3, 5), torch.randn(5, 4)
    (aten,) = run_group_with_aten(group, [a, b], CPU)
    verdict = group_verdict(group, [a, b], [aten], [aten.clone()], "default", CPU)
    assert verdict["status"] == "correct" and verdict["detail"] == ""


def test_group_outputs_are_measured_in_the_layout_kernels_write():
    """A strided ATen value of a group output (CUDA group_norm's NCHW result behind an NHWC view) is
    handed to the kernels that read it dense, as the emitted forward will; graph inputs stay as given."""
    from kernelwright.verify.measure import _as_kernels_write

    x = input_node("x", 0, (2, 3, 4, 5))
    y = make_node("relu", [x])
    group = FusedGroup(family="pointwise", nodes=(y,), inputs=(x,), outputs=(y,))
    strided = torch.randn(2, 5, 3, 4).movedim(1, 3)
    values = {id(x): strided, id(y): strided.clone(memory_format=torch.preserve_format).movedim(0, 0)}
    assert not values[id(y)].is_contiguous()
    _as_kernels_write([group], values)
    assert values[id(y)].is_contiguous() and torch.equal(values[id(y)], strided)
    assert values[id(x)] is strided


def test_every_group_is_timed_under_one_hold_of_the_timing_lock(monkeypatch):
    """Each exclusive acquisition waits for other processes' GPU work to drain: one hold per variant."""
    import contextlib

    from kernelwright.verify import measure

    holds, order = [], []

    @contextlib.contextmanager
    def timing():
        holds.append("held")
        yield

    monkeypatch.setattr(measure, "gpu_timing", timing)
    monkeypatch.setattr(measure, "l2_flush_buffer", lambda device: None)
    monkeypatch.setattr(measure, "series_ms", lambda fn, runs, warmup, flush: [fn()] * runs if runs else [])
    pairs = {k: (lambda k=k: order.append(("ours", k)) or 1.0, lambda k=k: order.append(("aten", k)) or 2.0)
             for k in range(5)}
    assert measure.time_pairs(pairs) == {k: (1.0, 2.0) for k in range(5)}
    assert holds == ["held"] and len(order) == 10 * measure.PAIR_ROUNDS
    assert measure.time_pairs({}) == {} and holds == ["held"]
    # a group's further launches are timed without ATen again (measure_groups times it once per group)
    order.clear()
    assert measure.time_pairs({0: (lambda: order.append("ours") or 1.0, None)}) == {0: (1.0, None)}
    assert order == ["ours"] * measure.PAIR_ROUNDS


def test_pairs_are_warmed_then_timed_in_rounds_of_alternating_order(monkeypatch):
    """A drift over the timing (clocks, the host) must fall on both sides of a comparison alike: every
    callable is warmed up first, then each round reverses the order of the keys and of each key's two sides,
    an even number of rounds, and a time is the median of all rounds."""
    import contextlib

    from kernelwright.verify import measure

    order, warmed, clock = [], [], iter(range(1000))
    monkeypatch.setattr(measure, "gpu_timing", contextlib.nullcontext)
    monkeypatch.setattr(measure, "l2_flush_buffer", lambda device: None)

    def series(fn, runs, warmup, flush):
        if not runs:
            warmed.append(fn)
            return []
        assert len(warmed) == 4   # every callable warmed before the first timed series
        return [fn() + next(clock)]   # a slowly rising clock: the later a side is timed, the slower it looks

    monkeypatch.setattr(measure, "series_ms", series)
    pairs = {k: (lambda k=k: order.append(("ours", k)) or 0.0, lambda k=k: order.append(("aten", k)) or 0.0)
             for k in range(2)}
    times = measure.time_pairs(pairs)
    rounds = [order[i:i + 4] for i in range(0, len(order), 4)]
    assert len(rounds) == measure.PAIR_ROUNDS and measure.PAIR_ROUNDS % 2 == 0
    assert rounds[0] == [("ours", 0), ("aten", 0), ("ours", 1), ("aten", 1)]
    assert rounds[1] == [("aten", 1), ("ours", 1), ("aten", 0), ("ours", 0)] and rounds[2] == rounds[0]
    # the drift cancels: every side read 0-15 in pairs summing to 15, median 7.5
    assert times == {0: (7.5, 7.5), 1: (7.5, 7.5)}


def test_the_fastest_correct_launch_of_a_group_is_kept():
    """measure_groups' choice among a group's launches (the planner's first): the fastest correct one,
    each launch named with what sets it apart; the planner's failure reported when none is correct; one
    launch reports no alternatives."""
    import dataclasses
    from types import SimpleNamespace

    from kernelwright.fuse import gemm as fuse_gemm
    from kernelwright.verify.measure import _report

    a, b = input_node("a", 0, (512, 1024)), input_node("b", 1, (1024, 768))
    group, = fuse_gemm.match(Graph(inputs=(a, b), params=(), outputs=(make_node("mm", [a, b]),)), frozenset())
    configs = [fuse_gemm.GemmConfig(kernel="tf32x3"), fuse_gemm.GemmConfig(kernel="tf32x3", split_k=2),
               fuse_gemm.GemmConfig(kernel="sm90x3")]
    launches = [(dataclasses.replace(group, config=config), SimpleNamespace(name=name))
                for config, name in zip(configs, ("one", "two", "sm90"), strict=True)]
    report = _report(launches, [None, None, "seed 0: mismatch"], [6.0, 3.9, None], 18.0)
    assert (report.kernel, report.choice, report.kernel_ms, report.aten_ms) == ("two", 1, 3.9, 18.0)
    assert report.keep and report.tried == (("one", 6.0), ("two", 3.9), ("sm90", None))
    assert report.detail == ("launches tried: one (3xTF32 on cuBLAS, 1 chunk) 6.000 ms, two (3xTF32 on "
                             "cuBLAS, 2 chunks) 3.900 ms, sm90 (3xTF32 split in an SM90 kernel) incorrect")
    failed = _report(launches[:2], ["seed 1: nan", "seed 0: mismatch"], [None, None], None)
    assert not failed.correct and failed.kernel == "one" and failed.detail == "seed 1: nan"
    alone = _report(launches[:1], [None], [1.0], 2.0)
    assert alone.choice == 0 and alone.tried == () and alone.detail == ""


def test_a_launch_keeping_parameter_copies_must_be_clearly_faster_than_one_keeping_none():
    """The cuBLAS 3xTF32 route keeps a weight's split (three times the weight); a launch that keeps no copy
    wins unless the copying one is COPIES_MIN_GAIN faster."""
    import dataclasses
    from types import SimpleNamespace

    from kernelwright.codegen.gemm import render
    from kernelwright.fuse import gemm as fuse_gemm
    from kernelwright.verify.measure import COPIES_MIN_GAIN, _report, keeps_parameter_copies

    x, w = input_node("x", 0, (512, 1024)), param_node("fc.weight", (768, 1024))
    group, = fuse_gemm.match(Graph(inputs=(x,), params=(w,), outputs=(make_node("linear", [x, w]),)),
                             frozenset())
    cublas, sm90 = (dataclasses.replace(group, config=fuse_gemm.GemmConfig(kernel=kernel))
                    for kernel in ("tf32x3", "sm90x3"))
    kernels = [render(g) for g in (cublas, sm90)]
    assert keeps_parameter_copies(kernels[0]) and not keeps_parameter_copies(kernels[1])
    assert not keeps_parameter_copies(SimpleNamespace(name="k"))
    launches = list(zip((cublas, sm90), kernels, strict=True))
    close = _report(launches, [None, None], [1.0, 0.99 * COPIES_MIN_GAIN], 3.0)
    assert close.choice == 1 and close.kernel == kernels[1].name
    clear = _report(launches, [None, None], [1.0, 1.01 * COPIES_MIN_GAIN], 3.0)
    assert clear.choice == 0
    assert _report(launches, [None, "seed 0: mismatch"], [1.0, None], 3.0).choice == 0


def test_a_kernel_for_one_aten_op_must_not_be_slower_but_one_for_several_may_tie():
    """A group that ATen runs as one op (views aside) is kept only when its kernel is no slower than the
    timing's noise (SINGLE_OP_NOISE); one that replaces several ATen ops may be up to NOISE slower (the
    launches it saves)."""
    from types import SimpleNamespace

    from kernelwright.verify.measure import NOISE, SINGLE_OP_NOISE, _report

    x = input_node("x", 0, (64, 64))
    view = make_node("reshape", [x], shape=[4096])
    tanh = make_node("tanh", [view])
    lone = FusedGroup(family="pointwise", nodes=(view, tanh), inputs=(x,), outputs=(tanh,))
    scaled = make_node("sigmoid", [tanh])
    chain = FusedGroup(family="pointwise", nodes=(view, tanh, scaled), inputs=(x,), outputs=(scaled,))
    slightly_slower = 1.0 * (1 + NOISE / 2)
    for group, kept in ((lone, False), (chain, True)):
        report = _report([(group, SimpleNamespace(name="k"))], [None], [slightly_slower], 1.0)
        assert report.keep is kept
        within_noise = 1.0 + SINGLE_OP_NOISE / 2
        assert _report([(group, SimpleNamespace(name="k"))], [None], [within_noise], 1.0).keep
