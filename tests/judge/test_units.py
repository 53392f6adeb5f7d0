"""In-process tests of the judge's pieces: extraction, static report, comparison, tolerances, trial inputs,
output checks, build-log trimming and the runtime guards."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest
import torch

from kernelwright.judge import extract_code
from kernelwright.judge.build import trim_build_log
from kernelwright.judge.compare import compare_buffers, compare_outputs
from kernelwright.judge.extract import forbidden_imports, read_candidate
from kernelwright.judge.guard import (
    ExtensionRecorder,
    FunctionSnapshot,
    SwallowedExceptions,
    precision_changes,
    precision_state,
)
from kernelwright.judge.inputs import apply_distribution, plan_trials
from kernelwright.judge.outputs import aliases, bitwise_equal, not_plain
from kernelwright.judge.perturb import perturbed_state_dict, state_dict_mismatch
from kernelwright.judge.static import static_report
from kernelwright.judge.timing import measure, summarize
from kernelwright.judge.tolerance import effective_atol, tolerance_for

# ------------------------------------------------------------------------------------------------ extraction


def test_extract_takes_last_block_defining_modelnew():
    text = ("```python\nclass ModelNew: pass  # draft 1\n```\ntext\n"
            "```python\nclass ModelNew: pass  # final\n```\n"
            "```python\nprint('usage, no ModelNew')\n```\n")
    assert "final" in extract_code(text)


def test_extract_none_without_modelnew():
    assert extract_code("no code here") is None
    assert extract_code("```python\nx = 1\n```") is None


def test_seed_answers_extract(fixtures_dir):
    seeds = {p.name[:3]: p for p in (fixtures_dir / "seeds").glob("00*.txt")}
    gelu = extract_code(seeds["000"].read_text())
    assert "gelu_cuda" in gelu and "class ModelNew" in gelu
    leaky = extract_code(seeds["004"].read_text())
    # 004 has three blocks; the last one defining ModelNew names the extension 'leaky_relu'.
    assert "name='leaky_relu'" in leaky and "torch.where" not in leaky


def test_read_candidate_py_file_as_is(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("class ModelNew:\n    pass\n")
    assert read_candidate(path)[0] == path.read_text()
    path.write_text("x = 1\n")
    assert read_candidate(path) == (None, "the candidate does not define class ModelNew")
    assert "cannot read" in read_candidate(tmp_path / "missing.py")[1]


def test_forbidden_imports():
    assert forbidden_imports("import kernelwright.problem\nimport torch") == ["kernelwright.problem"]
    assert forbidden_imports("from kernelwright import judge") == ["kernelwright"]
    assert forbidden_imports("import torch") == []


# ------------------------------------------------------------------------------------------------ static


def test_static_report_finds_hack_patterns():
    source = '''
import threading
import torch
import torch.nn.functional as F
torch.backends.cuda.matmul.allow_tf32 = True
time.perf_counter = lambda: 0
class ModelNew(torch.nn.Module):
    def forward(self, x):
        s = torch.cuda.Stream()
        try:
            return ext.run(x)
        except RuntimeError:
            return F.gelu(torch.matmul(x, x))
'''
    checks = {w["check"] for w in static_report(source)}
    expected = {"threads", "precision", "timing_patch", "monkeypatch", "streams", "fallback", "pytorch_ops"}
    assert expected <= checks
    ops = next(w for w in static_report(source) if w["check"] == "pytorch_ops")
    assert "F.gelu" in ops["message"] and "torch.matmul" in ops["message"]


def test_static_report_quiet_on_clean_kernel():
    source = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
             "        return ext.gelu(x.contiguous())\n"
    assert static_report(source) == []


# ------------------------------------------------------------------------------------------------ compare


def test_compare_correct_and_errors():
    ref = torch.rand(4, 5)
    result = compare_outputs(ref, ref + 1e-6, "default")
    assert result["status"] == "correct" and 0 < result["max_abs_err"] < 1e-5
    bad = ref.clone()
    bad[2, 3] += 0.5
    result = compare_outputs(ref, bad, "default")
    assert result["status"] == "mismatch" and result["first_mismatch"] == (2, 3)
    assert result["max_abs_err"] == pytest.approx(0.5, rel=1e-5)
    assert "1 of 20 values" in result["detail"]


def test_compare_shape_dtype_structure_nan():
    ref = torch.rand(3, 4)
    assert compare_outputs(ref, ref.reshape(12), "default")["status"] == "wrong_shape"
    assert compare_outputs(ref, ref.double(), "default")["status"] == "wrong_dtype"
    assert compare_outputs((ref, ref), ref, "default")["status"] == "wrong_shape"
    nan = ref.clone()
    nan[1, 1] = math.inf
    result = compare_outputs(ref, nan, "default")
    assert result["status"] == "nan" and result["first_mismatch"] == (1, 1)


def test_compare_special_values_must_match():
    ref = torch.tensor([1.0, math.nan, math.inf])
    assert compare_outputs(ref, ref.clone(), "default")["status"] == "correct"
    assert compare_outputs(ref, torch.tensor([1.0, 0.0, math.inf]), "default")["status"] == "mismatch"


def test_compare_integers_exact_and_scalars():
    ref = torch.tensor([1, 2, 3])
    assert compare_outputs(ref, torch.tensor([1, 2, 4]), "kernelbench")["status"] == "mismatch"
    assert compare_outputs(2.0, 2.0, "default")["status"] == "correct"
    assert compare_outputs([ref, None], [ref, None], "default")["status"] == "correct"


def test_tolerance_presets():
    assert tolerance_for("default", torch.float32) == (1e-4, 1e-4)
    assert tolerance_for("kernelbench", torch.float32) == (1e-2, 1e-2)
    assert tolerance_for("default", torch.int64) == (0.0, 0.0)
    ref = torch.rand(8, 8)
    err = ref * (1 + 5e-3)
    assert compare_outputs(ref, err, "default")["status"] == "mismatch"
    assert compare_outputs(ref, err, "kernelbench")["status"] == "correct"
    with pytest.raises(ValueError):
        tolerance_for("nope", torch.float32)


def test_rescaled_distributions_scale_atol():
    assert effective_atol(1e-4, 500.0, "scale1000") == pytest.approx(5e-2)
    assert effective_atol(1e-4, 1e-6, "tiny") == pytest.approx(1e-10)
    assert effective_atol(1e-4, 500.0, "normal") == 1e-4
    assert effective_atol(1e-4, 0.0, "tiny") == 1e-4


def test_compare_buffers():
    ref = {"bn.running_mean": torch.ones(3)}
    assert compare_buffers(ref, {"bn.running_mean": torch.ones(3)}, "default")["status"] == "correct"
    assert "no such buffer" in compare_buffers(ref, {}, "default")["detail"]
    assert compare_buffers(ref, {"bn.running_mean": torch.zeros(3)}, "default")["status"] == "mismatch"


# ------------------------------------------------------------------------------------------------ inputs


def test_plan_trials_and_distributions():
    base = [torch.rand(4, 6), 3]
    plan = plan_trials(base, trials=5, seed=42, extra=True)
    extra = ["scale1000", "all_negative", "tiny", "noncontiguous"]
    assert [t.distribution for t in plan] == ["normal"] * 5 + extra
    assert len({t.seed for t in plan}) == len(plan)
    x = base[0]
    assert torch.equal(apply_distribution(base, "scale1000")[0], x * 1000)
    assert (apply_distribution(base, "all_negative")[0] < 0).all()
    view = apply_distribution(base, "noncontiguous")[0]
    assert not view.is_contiguous() and torch.equal(view, x)
    assert apply_distribution(base, "tiny")[1] == 3


def test_plan_trials_without_float_inputs():
    assert [t.distribution for t in plan_trials([torch.arange(5)], 2, 0, True)] == ["normal", "normal"]
    plan = plan_trials([torch.rand(7, 1)], 1, 0, True)  # (7, 1) has no non-contiguous layout of this kind
    assert "noncontiguous" not in [t.distribution for t in plan]
    one_d = apply_distribution([torch.rand(5)], "noncontiguous")[0]
    assert not one_d.is_contiguous()


def test_plan_trials_perturbed_params_last_with_normal_inputs():
    base = [torch.rand(4, 6)]
    plan = plan_trials(base, trials=2, seed=42, extra=False, perturb=True)
    assert [t.distribution for t in plan] == ["normal", "normal", "perturbed_params"]
    assert apply_distribution(base, "perturbed_params") is base


# ------------------------------------------------------------------------------------------------ perturb


def _norms() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.LayerNorm(6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 3))


def test_perturbed_state_dict_moves_every_float_entry_deterministically():
    model = _norms()
    model[1].running_mean.fill_(0.5)
    state = perturbed_state_dict(model, seed=7)
    original = model.state_dict()
    assert set(state) == set(original)
    for name, value in original.items():
        if value.is_floating_point():
            assert not torch.equal(state[name], value), name  # constant 1 and 0 included
        else:
            assert torch.equal(state[name], value), name  # num_batches_tracked
    assert (state["1.running_var"] > 0).all()
    again = perturbed_state_dict(_norms(), seed=7)
    assert all(torch.equal(state[k], v) for k, v in again.items() if not k.startswith("1.running_mean"))
    assert not torch.equal(perturbed_state_dict(model, seed=8)["0.weight"], state["0.weight"])


def test_perturbed_state_dict_without_float_parameters_is_none():
    assert perturbed_state_dict(torch.nn.GELU(), seed=0) is None


def test_state_dict_mismatch_names_keys_and_shapes():
    expected = _norms().state_dict()
    assert state_dict_mismatch(expected, _norms()) is None
    nn = torch.nn
    other = nn.Sequential(nn.LayerNorm(6), nn.BatchNorm1d(5), nn.Linear(6, 3, bias=False))
    message = state_dict_mismatch(expected, other)
    assert "missing 2.bias" in message
    assert "1.weight (5,) instead of (6,)" in message


# ------------------------------------------------------------------------------------------------ outputs


def test_not_plain():
    class Sub(torch.Tensor):
        pass

    assert not_plain(torch.zeros(2), "cpu") is None
    assert not_plain((torch.zeros(2), 1.0, None), "cpu") is None
    assert "tensor subclass" in not_plain(torch.zeros(2).as_subclass(Sub), "cpu")
    assert "not a tensor" in not_plain(object(), "cpu")
    assert "meta" in not_plain(torch.empty(2, device="meta"), "cpu")
    assert "layout" in not_plain(torch.zeros(2, 2).to_sparse(), "cpu")


def test_aliases_and_bitwise_equal():
    x = torch.rand(4, 4)
    assert aliases(x[1:], [x]) == "output shares memory with input 0"
    assert aliases(x.clone(), [x]) is None
    nan = torch.tensor([math.nan, 1.0])
    assert bitwise_equal(nan, nan.clone()) and not bitwise_equal(nan, torch.tensor([math.nan, 2.0]))
    assert bitwise_equal(torch.tensor(3.0), torch.tensor(3.0))
    strided = torch.arange(8.0)[::2]  # a non-contiguous 1-D trial input (seen: level1/45 on the GPU)
    assert bitwise_equal(strided, strided.clone()) and not bitwise_equal(strided, strided + 1)


# ------------------------------------------------------------------------------------------------ guards


def test_function_snapshot_sees_patches_only():
    snapshot = FunctionSnapshot()
    import torch._dynamo  # noqa: F401  (torch wraps a few functions itself on this import: not a patch)

    assert snapshot.changes() == []
    original = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a: None
    try:
        assert snapshot.changes() == ["torch.cuda.synchronize"]
    finally:
        torch.cuda.synchronize = original


def test_precision_state_changes():
    before = precision_state()
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        changes = precision_changes(before, precision_state())
        assert f"float32_matmul_precision: {old} -> medium" in changes
    finally:
        torch.set_float32_matmul_precision(old)


def test_swallowed_exceptions_only_in_candidate_frames():
    def fallback():
        try:
            raise RuntimeError("kernel failed")
        except RuntimeError:
            return 1

    previous = sys.gettrace()
    tracer = SwallowedExceptions(__file__)
    with tracer:
        fallback()
        getattr(object(), "missing", None)  # raised in C, never in a frame of this file
    assert len(tracer.seen) == 1 and tracer.seen[0].startswith("RuntimeError: kernel failed")
    assert sys.gettrace() is previous


# ----------------------------------------------------------------------------------------------- timing, logs


def test_measure_cpu_respects_min_runs_and_time():
    stats = measure(lambda: time.sleep(0.001), "cpu", min_runs=5, min_time_s=0.02)
    assert stats["n"] >= 5 and stats["median_ms"] >= 1.0 and not stats["disagrees"]
    assert summarize([1.0, 2.0, 3.0, 4.0, 100.0])["median_ms"] == 3.0


def test_trim_build_log_keeps_first_errors_with_context():
    log = "\n".join([
        "Error building extension 'x': [1/2] c++ -c /tmp/build/abc/x/main.cpp -o main.o",
        "FAILED: main.o",
        "/tmp/build/abc/x/main.cpp:4:54: error: 'f' was not declared in this scope",
        "    4 | m.def(\"f\", f);",
        "      |           ^",
        "In file included from somewhere.h:1,",
        "/tmp/build/abc/x/cuda.cu(12): error: identifier \"g\" is undefined",
        "ninja: build stopped: subcommand failed.",
    ])
    trimmed = trim_build_log(log)
    assert trimmed.splitlines()[0] == "main.cpp:4:54: error: 'f' was not declared in this scope"
    assert "^" in trimmed and 'cuda.cu(12): error: identifier "g" is undefined' in trimmed
    assert "ninja" not in trimmed and "/tmp/build" not in trimmed
    assert trim_build_log("linker exploded") == "linker exploded"


def test_recorded_loader_is_quiet_and_looks_like_torchs():
    """A verbose build prints the compiler's output instead of putting it in the exception (seed 002 asks
    for verbose=True: its verdict said only "Error building extension"); and a candidate holding the
    wrapped loader must not look like it uses kernelwright."""
    seen = {}

    def load_inline(name, cpp_sources, cuda_sources=None, verbose=False, **kwargs):
        seen.update(name=name, verbose=verbose, kwargs=kwargs)
        return None

    load_inline.__module__ = "torch.utils.cpp_extension"
    wrapped = ExtensionRecorder()._wrap_loader(load_inline)
    wrapped("ext", "", "", True, extra_cflags=["-O3"])
    assert seen == {"name": "ext", "verbose": False, "kwargs": {"extra_cflags": ["-O3"]}}
    wrapped(name="ext", cpp_sources="", verbose=True)
    assert seen["verbose"] is False
    assert wrapped.__module__ == "torch.utils.cpp_extension" and wrapped.__name__ == "load_inline"


def test_wall_clock_cross_check_runs_fewer_times_for_slow_callables():
    from kernelwright.judge.timing import WALL_MIN_RUNS, WALL_RUNS, wall_run_count

    assert wall_run_count(100, 20e-6) == WALL_RUNS  # microseconds: the full cross-check
    assert wall_run_count(12, 20e-6) == 12  # never more runs than the timed series had
    assert wall_run_count(33, 0.053) == WALL_MIN_RUNS  # a 53 ms model: a few runs, not thirty
    assert WALL_MIN_RUNS < wall_run_count(100, 0.02) < WALL_RUNS
    assert wall_run_count(1, 2.0) == 1


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux counters")
def test_a_cuda_series_reports_what_the_host_did_to_its_thread(monkeypatch):
    """`host`: a series that keeps its thread on the CPU (as a launch-bound model's does) shows a CPU share
    near 1, one off the CPU (sleeping) near 0; page faults are counted; huge pages are read."""
    from kernelwright.judge import timing

    class Event:
        def __init__(self, enable_timing: bool = False):
            pass

        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, other) -> float:
            return 1.0

    monkeypatch.setattr(timing, "_Event", Event)
    monkeypatch.setattr(timing, "_synchronize", lambda: None)
    monkeypatch.setattr(timing, "_current_stream", lambda: None)
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda device: torch.zeros(4))

    def spin():
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass

    def touch():   # a fresh mapping each run: a minor fault per page written
        import mmap

        with mmap.mmap(-1, 16 * 4096) as pages:
            for offset in range(0, 16 * 4096, 4096):
                pages[offset] = 1

    busy = timing._measure_cuda_alone(spin, min_runs=20, min_time_s=0.05, warm_s=0.0)["host"]
    idle = timing._measure_cuda_alone(lambda: time.sleep(0.002), min_runs=20, min_time_s=0.05,
                                      warm_s=0.0)["host"]
    # relative: on a loaded 2-core machine a spinning thread may get only part of a core
    assert busy["cpu_share"] > 2 * idle["cpu_share"] + 0.1 and idle["cpu_share"] < 0.3, (busy, idle)
    assert busy["preempted"] >= 0 and idle["huge_pages_mib"] is not None and idle["huge_pages_mib"] >= 0
    faulting = timing._measure_cuda_alone(touch, min_runs=20, min_time_s=0.0, warm_s=0.0)["host"]
    assert faulting["faults"] >= 20
    # the rounds' host reports reach the verdict's timing (absent where no series had one)
    rounds = [{"median_ms": 1.0, "iqr_ms": 0.0, "n": 1, "wall_median_ms": 1.0, "disagrees": False,
               "host": busy}] * 2
    assert timing.public(timing.combine_rounds(rounds))["round_host"] == [busy, busy]
    assert "round_host" not in timing.combine_rounds([{**r, "host": None} for r in rounds])


def test_the_cuda_warm_up_keeps_few_runs_queued(monkeypatch):
    """The CUDA timing's warm-up on a simulated stream (an event completes when waited for, with all queued
    before it): it never has more than WARM_IN_FLIGHT runs queued (unbounded, it queued hundreds of a
    GEMM's runs), and it waits for the run WARM_IN_FLIGHT back, never for the one just queued (gaps that a
    launch-bound model's series does not have)."""
    from kernelwright.judge import timing

    pending: list = []                     # the warm-up's events recorded and not yet complete
    most_queued, waits, warm_runs = [0], [0], [0]

    class Event:
        def __init__(self, enable_timing: bool = False):
            self.series = enable_timing    # the timed series' events; the warm-up's time nothing

        def record(self, stream=None):
            if not self.series:
                pending.append(self)
                most_queued[0] = max(most_queued[0], len(pending))
                warm_runs[0] += 1

        def synchronize(self):
            waits[0] += 1
            del pending[:pending.index(self) + 1]

        def elapsed_time(self, other) -> float:
            return 1.0

    monkeypatch.setattr(timing, "_Event", Event)
    monkeypatch.setattr(timing, "_synchronize", pending.clear)
    monkeypatch.setattr(timing, "_current_stream", lambda: None)
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda device: torch.zeros(4))
    timing._measure_cuda_alone(lambda: time.sleep(0.001), min_runs=10, min_time_s=0.01)
    assert warm_runs[0] > 2 * timing.WARM_IN_FLIGHT                  # 0.1 s of 1 ms runs
    assert most_queued[0] == timing.WARM_IN_FLIGHT
    assert waits[0] == warm_runs[0] - timing.WARM_IN_FLIGHT           # one wait per run beyond the first few


def test_a_series_in_turns_keeps_its_runs_and_every_side_gets_as_many_turns():
    """turn_blocks: the series' runs split evenly over round(min_time_s / TURN_S) turns whatever the runs
    (both sides of a lockstep round take turns in step); max_turns: those turns and the wall-clock check's,
    the most the judge grants a side."""
    from kernelwright.judge.timing import TURN_S, max_turns, turn_blocks

    for runs in (1, 3, 10, 97, 1000):
        for min_time_s in (0.0, 0.004, 0.1, 1.0):
            assert turn_blocks(runs, min_time_s, None) == [runs]
            blocks = turn_blocks(runs, min_time_s, lambda: None)
            assert sum(blocks) == runs and max(blocks) - min(blocks) <= 1
            assert len(blocks) == max(1, round(min_time_s / TURN_S)) == max_turns(min_time_s) - 1


def test_measure_in_turns_on_the_cpu_asks_before_each_turn_and_leaves_the_waits_out():
    from kernelwright.judge.timing import TURN_S

    asked = []

    def take_turn():
        asked.append(time.perf_counter())
        time.sleep(0.01)

    stats = measure(lambda: time.sleep(0.001), "cpu", min_runs=20, min_time_s=0.05, take_turn=take_turn)
    assert len(asked) == round(0.05 / TURN_S) and stats["n"] >= 20
    assert stats["turn_wait_s"] >= 0.01 * (len(asked) - 1)
    assert stats["seconds"] < time.perf_counter() - asked[0] - 0.01 * (len(asked) - 1)
