"""Reduction-family kernels run for Nsight Compute, or timed once each: the loop behind the `ncu_rows.py`
scripts of bench/results (each names its graphs and calls `run`).

Under `NCU=1` every graph's kernel runs once (for `ncu -k regex:kw_reduce --kernel-name-base mangled`);
otherwise each is warmed up twice and one call is timed with CUDA events. Inputs are standard normal,
parameters uniform in [0.5, 1.5). Run from the repository root.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch

sys.path.insert(0, "tests/codegen")
sys.path.insert(0, "bench/kernels")
from _timing import build_groups  # noqa: E402
from bench_reductions import workload_group  # noqa: E402


def run(graphs: dict, describe: Callable = lambda spec: (spec.cluster,)) -> None:
    """Each of `graphs` (name -> Graph, a bench_reductions forcing suffix allowed) built as one extension,
    then profiled or timed; `describe(spec)` adds launch fields to the timed line."""
    built = build_groups(graphs, workload_group)
    for name, graph in graphs.items():
        kernel, group = built[name]
        gen = torch.Generator(device="cuda").manual_seed(0)
        leaves = {id(n): torch.randn(n.shape, device="cuda", generator=gen) for n in graph.inputs}
        leaves.update({id(p): torch.rand(p.shape, device="cuda", generator=gen) + 0.5 for p in graph.params})
        args = [leaves[id(n)] for n in group.inputs]
        if os.environ.get("NCU"):
            kernel(args)
            torch.cuda.synchronize()
            print(name, flush=True)
            continue
        for _ in range(2):
            kernel(args)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        kernel(args)
        end.record()
        end.synchronize()
        print(name, *describe(group.config[0]), f"{start.elapsed_time(end):.3f} ms", flush=True)
