"""What cuDNN's algorithm search (`torch.backends.cudnn.benchmark`) is worth on each convolution of a
problem: every conv module is timed alone on its real input (CUDA events, cold L2) with cuDNN's heuristic
choice (eager's default) and with the measured choice, in NCHW and channels-last, and its error against a
float64 run of the same conv is printed beside eager's.

    python bench/kernels/conv_algos.py OUT.json PROBLEM [PROBLEM ...]

Prints a row per convolution; the JSON holds the same numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import time_ms  # noqa: E402

from kernelwright.problem import load_problem  # noqa: E402


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


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def measure(module: torch.nn.Module, x: torch.Tensor, flush: torch.Tensor) -> dict:
    row: dict = {"conv": repr(module)[:110], "input": list(x.shape)}
    with torch.no_grad():
        ref = copy.deepcopy(module).double()(x.double())
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
        layouts = {"nchw": (module, x)}
        if fmt is not None:
            layouts["cl"] = (copy.deepcopy(module).to(memory_format=fmt), x.contiguous(memory_format=fmt))
        for layout, (m, xin) in layouts.items():
            for bench in (False, True):
                with torch.backends.cudnn.flags(enabled=True, benchmark=bench, deterministic=False,
                                                allow_tf32=torch.backends.cudnn.allow_tf32):
                    key = f"{layout}_{'search' if bench else 'heuristic'}"
                    row[key + "_ms"] = time_ms(lambda m=m, xin=xin: m(xin), flush)
                    row[key + "_err"] = rel_error(m(xin), ref)
    del ref
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("problems", nargs="+")
    args = parser.parse_args()
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    results = []
    for spec in args.problems:
        problem = load_problem(spec)
        model = problem.build_model(device="cuda")
        inputs = problem.inputs(device="cuda")
        for module, x in convs_of(model, inputs):
            try:
                row = measure(module, x, flush)
            except torch.OutOfMemoryError as exc:
                row = {"conv": repr(module)[:110], "error": str(exc)[:200]}
            row["problem"] = problem.id
            results.append(row)
            times = " ".join(f"{k[:-3]} {v:.3f}" for k, v in row.items() if k.endswith("_ms"))
            errs = " ".join(f"{v:.1e}" for k, v in row.items() if k.endswith("_err"))
            print(f"{problem.id:40s} {str(row.get('input')):24s} {times} | err {errs}", flush=True)
        del model, inputs
        torch.cuda.empty_cache()
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
