"""Timing shared by the kernel-family benchmarks in this folder (imported as a sibling module when a
benchmark script runs; not a benchmark itself)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def time_ms(fn: Callable[[], object], flush: torch.Tensor, runs: int = 30) -> float:
    """Median of `runs` CUDA-event timings after 3 warm-up calls; `flush` is zeroed before each run so
    every run starts with a cold L2."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
