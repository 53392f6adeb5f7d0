"""Timing shared by the kernel-family benchmarks in this folder (imported as a sibling module when a
benchmark script runs; not a benchmark itself)."""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.registry import render_group
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Graph
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


class ClockSampler:
    """The GPU's SM clock and power draw while a block runs (`with ClockSampler() as clocks: ...`, then
    `clocks.summary()`: mean and lowest SM MHz, mean W), sampled every `period_ms` by `nvidia-smi`: a
    tensor-core kernel at full rate can hit the power limit and lower its clock, which an instruction count
    does not show. Without nvidia-smi the summary is None."""

    def __init__(self, period_ms: int = 50) -> None:
        self.period_ms, self.process, self.samples = period_ms, None, []   # samples: (MHz, W)

    def __enter__(self) -> ClockSampler:
        smi = shutil.which("nvidia-smi")
        if smi is not None:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            device = (f"{getattr(props, 'pci_domain_id', 0):08X}:{props.pci_bus_id:02X}:"
                      f"{props.pci_device_id:02X}.0" if hasattr(props, "pci_bus_id") else "0")
            self.process = subprocess.Popen(
                [smi, "-i", device, "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                 f"--loop-ms={self.period_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            out, _ = self.process.communicate()
            for line in out.splitlines():
                try:
                    mhz, watts = map(float, line.split(","))
                except ValueError:   # "[N/A]", a cut-off last line
                    continue
                self.samples.append((mhz, watts))

    def summary(self) -> dict | None:
        samples = self.samples
        if not samples:
            return None
        return {"sm_mhz": statistics.mean(m for m, _ in samples), "sm_mhz_min": min(m for m, _ in samples),
                "watts": statistics.mean(w for _, w in samples), "samples": len(samples)}


def copy_bandwidth(flush: torch.Tensor) -> float:
    """GB/s of a 2 GiB device-to-device copy (read + write counted)."""
    src = torch.empty(2**29, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), flush)
    return 2 * src.numel() * 4 / ms / 1e6


def start(description: str, workloads: Iterable[str]
          ) -> tuple[argparse.Namespace, torch.Tensor, dict, list[str]]:
    """A workload benchmark's start: its command line (OUT.json, --only NAME..., --no-compile), an L2 flush
    buffer, the results it fills (device, torch, the copy bandwidth, which it prints) and the workloads to
    run, in order."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile timings")
    args = parser.parse_args()
    flush = torch.empty(64 * 2**20, dtype=torch.int8, device="cuda")     # larger than the 50 MB L2
    copy_gbs = copy_bandwidth(flush)
    print(f"{torch.cuda.get_device_name()}: device-to-device copy {copy_gbs:.0f} GB/s", flush=True)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_gbs": copy_gbs,
               "workloads": {}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    return args, flush, results, [n for n in workloads if not args.only or n in args.only]


def build_groups(graphs: dict[str, Graph], pick: Callable[[str, Graph], FusedGroup]) -> dict[str, tuple]:
    """One extension holding the kernel of each workload's group (`pick(name, graph)`: the group, its launch
    forced as the workload's name says); per workload (kernel function, group)."""
    groups, kernels = {}, {}
    for name, graph in graphs.items():
        group = pick(name, graph)
        kernel = render_group(group)
        kernels.setdefault(kernel.name, kernel)
        groups[name] = (kernel.name, group)
    module = build_extension(assemble(list(kernels.values()))).module
    return {name: (getattr(module, kernel_name), group) for name, (kernel_name, group) in groups.items()}


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
