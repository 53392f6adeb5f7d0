"""Where the time of a conv chain goes: eager, torch.compile and (optionally) an emitted ModelNew file,
each timed (CUDA events, cold L2) and profiled (the CUDA kernels of one call, their time and the share of
the call), plus every convolution of the model timed alone in NCHW and in channels-last layout.

    python bench/kernels/profile_conv.py OUT.json PROBLEM [PROBLEM ...] [--emitted DIR]

`--emitted DIR`: emitted files are profiled too, found as DIR/<level>/<name>.py (a bench's
`candidates/kernelwright` folder) or DIR/<level>__<name>.py (`kernelwright optimize` outputs).
Prints a table per problem; the JSON holds the same numbers.
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


def kernels_of(fn, top: int = 8) -> list[dict]:
    """The CUDA kernels of one call of `fn` (after warm-up), by total device time."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        row = rows.setdefault(event.name, {"kernel": event.name[:110], "calls": 0, "ms": 0.0})
        row["calls"] += 1
        row["ms"] += event.device_time_total / 1000 if hasattr(event, "device_time_total") else 0.0
    ranked = sorted(rows.values(), key=lambda r: -r["ms"])
    return ranked[:top]


def conv_layouts(model: torch.nn.Module, inputs: list, flush: torch.Tensor) -> list[dict]:
    """Each conv module timed alone on its real input: NCHW, channels-last (input already converted), and
    the input conversion alone."""
    out = []
    for module, x in convs_of(model, inputs)[:4]:
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        if x.dim() not in (4, 5):
            fmt = None
        row = {"conv": repr(module)[:100], "input": list(x.shape)}
        with torch.no_grad():
            row["nchw_ms"] = time_ms(lambda module=module, x=x: module(x), flush)
            if fmt is not None:
                xc = x.contiguous(memory_format=fmt)
                mc = copy.deepcopy(module).to(memory_format=fmt)
                row["cl_ms"] = time_ms(lambda mc=mc, xc=xc: mc(xc), flush)
                bias, mc.bias = mc.bias, None
                row["cl_nobias_ms"] = time_ms(lambda mc=mc, xc=xc: mc(xc), flush)
                mc.bias = bias
                row["to_cl_ms"] = time_ms(lambda x=x, fmt=fmt: x.contiguous(memory_format=fmt), flush)
                row["copy_ms"] = time_ms(lambda x=x: x.clone(), flush)
        out.append(row)
    return out


def _emitted(folder: str | None, problem_id: str) -> Path | None:
    if folder is None:
        return None
    for path in (Path(folder) / f"{problem_id}.py", Path(folder) / (problem_id.replace("/", "__") + ".py")):
        if path.is_file():
            return path
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--emitted", default=None)
    args = parser.parse_args()
    flush = l2_flush()
    results = []
    for problem, model, inputs in problems_on_gpu(args.problems):
        entry = {"problem": problem.id, "systems": {}}
        systems = {"eager": model, "compile": torch.compile(model)}
        emitted = _emitted(args.emitted, problem.id)
        if emitted is not None:
            ns: dict = {}
            exec(compile(emitted.read_text(), str(emitted), "exec"), ns)
            systems["kernelwright"] = problem.build_model(device="cuda", model_class=ns["ModelNew"])
        for name, m in systems.items():
            def call(m=m, inputs=inputs):
                with torch.no_grad():
                    return m(*inputs)
            ms = time_ms(call, flush)
            entry["systems"][name] = {"ms": ms, "kernels": kernels_of(call)}
        entry["convs"] = conv_layouts(model, inputs, flush)
        results.append(entry)
        print(f"\n== {problem.id}")
        for name, s in entry["systems"].items():
            print(f"  {name}: {s['ms']:.3f} ms")
            for k in s["kernels"]:
                print(f"      {k['ms']:8.3f} ms x{k['calls']:<3} {k['kernel']}")
        for c in entry["convs"]:
            rounded = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in c.items()}
            print("  conv", json.dumps(rounded))
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
