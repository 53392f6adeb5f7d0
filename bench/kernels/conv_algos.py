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
from _timing import convs_of, l2_flush, problems_on_gpu, time_ms  # noqa: E402


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
    flush = l2_flush()
    results = []
    for problem, model, inputs in problems_on_gpu(args.problems):
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
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
