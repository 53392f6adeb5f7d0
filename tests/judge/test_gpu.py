"""The judge on a CUDA GPU: the seed answers (000 correct and faster, 002/004 build errors in a real
build), the whole CPU corpus again on the GPU, the GPU-only hacks (side streams, a data_ptr cache inside
C++, illegal memory accesses, TF32, silent fallbacks around a real kernel), timing and its stability.

Run: python -m pytest -q -m gpu tests/judge -s   (-s shows the timing numbers)
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from corpus import CANDIDATES, GPU_CANDIDATES, PROBLEMS
from test_corpus_cpu import EXPECTED

from kernelwright.judge import Judge, JudgeOptions, evaluate, evaluate_reference
from kernelwright.judge.busy import busy_share
from kernelwright.judge.timing import PLACEMENT_BASE, PLACEMENT_SLOTS, PLACEMENT_UNIT, measure, placed
from kernelwright.problem_files import resolve_problem_path

pytestmark = pytest.mark.gpu

FAST = JudgeOptions(device="cuda", min_runs=20, min_time_s=0.05, compile_baseline=False)


@pytest.fixture(scope="module")
def gpu_build_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("gpu-builds"))


def _seed(fixtures_dir: Path, number: str) -> Path:
    return next((fixtures_dir / "seeds").glob(f"{number}_*.txt"))


# ------------------------------------------------------------------------------------------------ seeds


def test_seed_000_gelu_is_correct_and_faster(fixtures_dir, gpu_build_dir):
    verdict = evaluate(fixtures_dir / "seed_problems" / "gelu_tanh.py", _seed(fixtures_dir, "000"),
                       JudgeOptions(device="cuda", build_dir=gpu_build_dir))
    print("seed 000:", verdict["detail"], verdict["timings"], verdict["flags"])
    assert verdict["status"] == "correct", verdict["detail"]
    assert len(verdict["trials"]) == 10
    assert verdict["flags"]["no_custom_kernel"] is False
    assert verdict["flags"]["timing_disagreement"] is False
    assert verdict["timings"]["candidate"]["n"] >= 100 and verdict["timings"]["compile"] is not None
    assert verdict["speedup_vs_eager"] > 1.5  # about 2.8x on an H100
    assert verdict["speedup_vs_compile"] is not None
    assert verdict["env"]["gpu"]["name"]


@pytest.mark.parametrize("number,problem,message", [
    ("002", "softmax", "const float *"),
    ("004", "leaky_relu", "was not declared in this scope"),
])
def test_seed_build_errors_in_a_real_build(fixtures_dir, gpu_build_dir, number, problem, message):
    verdict = evaluate(fixtures_dir / "seed_problems" / f"{problem}.py", _seed(fixtures_dir, number),
                       replace(FAST, build_dir=gpu_build_dir))
    assert verdict["status"] == "build_error"
    assert message in verdict["detail"]


def test_seed_000_compile_only_builds(fixtures_dir, gpu_build_dir):
    verdict = evaluate(fixtures_dir / "seed_problems" / "gelu_tanh.py", _seed(fixtures_dir, "000"),
                       JudgeOptions(device="cuda", compile_only=True, build_dir=gpu_build_dir))
    assert verdict["status"] == "builds", verdict["detail"]


def test_timing_is_stable_across_three_runs(fixtures_dir, gpu_build_dir):
    """Done-when of issue 4: the same kernel timed three times agrees within 3%."""
    with Judge(fixtures_dir / "seed_problems" / "gelu_tanh.py",
               JudgeOptions(device="cuda", build_dir=gpu_build_dir, compile_baseline=False)) as judge:
        verdicts = [judge.evaluate(_seed(fixtures_dir, "000")) for _ in range(3)]
    medians = [v["timings"]["candidate"]["median_ms"] for v in verdicts]
    spread = (max(medians) - min(medians)) / statistics.median(medians)
    print(f"seed 000 candidate medians (ms): {medians}, spread {spread:.2%}")
    assert spread <= 0.03


# ------------------------------------------------------------------------------------------------ corpus


@pytest.fixture(scope="module")
def gpu_judges():
    judges: dict[str, Judge] = {}

    def get(problem: str) -> Judge:
        if problem not in judges:
            judges[problem] = Judge(PROBLEMS / f"{problem}.py", FAST)
        return judges[problem]

    yield get
    for judge in judges.values():
        judge.close()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cpu_corpus_on_gpu(name, gpu_judges):
    problem, statuses, flags, detail = EXPECTED[name]
    verdict = gpu_judges(problem).evaluate(CANDIDATES / name)
    assert verdict["status"] in statuses, verdict["detail"]
    for flag, value in flags.items():
        assert verdict["flags"][flag] == value, (flag, verdict["flags"])
    assert detail in verdict["detail"]


def test_empty_output_reads_poisoned_memory(gpu_judges):
    verdict = gpu_judges("gelu").evaluate(CANDIDATES / "empty_output.py")
    assert verdict["status"] == "nan", verdict["detail"]


def test_side_stream_is_rejected(gpu_judges):
    verdict = gpu_judges("gelu").evaluate(GPU_CANDIDATES / "side_stream.py")
    assert verdict["status"] == "rejected" and "changed after forward returned" in verdict["detail"]
    assert any(w["check"] == "streams" for w in verdict["warnings"])


def test_address_cache_in_cpp_is_caught(gpu_judges):
    verdict = gpu_judges("gelu").evaluate(GPU_CANDIDATES / "address_cache_cpp.py")
    assert verdict["status"] == "mismatch", verdict["detail"]
    assert "trial 1" in verdict["detail"]


def test_illegal_address_is_a_verdict_and_the_judge_goes_on(gpu_judges):
    judge = gpu_judges("gelu")
    verdict = judge.evaluate(GPU_CANDIDATES / "illegal_address.py")
    assert verdict["status"] == "runtime_error"
    assert "illegal memory access" in verdict["detail"] or "CUDA error" in verdict["detail"]
    assert judge.evaluate(CANDIDATES / "correct_gelu.py")["status"] == "correct"


def test_fallback_around_a_real_kernel_is_reported(gpu_judges):
    verdict = gpu_judges("gelu").evaluate(GPU_CANDIDATES / "fallback_cpp.py")
    assert verdict["status"] == "correct", verdict["detail"]
    assert verdict["flags"]["fallback_detected"] is True
    assert verdict["flags"]["no_custom_kernel"] is False
    assert any("must be contiguous" in note for note in verdict["flags"]["fallback_notes"])


def test_tf32_is_reported_as_downcast(gpu_judges):
    verdict = gpu_judges("matmul").evaluate(GPU_CANDIDATES / "tf32_matmul.py")
    assert verdict["flags"]["precision"] == "downcast"
    assert verdict["status"] in ("mismatch", "correct")


def test_gpu_oom_is_a_verdict(gpu_judges):
    assert gpu_judges("gelu").evaluate(CANDIDATES / "oom.py")["status"] == "oom"


# ------------------------------------------------------------------------------------------------ timing


def test_measure_flags_work_hidden_on_a_side_stream():
    side = torch.cuda.Stream()

    def hidden():
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000)

    def visible():
        torch.cuda._sleep(2_000_000)

    hidden_stats = measure(hidden, "cuda", min_runs=20, min_time_s=0.05)
    visible_stats = measure(visible, "cuda", min_runs=20, min_time_s=0.05)
    print("hidden:", hidden_stats, "visible:", visible_stats)
    assert hidden_stats["disagrees"] and not visible_stats["disagrees"]
    assert visible_stats["median_ms"] > 0.2 and visible_stats["n"] >= 20


def test_a_host_slowed_in_the_wall_check_is_not_a_disagreement(monkeypatch):
    """A call whose host takes 0.5 ms more in the wall-clock cross-check than in the timed series (as other
    processes slow it under `bench --jobs N`) while its GPU work stays 0.1 ms: the GPU's work after the call
    returned is what the events saw, so no disagreement; the wall time still shows the host."""
    import time

    from kernelwright.judge import timing

    slow = {"host": False}
    timed = timing.timed_runs

    def series_then_slow(*args, **kwargs):
        result = timed(*args, **kwargs)
        slow["host"] = True     # the wall check follows the series
        return result

    def call():
        if slow["host"]:
            end = time.perf_counter() + 5e-4
            while time.perf_counter() < end:
                pass
        torch.cuda._sleep(200_000)    # ~0.1 ms

    monkeypatch.setattr(timing, "timed_runs", series_then_slow)
    stats = measure(call, "cuda", min_runs=20, min_time_s=0.05)
    print(stats)
    assert not stats["disagrees"] and stats["wall_median_ms"] > stats["median_ms"] + 0.4


@pytest.mark.parametrize("live_mib", [4, 64])
def test_placed_carves_the_intermediates_after_the_pad(live_mib):
    """`placed`: the calls after it take their intermediates from one fresh segment, right after a pad of
    the slot's size (the allocator's blocks are 512-byte multiples, so the offset is exact). A live 4 MiB
    tensor sits in a 20 MiB segment whose free 16 MiB the pad fits better than the fresh segment: `placed`
    fills it with pads of its own until one lands at the segment's start."""
    x = torch.randn(live_mib * 2**18, device="cuda")
    seen = []

    def step():
        y = torch.empty(2**24, device="cuda")   # a 64 MiB intermediate, freed after each call
        seen.append(y.data_ptr())

    for slot in (0, 1, 5, PLACEMENT_SLOTS - 1):
        pads = placed(step, slot)
        assert pads is not None, slot
        step()
        assert seen[-1] - pads[-1].data_ptr() == PLACEMENT_BASE + slot * PLACEMENT_UNIT, slot
        del pads
    stats = measure(step, "cuda", min_runs=10, min_time_s=0.01, locked=True, placement=7)
    assert stats["placed"] is True
    del x


def test_the_warm_up_queues_few_runs():
    """A slow kernel's measure takes about its runs' time: warm-up 0.1 s, series 0.1 s, wall check 30 runs.
    Unbounded, the warm-up queued hundreds of runs (1.3 s of GPU work for a GEMM of 2.7 ms on an H100)."""
    import time

    def slow():
        torch.cuda._sleep(20_000_000)   # ~10 ms of spinning at H100 clocks

    slow()
    torch.cuda.synchronize()            # CUDA's start-up outside the clock
    started = time.perf_counter()
    stats = measure(slow, "cuda", min_runs=10, min_time_s=0.1, locked=True)
    seconds = time.perf_counter() - started
    print(stats, f"{seconds:.2f} s")
    budget = 0.1 + 0.1 + 30 * stats["wall_median_ms"] / 1e3
    assert seconds < 2 * budget + 0.2


def test_a_series_in_turns_waits_between_them_and_leaves_the_waits_out():
    """Lockstep (judge/timing.py): the series is split into about min_time_s / TURN_S turns, each asked for
    with `take_turn` (one more for the wall-clock check); the waits are reported apart from "seconds", and
    every run is still timed (n as without turns)."""
    import time

    from kernelwright.judge.timing import TURN_S, turn_blocks

    x = torch.randn(1 << 20, device="cuda")
    asked = []

    def take_turn():
        asked.append(time.perf_counter())
        time.sleep(0.02)

    stats = measure(lambda: x.mul(2), "cuda", min_runs=40, min_time_s=0.1, locked=True, take_turn=take_turn)
    blocks = turn_blocks(stats["n"], 0.1, take_turn)
    assert len(blocks) == round(0.1 / TURN_S) and sum(blocks) == stats["n"] >= 40
    assert len(asked) == len(blocks) + 1
    assert stats["turn_wait_s"] >= 0.02 * (len(asked) - 1)   # the wait for the first turn is not counted
    assert stats["seconds"] < asked[-1] - asked[0] - 0.02 * (len(asked) - 1) + 1.0
    assert stats["host"]["cpu_share"] is not None


def test_evaluate_reference_times_eager_and_compile():
    options = JudgeOptions(device="cuda", min_runs=20, min_time_s=0.1)
    report = evaluate_reference(PROBLEMS / "matmul.py", options)
    print("matmul reference:", report["timings"])
    assert report["timings"]["eager"]["median_ms"] > 0
    assert report["timings"]["compile"]["median_ms"] > 0


# ----------------------------------------------------------------------------------------- GPU busy share


def test_launch_bound_share_of_a_small_batch_network(tmp_path, gpu_build_dir):
    """A 24-layer MLP on one vector: eager's and the candidate's (here Model itself) GPU busy shares are
    measured, each in (0, 1], from one profiled pass after timing."""
    problem = resolve_problem_path("level3/17_DeepMLPBatch1")
    candidate = tmp_path / "same_as_model.py"
    candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    ...\n")
    verdict = evaluate(problem, candidate, replace(FAST, build_dir=gpu_build_dir))
    launch = verdict.get("launch_bound")
    print("launch_bound:", launch, "timings:", verdict["timings"])
    assert verdict["status"] == "correct", verdict["detail"]
    assert not (launch or {}).get("errors"), launch
    for side in ("eager", "candidate"):
        assert 0 < launch[f"{side}_gpu_busy_share"] <= 1
        assert launch[side]["kernels"] >= 49 and 0 < launch[side]["busy_ms"] <= launch[side]["wall_ms"] * 1.01


def test_busy_share_tells_launch_bound_from_gpu_bound():
    # 8192^3 (~25 ms): a one-call pass's fixed profiler overhead (~0.3 ms) is under 2% of it (4096^3 read
    # 0.89 once, H100 2026-11-26).
    x, a = torch.ones(1, device="cuda"), torch.randn(8192, 8192, device="cuda")

    def tiny_launches():
        for _ in range(200):
            x.add_(1)

    launch_bound, gpu_bound = busy_share(tiny_launches), busy_share(lambda: a @ a)
    print("200 one-element adds:", launch_bound, "8192^3 matmul:", gpu_bound)
    assert launch_bound["kernels"] == 200 and gpu_bound["kernels"] >= 1
    assert len(launch_bound["top"]) == 1 and launch_bound["top"][0][1] > 0    # one kernel, 200 times a call
    assert gpu_bound["top"][0][1] >= 0.9 * 1e3 * gpu_bound["busy_ms"]      # the GEMM is the forward's time
    assert launch_bound["gpu_busy_share"] < 0.75 and 0.9 < gpu_bound["gpu_busy_share"] <= 1


def test_no_eager_timing_follows_the_profiled_pass_in_one_process(tmp_path, gpu_build_dir):
    """A profiled pass leaves launches slower in its process even with CUPTI torn down (H100, 2026-11-25:
    100 one-element adds 0.976 ms before, 1.089 ms after, +11%), so the judge closes the reference process
    after eager's busy pass: the next candidate's eager rounds run in a fresh one. Prints the in-process
    overhead of this run."""
    x = torch.ones(1, device="cuda")

    def tiny_launches():
        for _ in range(100):
            x.add_(1)

    before = measure(tiny_launches, "cuda", min_runs=50, min_time_s=0.3)
    busy_share(tiny_launches)
    after = measure(tiny_launches, "cuda", min_runs=50, min_time_s=0.3)
    print(f"100 launches: {before['median_ms']:.4f} ms before profiling, {after['median_ms']:.4f} ms after")
    problem = resolve_problem_path("level3/17_DeepMLPBatch1")
    candidate = tmp_path / "same_as_model.py"
    candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    ...\n")
    with Judge(problem, replace(FAST, build_dir=gpu_build_dir)) as judge:
        first = judge.evaluate(candidate)
        assert judge._reference is None          # closed after eager's profiled pass
        second = judge.evaluate(candidate)       # its eager rounds: a fresh reference process
    for verdict in (first, second):
        assert verdict["status"] == "correct", verdict["detail"]
        assert 0 < verdict["launch_bound"]["eager_gpu_busy_share"] <= 1


@pytest.mark.parametrize("problem_id, tolerance, pairs", [("level1/41_MatmulSquare", 0.03, None),
                                                          ("level3/17_DeepMLPBatch1", 0.05, 3)])
def test_an_identical_copy_times_as_eager_beside_torch_compile(problem_id, tolerance, pairs, tmp_path,
                                                                gpu_build_dir):
    """A/A through the judge's paired rounds, torch.compile timed in rounds beside eager (judge/timing.py).
    GPU-bound: within 3%, one pair of processes. Launch-bound: three pairs of processes, within 5% (one
    pair's own offset reached 5-7% on H200s, 2026-11-28; the median of three pairs' stayed within 2.3%)."""
    from kernelwright.bench.systems import copy_candidate

    problem = resolve_problem_path(problem_id)
    candidate = tmp_path / "copy.py"
    candidate.write_text(copy_candidate(problem.read_text()))
    options = JudgeOptions(device="cuda", trials=2, compile_baseline=True, build_dir=gpu_build_dir)
    with Judge(problem, options) as judge:
        report = judge.reference_report()
        verdict = judge.evaluate(candidate)
    print(problem_id, "A/A", verdict["speedup_vs_eager"], "±", verdict["speedup_vs_eager_spread"],
          "rounds", verdict["speedup_vs_eager_rounds"], "eager/compile", report["eager_over_compile"])
    assert verdict["status"] == "correct", verdict["detail"]
    assert abs(verdict["speedup_vs_eager"] - 1) <= tolerance
    assert len(verdict.get("speedup_vs_eager_pairs") or [None]) == (pairs or 1), verdict["warnings"]
    assert None not in verdict["timings"]["candidate"]["round_cpus"]   # both sides pinned, round by round
    assert report["eager_over_compile"] > 0 and verdict["timings"]["compile"]["rounds"] >= 5
    assert verdict["speedup_vs_compile"] == pytest.approx(
        verdict["speedup_vs_eager"] / report["eager_over_compile"], rel=1e-3)
