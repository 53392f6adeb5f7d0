"""The GPU busy share of a forward: the fraction of its wall time in which the GPU runs any of its work.

A small-batch network can spend most of a forward in Python, the dispatcher and kernel launches while the GPU
idles between microsecond kernels (launch-bound); a large one keeps the GPU busy throughout. The share says
which, for eager and for the candidate: a candidate that fuses kernels or replays a CUDA graph raises it.

How: after the timed rounds, a few more forwards under torch.profiler with only the CUDA activity (no CPU ops
recorded, so the host pays as little as possible for being watched). Busy time is the union of the device
intervals of kernels, memcpys and memsets (overlapping intervals, e.g. on two streams, count once); wall time
runs from before the first call to after a synchronize following the last, on the host clock. The profiler
still costs the host a little per launch, so a launch-bound share reads slightly low.

Kineto leaves CUPTI attached after a profiling session unless `TEARDOWN_CUPTI=1` when it stops, and an
attached CUPTI slows every later launch, so the profiler runs with teardown on. Even so, launches stayed
~11% slower in the profiled process (H100), so no timing follows a profiled pass in one process: the
candidate's is its last act, and the judge closes the reference process after eager's. A failure here
costs only the share (`busy_share_or_reason`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from time import perf_counter

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

# Bound at import, before any candidate code runs (as in timing.py).
_synchronize = torch.cuda.synchronize
_profile = profile

BUSY_CALLS = 5          # profiled forwards at most ...
BUSY_SECONDS = 0.1      # ... and about this long in all: a forward of 100 ms is profiled once
BUSY_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})   # Kineto's names of device work
TOP_KERNELS, TOP_NAME_CHARS = 6, 100   # the per-kernel breakdown: its rows, and the characters of a name


def merged_length(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals: overlapping or touching ones count once, empty or
    reversed ones not at all."""
    total, reach = 0.0, None
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def device_work(events: Iterable) -> list:
    """The profiler events that are device work (kernel, memcpy, memset); an event without an activity type
    (older torch) counts when it ran on the device."""
    work = []
    for event in events:
        if event.device_type != DeviceType.CUDA:
            continue
        kind = getattr(event, "activity_type", None)
        if not kind or kind in BUSY_ACTIVITIES:
            work.append(event)
    return work


def device_intervals(events: Iterable) -> list[tuple[float, float]]:
    """(start, end) in microseconds of each event of `device_work`."""
    return [(event.time_range.start, event.time_range.end) for event in device_work(events)]


def top_device_work(events: Iterable, calls: int, count: int = TOP_KERNELS) -> list[list]:
    """[name, microseconds per call] of the `count` operations of `device_work` (by name) that took longest,
    longest first: where a forward's device time goes, and which kernel moved when two timings of one model
    differ."""
    totals: dict[str, float] = {}
    for event in device_work(events):   # by the whole name: ATen's kernels share long prefixes
        totals[event.name] = totals.get(event.name, 0.0) + event.time_range.end - event.time_range.start
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:count]
    return [[name[:TOP_NAME_CHARS], round(total / calls, 2)] for name, total in ranked]


def busy_share(fn: Callable[[], object], max_calls: int = BUSY_CALLS) -> dict:
    """{"gpu_busy_share", "busy_ms", "wall_ms", "kernels", "calls", "top"}: the share over a few calls of `fn`
    (one unprofiled call first sizes the run) and, per call, the device's busy time, the wall time, the number
    of device operations and the longest of them (`top_device_work`). Raises what the profiler raises; a run
    that records no device work is a RuntimeError."""
    _synchronize()
    start = perf_counter()
    fn()
    _synchronize()
    calls = max(1, min(max_calls, math.ceil(BUSY_SECONDS / max(perf_counter() - start, 1e-6))))
    with _cupti_teardown(), _profile(activities=[ProfilerActivity.CUDA]) as prof:
        _synchronize()
        start = perf_counter()
        for _ in range(calls):
            fn()
        _synchronize()
        wall_us = (perf_counter() - start) * 1e6
    # Kineto runs the CUPTI teardown from a callback on the process's next CUDA call: make one now. A test
    # process whose last CUDA work was this profiled pass hung at exit for minutes (H100, 2026-11-26).
    _synchronize()
    events = prof.events()
    intervals = device_intervals(events)
    if not intervals:
        raise RuntimeError("the profiler recorded no GPU work")
    busy_us = merged_length(intervals)
    return {
        "gpu_busy_share": round(min(busy_us / wall_us, 1.0), 4),
        "busy_ms": round(busy_us / calls / 1e3, 5),
        "wall_ms": round(wall_us / calls / 1e3, 5),
        "kernels": round(len(intervals) / calls, 1),
        "calls": calls,
        "top": top_device_work(events, calls),
    }


def busy_share_or_reason(fn: Callable[[], object], device: str) -> dict:
    """`busy_share` on CUDA, or {"error": why} (never raises for the profiler's sake: the share is a report,
    never part of the verdict)."""
    if device != "cuda":
        return {"error": "measured on CUDA devices only"}
    try:
        return busy_share(fn)
    except Exception as exc:  # torch.profiler / Kineto / CUPTI may fail in many ways; the verdict must not
        text = str(exc).strip().splitlines()
        return {"error": f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__}


def model_busy_share(model: torch.nn.Module, inputs: list, device: str) -> dict:
    """`busy_share_or_reason` of `model(*inputs)` without autograd (what both judge workers profile)."""

    def forward():
        with torch.no_grad():
            model(*inputs)

    return busy_share_or_reason(forward, device)


@contextmanager
def _cupti_teardown():
    """TEARDOWN_CUPTI=1 while the profiler runs and stops (Kineto reads it then), the previous value after."""
    before = os.environ.get("TEARDOWN_CUPTI")
    os.environ["TEARDOWN_CUPTI"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TEARDOWN_CUPTI", None)
        else:
            os.environ["TEARDOWN_CUPTI"] = before


def launch_bound_section(eager: dict, candidate: dict | None = None) -> dict:
    """The verdict's `launch_bound` entry from the two measurements (each `busy_share`'s dict or {"error"}):
    `eager_gpu_busy_share` and `candidate_gpu_busy_share` where measured, the per-call details under `eager`
    and `candidate`, and under `errors` why a side was not measured."""
    section: dict = {}
    for side, result in (("eager", eager), ("candidate", candidate)):
        if result is None:
            continue
        if "error" in result:
            section.setdefault("errors", {})[side] = result["error"]
            continue
        section[f"{side}_gpu_busy_share"] = result["gpu_busy_share"]
        section[side] = {k: v for k, v in result.items() if k != "gpu_busy_share"}
    return section


# Under this share of GPU busy time a model's speed is its host's: the CPU work of its launches.
HOST_BOUND_SHARE = 0.3


def host_bound(*measured: dict | None) -> bool:
    """Whether any side measured (each `busy_share`'s dict, {"error"} or None) kept the GPU busy less than
    HOST_BOUND_SHARE of the time. Such a model's time depends on the process that runs it: the level-3
    launch-bound A/A copies (busy share 0.07-0.12) sat up to 5-7% from eager, every round of a pair on
    the same side, while the busiest launch-bound-free problem there was at 0.53 (H200, 2026-11-28)."""
    return any(m is not None and "gpu_busy_share" in m and m["gpu_busy_share"] < HOST_BOUND_SHARE
               for m in measured)
