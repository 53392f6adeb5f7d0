"""Timing shared by the kernel-family benchmarks in this folder (imported as a sibling module when a
benchmark script runs; not a benchmark itself)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator

import torch

from kernelwright.problem import Problem, load_problem


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


def l2_flush() -> torch.Tensor:
    """A 256 MB buffer for `time_ms` to zero before each run (larger than the H100's 50 MB L2)."""
    return torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")


def problems_on_gpu(specs: list[str]) -> Iterator[tuple[Problem, torch.nn.Module, list]]:
    """(problem, model, inputs) on the GPU for each problem id or file, its memory freed after its turn."""
    for spec in specs:
        problem = load_problem(spec)
        model, inputs = problem.build_model(device="cuda"), problem.inputs(device="cuda")
        yield problem, model, inputs
        del model, inputs
        torch.cuda.empty_cache()


def convs_of(model: torch.nn.Module, inputs: list) -> list[tuple[torch.nn.Module, torch.Tensor]]:
    """Every distinct conv module of the model with the input it received in one forward."""
    seen: dict[int, tuple[torch.nn.Module, torch.Tensor]] = {}

    def hook(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        seen.setdefault(id(module), (module, args[0].detach()))

    hooks = [m.register_forward_hook(hook) for m in model.modules()
             if isinstance(m, torch.nn.modules.conv._ConvNd)]
    with torch.no_grad():
        model(*inputs)
    for h in hooks:
        h.remove()
    return list(seen.values())
