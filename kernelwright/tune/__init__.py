"""Measuring generated kernels on the GPU: correctness against ATen per fused group, timing, and the
keep-or-fall-back decision."""

from kernelwright.tune.measure import GroupReport, measure_groups, time_ms

__all__ = ["GroupReport", "measure_groups", "time_ms"]
