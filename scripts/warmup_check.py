"""The judge's timing warm-up three ways, on eager models of the bundled suite (by default one launch-bound,
one GPU-bound): the unbounded loop it had (it queues runs until the launch queue is full), a loop that waits
for every run, and `timing.measure` as it is (at most WARM_IN_FLIGHT runs queued). For each: the warm-up's
seconds and the median of a timed series right after it. The series should agree across the three (a
warm-up must leave the GPU and CPU as the series finds them) while the current one takes about 0.1 s.

    python scripts/warmup_check.py [PROBLEM...]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from kernelwright.judge import timing
from kernelwright.problem import load_problem

DEFAULT_PROBLEMS = ("level3/15_FireModuleNetBatch1", "level1/41_MatmulSquare")


def warm(fn: Callable[[], object], flush: torch.Tensor, wait_each: bool) -> None:
    """The warm-up as it was (`wait_each` False: unbounded) or waiting for every run."""
    torch.cuda.synchronize()
    start, runs = time.perf_counter(), 0
    while runs < 3 or time.perf_counter() - start < 0.1:
        flush.zero_()
        fn()
        if wait_each:
            torch.cuda.synchronize()
        runs += 1
    torch.cuda.synchronize()


def series_median_ms(fn: Callable[[], object], flush: torch.Tensor, runs: int = 200) -> float:
    def event() -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    events = [(event(), event()) for _ in range(runs)]
    for begin, end in events:
        flush.zero_()
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return sorted(begin.elapsed_time(end) for begin, end in events)[runs // 2]


def main() -> int:
    for problem_id in sys.argv[1:] or DEFAULT_PROBLEMS:
        problem = load_problem(problem_id)
        model, inputs = problem.build_model(42, "cuda"), problem.inputs(43, "cuda")
        flush = timing.l2_flush_buffer("cuda")

        def forward(model=model, inputs=inputs) -> object:
            return model(*inputs)

        with torch.no_grad():
            for round_ in range(3):
                for name, wait_each in (("unbounded", False), ("waiting", True)):
                    started = time.perf_counter()
                    warm(forward, flush, wait_each)
                    seconds = time.perf_counter() - started
                    median = series_median_ms(forward, flush)
                    print(f"{problem_id} round {round_} warm-up {name}: {seconds:.2f} s, "
                          f"series median {median:.3f} ms")
                started = time.perf_counter()
                stats = timing.measure(forward, "cuda", 10, 0.1, locked=True)
                # the whole measure (warm-up, series, wall check): about 0.1 s more than its warm-up
                print(f"{problem_id} round {round_} measure as it is (all of it): "
                      f"{time.perf_counter() - started:.2f} s, median {stats['median_ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
