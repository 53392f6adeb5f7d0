"""What the judge must not blame on a problem or a candidate: a model that cannot run in float64 (the oracle
re-check is skipped and the tolerance table stands), a reference out of memory (an environment failure),
a stale build lock left by a killed build; and how timing is reported (rounds in lockstep)."""

from __future__ import annotations

import itertools
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from kernelwright.errors import EnvironmentFailure, ProblemLoadError
from kernelwright.judge import Judge, evaluate, evaluate_reference
from kernelwright.judge.build import exclusive_build_dir
from kernelwright.judge.timing import MIN_ROUNDS, combine_rounds, paired_ratio, settled
from tests.judge.corpus import CPU_OPTIONS

# forward makes a float32 tensor of its own: the float64 copy of the model fails on it.
FLOAT32_INSIDE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        scale = torch.full((16, 16), 0.5, dtype=torch.float32)
        return self.linear(x) @ scale

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch

class ModelNew(Model):
    def forward(self, x):
        return super().forward(x) + OFFSET
'''

OUT_OF_MEMORY = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return []
'''


def _files(tmp_path: Path, offset: str) -> tuple[Path, Path]:
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(FLOAT32_INSIDE)
    candidate.write_text(FLOAT32_INSIDE + CANDIDATE.replace("OFFSET", offset))
    return problem, candidate


def test_a_model_that_cannot_run_in_float64_is_judged_by_the_table(tmp_path: Path):
    problem, candidate = _files(tmp_path, "1e-2")
    verdict = evaluate(problem, candidate, CPU_OPTIONS)
    assert verdict["status"] == "mismatch"
    assert "no float64 re-check: the model does not run in float64" in verdict["detail"]
    problem, candidate = _files(tmp_path, "0.0")
    assert evaluate(problem, candidate, CPU_OPTIONS)["status"] == "correct"


def test_a_reference_out_of_memory_is_an_environment_failure(tmp_path: Path):
    problem = tmp_path / "problem.py"
    problem.write_text(OUT_OF_MEMORY)
    with pytest.raises(EnvironmentFailure) as caught:
        evaluate_reference(problem, CPU_OPTIONS)
    assert caught.value.cause == "oom" and not isinstance(caught.value, ProblemLoadError)


def test_candidate_and_eager_are_timed_in_rounds(tmp_path: Path):
    problem, candidate = _files(tmp_path, "0.0")
    verdict = evaluate(problem, candidate, CPU_OPTIONS)
    timings = verdict["timings"]
    assert timings["candidate"]["rounds"] == timings["eager"]["rounds"] >= MIN_ROUNDS
    # the speedup is the median of the rounds' own ratios (each round's two series in lockstep turns)
    ours, eager = timings["candidate"]["round_medians_ms"], timings["eager"]["round_medians_ms"]
    ratios = [e / c for c, e in zip(ours, eager, strict=True)]
    assert verdict["speedup_vs_eager"] == pytest.approx(statistics.median(ratios), rel=1e-3)
    assert verdict["speedup_vs_eager_rounds"] == pytest.approx(ratios, rel=1e-3)
    assert verdict["speedup_vs_eager_spread"] >= 0
    assert set(verdict["memory"]) == {"reference_peak_bytes", "candidate_peak_bytes"}
    # where the time went: each trial's phases, summed in the profile beside the timing rounds'
    profile = verdict["profile"]
    assert all(set(t["seconds"]) >= {"reference_s", "candidate_s", "compare_s"} for t in verdict["trials"])
    assert profile["trials_candidate_s"] == pytest.approx(
        sum(t["seconds"]["candidate_s"] for t in verdict["trials"]), abs=1e-2)
    # each side's measure alone (timing.measure's own seconds, its waits for the other's turns left out)
    # within the rounds' wall time
    assert profile["timing_rounds_s"] > 0
    assert 0 <= profile["timing_candidate_measure_s"] + profile["timing_eager_measure_s"] \
        <= profile["timing_rounds_s"]


# Each run appends its process to a log shared by the judge's two processes.
LOGGED = """
import os
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        with open(LOG, "a") as log:
            log.write(f"{os.getpid()} {int(torch.is_grad_enabled())}\\n")
        time.sleep(0.0005)
        return x * 2

def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return []
"""


def _logged_files(tmp_path: Path, candidate_body: str = "\nclass ModelNew(Model):\n    pass\n"):
    """(problem, candidate, log): LOGGED as the problem, and as the candidate's base with `candidate_body`;
    every forward writes its process's pid to `log`."""
    log = tmp_path / "runs.log"
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(f"LOG = {str(log)!r}\n" + LOGGED)
    candidate.write_text(f"LOG = {str(log)!r}\n" + LOGGED + candidate_body)
    return problem, candidate, log


@pytest.fixture
def launch_bound(monkeypatch):
    """Every model taken as launch-bound (the CPU has no busy share to measure); the session module."""
    from kernelwright.judge import session
    from kernelwright.judge.judge import Judge

    monkeypatch.setattr(Judge, "measures_busy", lambda self: True)
    monkeypatch.setattr(session, "host_bound", lambda *measured: True)
    return session


def test_a_round_interleaves_the_two_sides_in_turns(tmp_path: Path):
    """Lockstep (judge/timing.py TURN_S): a round's series is split into turns that alternate between the
    candidate's process and eager's, so both see the host within milliseconds of each other. Here each
    round's 0.1 s makes about ten turns a side; timed as two series, a round would switch process twice."""
    from kernelwright.judge.timing import TURN_S

    problem, candidate, log = _logged_files(tmp_path)
    options = replace(CPU_OPTIONS, min_runs=10, min_time_s=1.0)
    verdict = evaluate(problem, candidate, options)
    assert verdict["status"] == "correct", verdict["detail"]
    rounds = verdict["timings"]["eager"]["rounds"]
    pids = [line.split()[0] for line in log.read_text().splitlines()]
    runs_in_a_row = [len(list(same)) for _, same in itertools.groupby(pids)]
    turns = round(options.min_time_s / 10 / TURN_S)
    assert len(set(pids)) == 2
    # many switches, each after a turn's runs (two processes running at once would switch every run or two)
    assert len(runs_in_a_row) > rounds * (2 * turns - 1), (runs_in_a_row, rounds)
    assert statistics.median(runs_in_a_row) >= 5, runs_in_a_row


def test_a_launch_bound_model_is_timed_in_fresh_pairs_of_processes(tmp_path: Path, monkeypatch, launch_bound):
    """A launch-bound model's time carries its process's own offset (up to 5-7% on lent H200s), the same in
    every round of a pair: such a model is timed again in fresh candidate and reference processes, and the
    speedup is the median of the pairs' own."""
    problem, candidate, log = _logged_files(tmp_path)
    options = replace(CPU_OPTIONS, process_pairs=3, run_timeout_s=600.0)
    verdict = evaluate(problem, candidate, options)
    assert verdict["status"] == "correct", verdict["detail"]
    assert not verdict["warnings"]
    pairs = verdict["speedup_vs_eager_pairs"]
    assert len(pairs) == 3
    assert verdict["speedup_vs_eager"] == pytest.approx(statistics.median(pairs), abs=1e-4)
    assert len({line.split()[0] for line in log.read_text().splitlines()}) == 6   # three processes a side
    assert verdict["timings"]["eager"]["rounds"] == len(verdict["speedup_vs_eager_rounds"]) >= 3 * MIN_ROUNDS
    assert verdict["profile"]["timing_pairs_s"] > 0
    # one pair where asked, or where nothing is launch-bound
    once = evaluate(problem, candidate, replace(options, process_pairs=1))
    assert "speedup_vs_eager_pairs" not in once and once["speedup_vs_eager"] is not None
    assert len(once["trials"]) == len(verdict["trials"])   # the fresh pairs' own trial is not listed
    # with too little of the run timeout left for another pair: one pair, and a warning saying why
    short = evaluate(problem, candidate, replace(options, run_timeout_s=25.0))
    assert short["status"] == "correct" and "speedup_vs_eager_pairs" not in short
    assert "of the run timeout left" in short["warnings"][-1]["message"]
    monkeypatch.setattr(launch_bound, "host_bound", lambda *measured: False)
    assert "speedup_vs_eager_pairs" not in evaluate(problem, candidate, CPU_OPTIONS)


def test_with_reserved_timing_cpus_only_quiet_pairs_count(tmp_path: Path, monkeypatch, launch_bound):
    """With reserved timing CPUs the first pair was timed beside builds on the other CPUs, which slows a
    launch-bound model's launches: it is left out, and `process_pairs` fresh pairs are timed quiet (no CPU
    work on the host: gpulock.py). Where none can be had, the first pair's speedup stands, with a warning."""
    import os

    from kernelwright import gpulock

    monkeypatch.setenv(gpulock.RESERVED_ENV, str(max(os.sched_getaffinity(0))))
    asked, real = [], gpulock.gpu_timing

    def recording(quiet: bool = False):
        asked.append(quiet)
        return real(quiet=quiet)

    monkeypatch.setattr(launch_bound, "gpu_timing", recording)
    problem, candidate, log = _logged_files(tmp_path)
    verdict = evaluate(problem, candidate, replace(CPU_OPTIONS, process_pairs=3, run_timeout_s=600.0))
    assert verdict["status"] == "correct", verdict["detail"]
    assert not verdict["warnings"]
    assert len(verdict["speedup_vs_eager_pairs"]) == 3 and verdict["launch_bound"]["quiet_pairs"] == 3
    assert asked == [False, True, True, True]
    assert len({line.split()[0] for line in log.read_text().splitlines()}) == 8   # the first pair and three
    assert verdict["timings"]["eager"]["rounds"] == len(verdict["speedup_vs_eager_rounds"]) >= 3 * MIN_ROUNDS
    (tmp_path / "dies").mkdir()
    problem, candidate, _ = _logged_files(tmp_path / "dies", FRESH_DIES)
    verdict = evaluate(problem, candidate, replace(CPU_OPTIONS, process_pairs=3, run_timeout_s=600.0))
    assert verdict["status"] == "correct" and "speedup_vs_eager_pairs" not in verdict
    assert verdict["speedup_vs_eager"] is not None and verdict["launch_bound"]["quiet_pairs"] == 0
    warning = verdict["warnings"][-1]["message"]
    assert "timed in 1 pair(s) of processes, not 3, the first, beside CPU work" in warning


def test_a_launch_bound_eager_is_timed_again_quiet_beside_torch_compile(tmp_path: Path, monkeypatch):
    """Where ordinary timings share the host with builds (reserved timing CPUs), a launch-bound eager's
    rounds beside torch.compile are measured again quiet, in a fresh reference process that is closed after
    (a candidate's eager rounds never run where torch.compile ran); elsewhere once, already quiet."""
    import os

    from kernelwright import gpulock

    problem, _, _ = _logged_files(tmp_path)
    monkeypatch.setattr(Judge, "measures_busy", lambda self: True)
    monkeypatch.setattr(Judge, "reference_busy", lambda self: {"gpu_busy_share": 0.05})   # launch-bound
    asked, real = [], Judge._reference_request

    def request(self, command):
        reply = real(self, command)
        if command["op"] == "time_rounds":
            asked.append((command["quiet"], self._reference.proc.pid))
        return reply

    monkeypatch.setattr(Judge, "_reference_request", request)
    for reserved, quiet in ((str(max(os.sched_getaffinity(0))), [False, True]), ("", [False])):
        monkeypatch.setenv(gpulock.RESERVED_ENV, reserved)
        asked.clear()
        with Judge(problem, CPU_OPTIONS) as judge:
            report = judge.reference_report()
            assert judge._reference is None or not quiet[1:]   # closed after the quiet rounds
        assert [q for q, _ in asked] == quiet and report["timings"]["eager"]["rounds"] >= MIN_ROUNDS
        assert len({pid for _, pid in asked}) == len(asked)      # the quiet rounds in a fresh process


# A candidate that computes something else in a process started for a later timing pair (its folder).
FRESH_CHEAT = """
import os


class ModelNew(Model):
    def forward(self, x):
        out = super().forward(x)
        return out * 3 if os.path.basename(os.getcwd()).startswith("pair_") else out
"""
# A candidate whose later processes die on import: the pairs so far stand.
FRESH_DIES = """
import os

if os.path.basename(os.getcwd()).startswith("pair_"):
    os._exit(3)


class ModelNew(Model):
    pass
"""


@pytest.mark.parametrize("body, status", [(FRESH_CHEAT, "mismatch"), (FRESH_DIES, "correct")])
def test_a_fresh_timing_process_is_checked_before_it_is_timed(tmp_path: Path, launch_bound, body, status):
    problem, candidate, _ = _logged_files(tmp_path, body)
    verdict = evaluate(problem, candidate, replace(CPU_OPTIONS, process_pairs=3, run_timeout_s=600.0))
    assert verdict["status"] == status, verdict["detail"]
    if status == "mismatch":
        assert "in a fresh process for timing" in verdict["detail"]
    else:
        assert verdict["speedup_vs_eager"] is not None and "speedup_vs_eager_pairs" not in verdict
        assert "timed in 1 pair(s) of processes, not 3" in verdict["warnings"][-1]["message"]


def test_host_bound_reads_either_sides_busy_share():
    from kernelwright.judge.busy import HOST_BOUND_SHARE, host_bound

    busy, idle = {"gpu_busy_share": 0.9}, {"gpu_busy_share": HOST_BOUND_SHARE / 2}
    assert host_bound(busy, idle) and host_bound(idle, None) and host_bound(idle, {"error": "no CUPTI"})
    assert not host_bound(busy, busy) and not host_bound({"error": "x"}, None) and not host_bound()


def test_unsettled_timing_takes_the_least_rounds(tmp_path: Path, monkeypatch):
    """optimize's judge only asks "not slower than eager?": the median of MIN_ROUNDS rounds, never more."""
    from kernelwright.judge import timing

    problem, candidate = _files(tmp_path, "0.0")
    monkeypatch.setattr(timing, "settled", lambda rounds, sides: False)   # rounds that never agree
    verdict = evaluate(problem, candidate, replace(CPU_OPTIONS, settle=False))
    assert verdict["timings"]["candidate"]["rounds"] == verdict["timings"]["eager"]["rounds"] == MIN_ROUNDS


def _round(ms: float) -> dict:
    return {"median_ms": ms, "iqr_ms": 0.01, "n": 10, "wall_median_ms": ms, "disagrees": False}


def test_rounds_settle_when_the_ratios_agree():
    eager = [2.0, 2.01, 1.99, 2.0, 2.005][:MIN_ROUNDS] + [2.0] * (MIN_ROUNDS - 5)
    steady = {"candidate": [_round(1.0)] * MIN_ROUNDS, "eager": [_round(ms) for ms in eager]}
    assert settled(steady)
    noisy = {"candidate": [_round(1.0)] * MIN_ROUNDS, "eager": [_round(2.4)] + steady["eager"][1:]}
    assert not settled(noisy) and not settled({"candidate": [_round(1.0)], "eager": [_round(1.0)]})
    combined = combine_rounds([_round(1.0), _round(5.0), _round(1.02)])
    assert combined["median_ms"] == 1.02 and combined["rounds"] == 3  # one disturbed round is outvoted
    assert combined["round_spread"] == pytest.approx(4.0 / 1.02)


def test_the_speedup_pairs_each_round_with_its_partner():
    """The host ran at one of two speeds for seconds at a time (lent H100 VMs): a copy of eager whose slow
    rounds fell on other rounds than eager's slow rounds is still 1.0x, where the ratio of each side's
    median of medians is not."""
    copy = [_round(ms) for ms in (1.0, 1.0, 1.0, 1.5, 1.5)]
    eager = [_round(ms) for ms in (1.0, 1.0, 1.5, 1.5, 1.5)]
    assert paired_ratio(copy, copy) == 1.0
    assert combine_rounds(eager)["median_ms"] / combine_rounds(copy)["median_ms"] == 1.5
    assert paired_ratio(copy, eager) == 1.0
    # work hidden from the events: the candidate's wall clock is its time
    hidden, slow = [{**_round(0.5), "wall_median_ms": 1.0}] * 3, [_round(2.0)] * 3
    assert paired_ratio(hidden, slow, wall=True) == 2.0 and paired_ratio(hidden, slow) == 4.0
    assert paired_ratio([_round(0.0)], [_round(1.0)]) is None
    # the speedup's "±": half the rounds' interquartile range over their median
    from kernelwright.judge.timing import ratio_spread

    assert ratio_spread([1.0, 1.0, 1.0]) == 0.0   # too few rounds to tell
    assert ratio_spread([0.9, 1.0, 1.0, 1.1, 1.0]) == pytest.approx((1.0 - 1.0) / 2)
    assert ratio_spread([0.8, 0.9, 1.0, 1.1, 1.2]) == pytest.approx((1.1 - 0.9) / 2)
    assert ratio_spread([1.0, 1.0, 1.0, 1.0, 1.5]) == 0.0   # one disturbed round: outvoted, not spread
    assert ratio_spread([1.0, 1.2, 1.4, 1.6]) == pytest.approx((1.45 - 1.15) / 2 / 1.3)


def test_rounds_alternate_who_goes_first_on_one_cpu(monkeypatch):
    from kernelwright.judge import timing

    watches = []
    monkeypatch.setattr(timing.CpuWatch, "pick", lambda self: watches.append(self) or 7)
    calls, slots = [], []

    def time_side(side: str, settings: dict) -> dict:
        calls.append((side, settings["cpu"], settings.get("warm_s")))
        slots.append(settings["placement"])
        return _round(1.0 if side == "eager" else 2.0 + 0.1 * len(calls))  # ratios that never settle

    rounds = timing.alternating_rounds(time_side, ("eager", "compile"), {"min_runs": 10}, settle=True)
    assert len(rounds["eager"]) == len(rounds["compile"]) == timing.NOISY_MAX_ROUNDS
    firsts = [calls[i][0] for i in range(0, len(calls), 2)]
    assert firsts[:4] == ["eager", "compile", "eager", "compile"]
    assert all(cpu == 7 for _, cpu, _ in calls)
    assert len(watches) == timing.NOISY_MAX_ROUNDS and len(set(map(id, watches))) == 1   # one watch a run
    assert calls[0][2] is None and calls[1][2] is None   # the first round warms up in full
    assert {warm for _, _, warm in calls[2:]} == {timing.LATER_WARM_S}
    # both sides of a round share one memory placement; the rounds draw theirs anew
    assert slots[0::2] == slots[1::2] and len(set(slots)) > timing.MAX_ROUNDS // 2
    assert all(0 <= slot < timing.PLACEMENT_SLOTS for slot in slots)
    # steady ratios settle after MIN_ROUNDS; without `settle`, never more than MIN_ROUNDS
    steady = timing.alternating_rounds(lambda side, settings: _round(1.0), ("eager", "compile"), {})
    assert len(steady["eager"]) == timing.MIN_ROUNDS
    unsettled = timing.alternating_rounds(time_side, ("eager", "compile"), {}, settle=False)
    assert len(unsettled["eager"]) == timing.MIN_ROUNDS
    # off the GPU nothing is pinned
    calls.clear()
    timing.alternating_rounds(time_side, ("eager", "compile"), {}, settle=False, pin=False)
    assert {cpu for _, cpu, _ in calls} == {None}
    alone = timing.alternating_rounds(lambda side, settings: _round(1.0), ("eager",), {}, settle=True)
    assert len(alone["eager"]) == timing.MIN_ROUNDS


def test_unsettled_rounds_go_on_while_their_median_ratio_is_uncertain(monkeypatch):
    """Past MAX_ROUNDS, rounds go on while the median ratio's standard error exceeds RATIO_ERROR: scattered
    ratios (half-IQR 5%) run to NOISY_MAX_ROUNDS, a scatter of 1% stops at MAX_ROUNDS, and so does any
    scatter once the rounds have taken NOISY_ROUNDS_S."""
    from kernelwright.judge import timing

    monkeypatch.setattr(timing.CpuWatch, "pick", lambda self: None)

    def scattered(width: float):
        rng = random.Random(5)
        return lambda side, settings: _round(1.0 if side == "eager" else rng.uniform(1 - width, 1 + width))

    wide = timing.alternating_rounds(scattered(0.1), ("eager", "candidate"), {})
    assert len(wide["eager"]) == timing.NOISY_MAX_ROUNDS
    assert timing.ratio_error(wide, ("eager", "candidate")) < timing.ratio_error(
        {side: r[:timing.MAX_ROUNDS] for side, r in wide.items()}, ("eager", "candidate"))
    narrow = timing.alternating_rounds(scattered(0.02), ("eager", "candidate"), {})
    assert len(narrow["eager"]) <= timing.MAX_ROUNDS
    # the time bound: each round "takes" NOISY_ROUNDS_S / 20 of the clock
    clock = iter(range(10_000))
    monkeypatch.setattr(timing, "perf_counter", lambda: next(clock) * timing.NOISY_ROUNDS_S / 20)
    bounded = timing.alternating_rounds(scattered(0.1), ("eager", "candidate"), {})
    assert timing.MAX_ROUNDS <= len(bounded["eager"]) <= 20
    # no time for them (the caller's deadline, or not on CUDA): not past MAX_ROUNDS
    assert len(timing.alternating_rounds(scattered(0.1), ("eager", "candidate"), {}, noisy_s=0.0)["eager"]) \
        == timing.MAX_ROUNDS
    # a side timed at zero: more rounds cannot mend it
    zero = {"eager": [_round(0.0)] * 20, "candidate": [_round(1.0)] * 20}
    assert timing.ratio_error(zero, ("eager", "candidate")) == 0.0
    # one side alone, or without `settle`: never past MIN_ROUNDS
    assert timing.ratio_error(wide, ("eager",)) == 0.0
    assert len(timing.alternating_rounds(scattered(0.1), ("eager", "candidate"), {}, settle=False)["eager"]) \
        == timing.MIN_ROUNDS


def test_a_stale_torch_build_lock_is_removed_under_ours(tmp_path: Path):
    stale = tmp_path / "gelu_ext" / "lock"
    stale.parent.mkdir()
    stale.write_text("")  # left by a build the judge killed: torch would wait on it forever
    with exclusive_build_dir(str(tmp_path)):
        assert not stale.exists()


def test_a_prepared_judge_starts_each_candidates_worker_ahead(tmp_path: Path):
    """`prepare` starts the first candidate's worker before there is a candidate, and each `evaluate` the
    next one's; each candidate still runs in a process of its own, and `close` leaves none behind."""
    problem, candidate = _files(tmp_path, "0.0")
    (tmp_path / "wrong").mkdir()
    _, wrong = _files(tmp_path / "wrong", "1e-2")
    judge = Judge(problem, CPU_OPTIONS)
    try:
        judge.prepare()
        first = judge._spare
        assert first is not None and first.proc.poll() is None
        assert judge.evaluate(candidate)["status"] == "correct"
        assert first.proc.poll() is not None          # it ran the first candidate and is gone
        second = judge._spare
        assert second is not None and second is not first and second.proc.poll() is None
        assert judge.evaluate(wrong)["status"] == "mismatch"
        assert judge.evaluate(candidate)["status"] == "correct"  # a fresh process after a failure
        last = judge._spare
    finally:
        judge.close()
    assert last.proc.poll() is not None and judge._spare is None
    # a spare that died before its candidate came: the candidate gets a fresh worker
    with Judge(problem, CPU_OPTIONS) as again:
        again.prepare()
        again._spare.kill()
        assert again.evaluate(candidate)["status"] == "correct"
        # a candidate rejected before it runs leaves the spare for the next one
        spare = again._spare
        assert again.evaluate(tmp_path / "missing.py")["status"] == "rejected"
        assert again._spare is spare and again.evaluate(candidate)["status"] == "correct"
    # without prepare (a one-off evaluation), no worker is started ahead
    with Judge(problem, CPU_OPTIONS) as once:
        assert once.evaluate(candidate)["status"] == "correct" and once._spare is None


def test_a_judge_closed_while_its_reference_loads_does_not_wait_for_it(tmp_path: Path):
    """optimize starts the judge before capture; a run that never judges (a capture failure) kills the
    loading reference process instead of waiting for its imports."""
    import threading
    import time

    problem, _ = _files(tmp_path, "0.0")
    judge = Judge(problem, CPU_OPTIONS)
    starting = threading.Thread(target=judge.prepare)
    starting.start()
    deadline = time.monotonic() + 30
    while judge._loading is None and starting.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    loading = judge._loading
    assert loading is not None          # caught while it imports torch (a second or more)
    judge.stop_loading()
    starting.join(timeout=30)
    assert not starting.is_alive() and judge._reference is None   # killed, never loaded
    judge.close()
    assert loading.proc.poll() is not None and not judge.workdir.exists()


def test_torch_compile_is_timed_in_rounds_beside_eager(tmp_path: Path, monkeypatch):
    """torch.compile is timed once per judge, in rounds alternating with eager; a candidate's ratio to it
    is its paired ratio to eager over eager's paired ratio to compile (eager bridges the two pairings). With
    the GPU lock on in every process, as on a GPU (a worker op that takes the timing lock itself must not
    run inside the shared lock its guard would take: `time_rounds` failed every time that way)."""
    from kernelwright.gpulock import ENV

    lock = str(tmp_path / "gpu.lock")
    monkeypatch.setenv(ENV, lock)
    problem, candidate = _files(tmp_path, "0.0")
    options = replace(CPU_OPTIONS, compile_baseline=True)
    with Judge(problem, options) as judge:
        judge.worker_env = {ENV: lock}
        report = judge.reference_report()
        verdict = judge.evaluate(candidate)
    timings = report["timings"]
    assert timings["compile"]["rounds"] == timings["eager"]["rounds"] >= MIN_ROUNDS
    compiled, eager = timings["compile"]["round_medians_ms"], timings["eager"]["round_medians_ms"]
    ratios = [e / c for c, e in zip(compiled, eager, strict=True)]
    assert report["eager_over_compile"] == pytest.approx(statistics.median(ratios), rel=1e-3)
    assert verdict["status"] == "correct" and verdict["timings"]["compile"] == timings["compile"]
    assert verdict["speedup_vs_compile"] == pytest.approx(
        verdict["speedup_vs_eager"] / report["eager_over_compile"], rel=1e-3)


def test_a_pinned_series_gives_its_thread_back_its_cpus():
    import contextlib
    import os

    from kernelwright.judge import timing

    before = os.sched_getaffinity(0)
    cpu = max(before)
    with contextlib.ExitStack() as stack:
        assert timing.pinned_cpu(stack, cpu) == cpu and os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ZeroDivisionError), contextlib.ExitStack() as stack:
        timing.pinned_cpu(stack, cpu)
        raise ZeroDivisionError
    assert os.sched_getaffinity(0) == before
    with contextlib.ExitStack() as stack:   # not allowed here, or not asked for: not pinned
        assert timing.pinned_cpu(stack, 10_000) is None and timing.pinned_cpu(stack, None) is None
    watch = timing.CpuWatch(0.01)
    assert watch.pick() in before and watch.pick() in before


def test_the_cpu_watch_sleeps_once_and_counts_ticks_since_its_last_pick(monkeypatch):
    from kernelwright.judge import timing

    reads = iter([{0: 10, 1: 10, 2: 10}, {0: 15, 1: 11, 2: 30}, {0: 25, 1: 12, 2: 30}, {0: 25, 1: 30, 2: 31}])
    sleeps = []
    monkeypatch.setattr(timing, "_busy_ticks", lambda: next(reads))
    monkeypatch.setattr(timing, "sleep", sleeps.append)
    monkeypatch.setattr(timing, "_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv(timing.CPU_ENV, raising=False)
    watch = timing.CpuWatch(0.05)
    assert watch.pick() == 1 and sleeps == [0.05]   # 5, 1, 20 ticks over the first window
    assert watch.pick() == 2 and sleeps == [0.05]   # 10, 1, 0 since then: no second sleep
    assert watch.pick() == 0                         # 0, 18, 1
    monkeypatch.setenv(timing.CPU_ENV, "off")
    assert watch.pick() is None
    monkeypatch.setenv(timing.CPU_ENV, "3")
    assert watch.pick() == 3


def test_a_compile_mode_that_fails_while_timed_is_dropped_not_the_timing():
    """A torch.compile mode that compiled but fails while timed leaves eager's rounds and its own error."""
    import torch

    from kernelwright.judge.reference_worker import ReferenceWorker

    def broken(*inputs):
        raise RuntimeError("CUDA graph replay failed\nmore")

    worker = ReferenceWorker()
    worker.device, worker.model, worker.timing_inputs = "cpu", lambda x: x + 1, [torch.ones(4)]
    worker.compiled = {"compile": torch.nn.Identity(), "compile_reduce_overhead": broken}
    reply = worker.op_time_rounds({"sides": ["eager", "compile", "compile_reduce_overhead"], "min_runs": 10,
                                   "min_time_s": 0.0})
    assert set(reply["rounds"]) == {"eager", "compile"}
    assert reply["errors"] == {"compile_reduce_overhead": "RuntimeError: CUDA graph replay failed"}
    assert worker.compiled == {}


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc/PID/stat, in clock ticks)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_judge_worker_imports_torch_only_while_no_timing_runs(tmp_path: Path, monkeypatch):
    """A worker's start (torch's import: seconds of a core) is CPU work under the machine lock: while
    another process times, the worker waits instead of slowing that timing down."""
    import subprocess
    import sys
    import time

    from kernelwright import gpulock
    from kernelwright.judge.process import WorkerProcess

    lock = tmp_path / "machine.lock"
    monkeypatch.setenv(gpulock.MACHINE_ENV, str(lock))
    monkeypatch.setenv(gpulock.ENV, "off")
    timer = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom kernelwright.gpulock import gpu_timing\n"
         "with gpu_timing():\n    print('held', flush=True)\n    time.sleep(float(sys.argv[1]))", "4"],
        stdout=subprocess.PIPE, text=True)
    assert timer.stdout.readline().strip() == "held"
    worker = WorkerProcess("reference", tmp_path)
    try:
        time.sleep(3.0)
        waiting_cpu = _cpu_seconds(worker.proc.pid)   # interpreter start and the lock, no torch
        assert timer.wait(timeout=30) == 0
        reply = worker.request({"op": "no_such_op"}, timeout=300)
        assert reply["ok"] is False
        assert waiting_cpu < 0.5 < _cpu_seconds(worker.proc.pid), waiting_cpu
        # the wait is reported with the first reply, and counted by the parent's handle
        assert 2.0 <= reply["waited_s"] <= 30 and worker.waited_s == reply["waited_s"]
        assert worker.request({"op": "no_such_op"}, timeout=60)["waited_s"] == 0.0
    finally:
        worker.kill()


def test_a_reply_that_is_not_an_object_is_a_dead_worker_and_a_bad_wait_counts_nothing():
    """Candidate code shares its worker's process and can write to the reply pipe: a reply that is not a
    JSON object ends the worker (WorkerDied, a runtime_error verdict), and a `waited_s` that is not a
    finite non-negative number is counted as 0."""
    from kernelwright.judge.process import WorkerDied, WorkerProcess, waited_in

    assert [waited_in({"waited_s": v}) for v in (1.5, 2, True, "3", -1.0, float("inf"), float("nan"), None)] \
        == [1.5, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    worker = WorkerProcess.__new__(WorkerProcess)
    worker.role, worker.waited_s, killed = "candidate", 0.0, []
    worker.kill = lambda: killed.append(True)
    for line, survives in ((b'{"ok": true, "waited_s": "x"}\n', True), (b"[1, 2]\n", False)):
        worker._buffer = line
        if survives:
            assert worker.receive(1.0) == {"ok": True, "waited_s": "x"} and worker.waited_s == 0.0
        else:
            with pytest.raises(WorkerDied, match="not an object"):
                worker.receive(1.0)
            assert killed


def test_a_verdict_counts_the_seconds_its_processes_waited_for_other_tasks(tmp_path: Path, monkeypatch):
    """The profile's lock_wait_s: the seconds the verdict's processes were blocked on other processes'
    locks; here a timing held elsewhere for 3 s while the candidate's worker started."""
    import subprocess
    import sys

    from kernelwright import gpulock

    monkeypatch.setenv(gpulock.MACHINE_ENV, str(tmp_path / "machine.lock"))
    monkeypatch.setenv(gpulock.ENV, "off")
    problem, candidate = _files(tmp_path, "0.0")
    with Judge(problem, CPU_OPTIONS) as judge:
        quiet = judge.evaluate(candidate)
        assert quiet["status"] == "correct" and quiet["profile"]["lock_wait_s"] < 1.0
        timer = subprocess.Popen(
            [sys.executable, "-c", "import time\nfrom kernelwright.gpulock import gpu_timing\n"
             "with gpu_timing():\n    print('held', flush=True)\n    time.sleep(3)"],
            stdout=subprocess.PIPE, text=True)
        assert timer.stdout.readline().strip() == "held"
        waited = judge.evaluate(candidate)
        assert timer.wait(timeout=30) == 0
    assert waited["status"] == "correct" and 1.5 <= waited["profile"]["lock_wait_s"] <= 30


def test_a_reference_that_died_is_not_restarted_inside_a_timing(tmp_path: Path, monkeypatch):
    """Inside this process's own timing (machine lock on), a new reference worker could not start (its start
    is CPU work, which waits for the timing): the judge fails the request at once instead of waiting."""
    import time

    from kernelwright import gpulock
    from kernelwright.judge.session import Failed

    monkeypatch.setenv(gpulock.MACHINE_ENV, str(tmp_path / "machine.lock"))
    monkeypatch.setenv(gpulock.ENV, "off")
    problem, _ = _files(tmp_path, "0.0")
    with Judge(problem, CPU_OPTIONS) as judge:
        assert not gpulock.holds_timing()
        started = time.monotonic()
        with gpulock.gpu_timing():
            assert gpulock.holds_timing()
            with pytest.raises(Failed, match="exited during the timing"):
                judge._reference_request({"op": "reset"})
        assert time.monotonic() - started < 5
        assert not gpulock.holds_timing()


def test_every_worker_runs_under_one_string_hash_seed(tmp_path: Path, monkeypatch):
    """A comparison's two processes must lay out their dicts of names alike (judge/process.py
    WORKER_HASH_SEED): each worker gets the caller's numeric PYTHONHASHSEED, else the fixed one, whatever the
    caller's own setting; an explicit env still wins."""
    import subprocess

    from kernelwright.judge import process

    seen = []

    class Recorder:
        def __init__(self, args, env, **kwargs):
            seen.append(env.get("PYTHONHASHSEED"))

    monkeypatch.setattr(subprocess, "Popen", Recorder)
    for setting, expected in ((None, process.WORKER_HASH_SEED), ("random", process.WORKER_HASH_SEED),
                              ("17", "17")):
        if setting is None:
            monkeypatch.delenv("PYTHONHASHSEED", raising=False)
        else:
            monkeypatch.setenv("PYTHONHASHSEED", setting)
        for role in ("reference", "candidate"):
            _close(process.WorkerProcess(role, tmp_path))
        assert seen[-2:] == [expected, expected]
    _close(process.WorkerProcess("candidate", tmp_path, env={"PYTHONHASHSEED": "5"}))
    assert seen[-1] == "5"


def _close(worker) -> None:
    worker._log.close()
    worker._replies.close()


FLOODS_THE_TURNS = '''
import inspect
import os
import sys
import threading

import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

_started = []

def _flood():
    while True:
        os.write(int(sys.argv[2]), b'{"turn": true}\\n')

def _drain():
    while os.read(0, 1 << 16):
        pass

class ModelNew(Model):
    def forward(self, x):
        if not _started and any(f.function == "op_time" for f in inspect.stack()):
            _started.append(1)
            threading.Thread(target=_drain, daemon=True).start()
            threading.Thread(target=_flood, daemon=True).start()
        return super().forward(x)

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
'''


def test_a_candidate_that_asks_for_turns_without_end_is_killed(tmp_path: Path):
    """Candidate code shares its worker's process and can write to the reply pipe: one that keeps asking
    for lockstep turns (and swallows the judge's answers) is killed once it asks for more than a series
    has (timing.max_turns), a runtime error, instead of holding the judge and the timing lock."""
    import time

    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(FLOODS_THE_TURNS)
    candidate.write_text(FLOODS_THE_TURNS)
    started = time.monotonic()
    verdict = evaluate(problem, candidate, replace(CPU_OPTIONS, min_time_s=0.5, run_timeout_s=60.0))
    assert time.monotonic() - started < 50
    assert verdict["status"] == "runtime_error", verdict
    assert "more timing turns than a series has" in verdict["detail"]
