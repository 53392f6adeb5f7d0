"""`kernelwright prompt PROBLEM`: print the LLM prompt for a problem."""

from __future__ import annotations

from kernelwright.environment import gpu_info
from kernelwright.problem import load_problem
from kernelwright.prompt import build_prompt


def register(subparsers) -> None:
    parser = subparsers.add_parser("prompt", help="print the LLM prompt for a problem")
    parser.add_argument("problem", help="problem file or bundled id (e.g. level1/01_ReLU)")
    parser.add_argument("--no-example", action="store_true", help="leave out the one-shot example")
    parser.add_argument("--hardware", action="store_true", help="name the GPU of this machine in the prompt")
    parser.set_defaults(func=run)


def run(args) -> int:
    problem = load_problem(args.problem)
    hardware = None
    if args.hardware:
        info = gpu_info()
        hardware = info["name"] if info else None
    print(build_prompt(problem.source, include_example=not args.no_example, hardware=hardware), end="")
    return 0
