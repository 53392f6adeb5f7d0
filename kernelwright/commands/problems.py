"""`kernelwright problems [--level N]` lists the bundled suite; `kernelwright problems show ID` prints one."""

from __future__ import annotations

import torch
from rich.console import Console
from rich.table import Table

from kernelwright.errors import UsageError
from kernelwright.problem import (
    Problem,
    bundled_categories,
    bundled_problem_ids,
    load_problem,
    resolve_problem_path,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser("problems", help="list the bundled problems, or show one")
    parser.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    parser.add_argument("id", nargs="?", help="problem id for `show`, e.g. level1/01_ReLU")
    parser.add_argument("--level", type=int, help="only this level")
    parser.add_argument("--no-estimate", action="store_true", help="skip the shape/FLOP estimates (faster)")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.action == "show":
        if not args.id:
            raise UsageError("`kernelwright problems show` needs a problem id, e.g. level1/01_ReLU")
        print(resolve_problem_path(args.id).read_text(), end="")
        return 0
    ids = bundled_problem_ids(args.level)
    categories = bundled_categories()
    console = Console()
    # The description only fits a wide terminal; ids and numbers never wrap.
    wide = console.width >= 140
    table = Table(title=f"{len(ids)} bundled problems")
    for column in ("id", "category", "inputs", "GFLOP", "MB moved"):
        table.add_column(column, no_wrap=column != "inputs", overflow="fold")
    if wide:
        table.add_column("what it tests", overflow="fold")
    for problem_id in ids:
        problem = load_problem(problem_id)
        shapes, gflop, mbytes = ("", "", "") if args.no_estimate else estimate(problem)
        row = [problem_id, categories.get(problem_id, ""), shapes, gflop, mbytes]
        table.add_row(*row, *([problem.description] if wide else []))
    console.print(table)
    return 0


def estimate(problem: Problem) -> tuple[str, str, str]:
    """Input shapes, FLOPs of matmul/conv-like ops, and the least bytes moved (inputs, params, outputs),
    computed on the meta device: no memory, no time."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            inputs = problem.inputs()
            model = problem.build_model()
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                out = model(*inputs)
    except Exception:
        return "?", "?", "?"
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    outs = [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]
    params = list(model.parameters()) + list(model.buffers())
    moved = sum(t.numel() * t.element_size() for t in tensors + outs + params)
    shapes = ", ".join("x".join(map(str, t.shape)) or "scalar" for t in tensors)
    flops = counter.get_total_flops()
    return shapes, f"{flops / 1e9:.1f}" if flops else "-", f"{moved / 1e6:.0f}"
