"""The GPU busy share (judge/busy.py) without a GPU: the interval union, which profiler events count as
device work, its failing soft, the verdict's `launch_bound` entry and how `eval` prints it. On a GPU:
test_gpu.py::test_launch_bound_share_of_a_small_batch_network."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from corpus import CANDIDATES
from rich.console import Console
from torch.autograd import DeviceType

from kernelwright.judge.busy import (
    TOP_NAME_CHARS,
    busy_share_or_reason,
    device_intervals,
    launch_bound_section,
    merged_length,
    top_device_work,
)
from kernelwright.judge.report import busy_text, print_verdict


@pytest.mark.parametrize("intervals,length", [
    ([], 0.0),
    ([(0.0, 2.0)], 2.0),
    ([(0.0, 2.0), (3.0, 4.0)], 3.0),                 # disjoint: the gap is idle
    ([(0.0, 2.0), (1.0, 3.0)], 3.0),                 # overlapping (two streams): counted once
    ([(0.0, 2.0), (2.0, 3.0)], 3.0),                 # touching
    ([(0.0, 10.0), (2.0, 3.0), (4.0, 5.0)], 10.0),   # nested in a long kernel
    ([(5.0, 6.0), (0.0, 1.0), (0.5, 5.5)], 6.0),     # unsorted, chained overlaps
    ([(1.0, 1.0), (3.0, 2.0), (0.0, 1.0)], 1.0),     # empty and reversed spans count nothing
])
def test_merged_length_is_the_length_of_the_union(intervals, length):
    assert merged_length(intervals) == pytest.approx(length)


def _event(device_type, activity_type, start, end, name="op"):
    return SimpleNamespace(device_type=device_type, activity_type=activity_type, name=name,
                           time_range=SimpleNamespace(start=start, end=end))


def test_device_intervals_are_kernels_memcpys_and_memsets_on_the_device():
    events = [
        _event(DeviceType.CPU, "cpu_op", 0.0, 50.0),
        _event(DeviceType.CPU, "cuda_runtime", 1.0, 2.0),               # cudaLaunchKernel: host side
        _event(DeviceType.CUDA, "kernel", 3.0, 5.0),
        _event(DeviceType.CUDA, "gpu_memcpy", 6.0, 7.0),
        _event(DeviceType.CUDA, "gpu_memset", 8.0, 9.0),
        _event(DeviceType.CUDA, "gpu_user_annotation", 0.0, 50.0),      # a range over kernels, not work
        _event(DeviceType.CUDA, None, 10.0, 11.0),                      # no activity type: device work
    ]
    assert device_intervals(events) == [(3.0, 5.0), (6.0, 7.0), (8.0, 9.0), (10.0, 11.0)]


def test_top_device_work_sums_each_name_per_call_longest_first():
    events = [
        _event(DeviceType.CUDA, "kernel", 0.0, 4.0, "gemm"),
        _event(DeviceType.CUDA, "kernel", 5.0, 6.0, "relu"),
        _event(DeviceType.CUDA, "kernel", 10.0, 14.0, "gemm"),
        _event(DeviceType.CUDA, "gpu_memset", 15.0, 18.0, "Memset (Device)"),
        _event(DeviceType.CUDA, "gpu_user_annotation", 0.0, 50.0, "forward"),
        _event(DeviceType.CPU, "cpu_op", 0.0, 50.0, "aten::mm"),
    ]
    assert top_device_work(events, calls=2) == [["gemm", 4.0], ["Memset (Device)", 1.5], ["relu", 0.5]]
    assert top_device_work(events, calls=2, count=1) == [["gemm", 4.0]]
    # names alike in their first TOP_NAME_CHARS characters stay apart (ATen's kernels share long prefixes)
    prefix = "void at::native::elementwise_kernel<" + "x" * TOP_NAME_CHARS
    alike = [_event(DeviceType.CUDA, "kernel", 0.0, 2.0, prefix + "Mul"),
             _event(DeviceType.CUDA, "kernel", 2.0, 3.0, prefix + "Div")]
    assert top_device_work(alike, calls=1) == [[prefix[:TOP_NAME_CHARS], 2.0], [prefix[:TOP_NAME_CHARS], 1.0]]


def test_busy_share_fails_soft():
    assert busy_share_or_reason(lambda: None, "cpu") == {"error": "measured on CUDA devices only"}
    # No CUDA on this machine: the profiler pass raises, and only the share is lost.
    result = busy_share_or_reason(lambda: None, "cuda")
    assert set(result) == {"error"} and result["error"]


EAGER = {"gpu_busy_share": 0.31, "busy_ms": 0.12, "wall_ms": 0.39, "kernels": 49.0, "calls": 5}
CANDIDATE = {"gpu_busy_share": 0.85, "busy_ms": 0.05, "wall_ms": 0.059, "kernels": 25.0, "calls": 5}


def test_launch_bound_section_keeps_shares_details_and_reasons():
    assert launch_bound_section(EAGER, CANDIDATE) == {
        "eager_gpu_busy_share": 0.31, "candidate_gpu_busy_share": 0.85,
        "eager": {"busy_ms": 0.12, "wall_ms": 0.39, "kernels": 49.0, "calls": 5},
        "candidate": {"busy_ms": 0.05, "wall_ms": 0.059, "kernels": 25.0, "calls": 5},
    }
    failed = launch_bound_section(EAGER, {"error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"})
    assert "candidate_gpu_busy_share" not in failed and "candidate" not in failed
    assert failed["errors"] == {"candidate": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}
    assert set(launch_bound_section(EAGER)) == {"eager_gpu_busy_share", "eager"}     # the reference report


def test_busy_text_names_each_side():
    text = busy_text(launch_bound_section(EAGER, CANDIDATE))
    assert text == ("eager 31% (0.12 ms busy of 0.39 ms a forward, 49 kernels); "
                    "candidate 85% (0.05 ms busy of 0.059 ms a forward, 25 kernels)")
    failed = busy_text(launch_bound_section(EAGER, {"error": "the candidate was not timed"}))
    assert failed.endswith("; candidate not measured: the candidate was not timed")


def _printed(verdict: dict) -> str:
    out = io.StringIO()
    print_verdict(verdict, Console(file=out, width=200))
    return out.getvalue()


def test_eval_prints_the_share_only_where_measured():
    verdict = {"status": "correct", "problem_id": "level3/17_DeepMLPBatch1", "device": "cuda",
               "timings": {}, "flags": {}, "env": {}}
    assert "GPU busy" not in _printed(verdict)
    verdict["launch_bound"] = launch_bound_section(EAGER, CANDIDATE)
    line = next(line for line in _printed(verdict).splitlines() if "GPU busy" in line)
    assert "eager 31%" in line and "candidate 85%" in line


def test_a_cpu_verdict_has_no_share(cpu_judges):
    verdict = cpu_judges("gelu").evaluate(CANDIDATES / "correct_gelu.py")
    assert verdict["status"] == "correct" and verdict["timings"]["candidate"]
    assert "launch_bound" not in verdict


def test_eval_prints_the_reduce_overhead_baseline_where_timed():
    """`eval --reduce-overhead`: torch.compile's CUDA-graph mode timed beside the default one."""
    from kernelwright.cli import build_parser
    from kernelwright.commands.eval import options_from_args

    args = build_parser().parse_args(["eval", "level1/01_ReLU", "x.py", "--reduce-overhead"])
    assert options_from_args(args).reduce_overhead
    stats = {"median_ms": 0.5, "iqr_ms": 0.01, "n": 100}
    verdict = {"status": "correct", "problem_id": "level3/17_DeepMLPBatch1", "device": "cuda",
               "timings": {"candidate": stats}, "flags": {}, "env": {}}
    assert "reduce-overhead" not in _printed(verdict)
    verdict["timings"]["compile_reduce_overhead"] = stats
    verdict["speedup_vs_compile_reduce_overhead"] = 1.0
    printed = _printed(verdict)
    assert "time compile_reduce_overhead" in printed and "vs torch.compile reduce-overhead" in printed


def test_eval_prints_the_speedup_with_its_spread_over_the_rounds():
    stats = {"median_ms": 0.5, "iqr_ms": 0.01, "n": 100}
    verdict = {"status": "correct", "problem_id": "level3/17_DeepMLPBatch1", "device": "cuda",
               "timings": {"candidate": stats}, "flags": {}, "env": {}, "speedup_vs_eager": 2.0,
               "speedup_vs_eager_rounds": [1.9, 2.0, 2.0, 2.1, 2.0], "speedup_vs_eager_spread": 0.025}
    assert "2.000x ±2.5% over 5 paired timing rounds" in _printed(verdict)
    verdict["speedup_vs_eager_spread"] = 0.0   # no spread to tell: the ratio alone
    assert "±" not in _printed(verdict)
