"""Per-kernel verification on the GPU: each fused group's kernel checked against ATen on the model's real
values and timed against it; the compiler keeps the kernel or drops the group back to ATen. No variants
are searched and nothing is cached: each GEMM's variant is chosen by shape rules in `fuse/gemm.py`."""

from kernelwright.verify.measure import GroupReport, measure_groups, time_ms

__all__ = ["GroupReport", "measure_groups", "time_ms"]
