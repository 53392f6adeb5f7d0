"""Which instantiation of a generated row kernel a call launched (`kernel<VEC, CL, CACHE>`), read from
the CUDA kernel names the profiler records: the launcher picks the variant at run time (alignment,
cluster support), so tests and benchmarks check the path actually taken. Shared by the reduction GPU
tests and `bench/kernels/bench_reductions.py`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

VARIANT = re.compile(r"(kw_reduce_\w+)::kernel<(\d+), (\d+), (true|false)>")


@dataclass(frozen=True)
class RowVariant:
    vec: int          # elements per access
    cluster: int      # blocks per row (a thread-block cluster when > 1)
    cache: bool       # the row held in shared memory between passes

    def __str__(self) -> str:
        return f"vec{self.vec} cluster{self.cluster} {'cached' if self.cache else 'uncached'}"


def launched_variants(fn: Callable[[], object]) -> list[RowVariant]:
    """The row-kernel variants launched by one call of `fn`, in launch order."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    found = []
    for event in prof.events():
        match = VARIANT.search(event.name)
        if match:
            found.append(RowVariant(int(match.group(2)), int(match.group(3)), match.group(4) == "true"))
    return found
