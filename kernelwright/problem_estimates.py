"""Size estimates of a problem, computed on the meta device (no memory, no time): its input shapes, the
FLOPs of its matmul/conv-like ops, and the least bytes it moves (inputs, parameters, outputs).

`kernelwright problems` lists the bundled problems' estimates from `problems/estimates.json` without
importing torch; `python -m kernelwright.problem_estimates` rewrites that file after a problem changes
(tests/test_problem.py checks that it is current).
"""

from __future__ import annotations

import json

import torch
from torch.utils.flop_counter import FlopCounterMode

from kernelwright.problem import Problem, load_problem
from kernelwright.problem_files import ESTIMATES_FILE, bundled_problem_ids


def estimate(problem: Problem) -> dict | None:
    """{"inputs": ["AxB", ...], "gflop": float or None, "mbytes": float}, or None when the model does not
    run on the meta device."""
    try:
        with torch.device("meta"):
            inputs = problem.inputs()
            model = problem.build_model()
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                out = model(*inputs)
    except Exception:  # any failure of a model on meta tensors only costs its estimate
        return None
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    outs = [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]
    params = list(model.parameters()) + list(model.buffers())
    moved = sum(t.numel() * t.element_size() for t in tensors + outs + params)
    flops = counter.get_total_flops()
    return {"inputs": ["x".join(map(str, t.shape)) or "scalar" for t in tensors],
            "gflop": round(flops / 1e9, 3) if flops else None, "mbytes": round(moved / 1e6, 3)}


def bundled_estimates_now() -> dict[str, dict | None]:
    return {problem_id: estimate(load_problem(problem_id)) for problem_id in bundled_problem_ids()}


if __name__ == "__main__":
    ESTIMATES_FILE.write_text(json.dumps(bundled_estimates_now(), indent=1) + "\n")
    print(f"wrote {ESTIMATES_FILE}")
