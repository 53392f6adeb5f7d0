"""`kernelwright prompt PROBLEM`: print the LLM prompt for a problem. The problem file is read and checked
as text (it parses and defines Model, get_inputs, get_init_inputs), not executed: no torch import."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser("prompt", help="print the LLM prompt for a problem")
    parser.add_argument("problem", help="problem file or bundled id (e.g. level1/01_ReLU)")
    parser.add_argument("--no-example", action="store_true", help="leave out the one-shot example")
    parser.add_argument("--hardware", action="store_true", help="name the GPU of this machine in the prompt")
    parser.set_defaults(func=run)


def run(args) -> int:
    from kernelwright.problem_files import read_problem_statically
    from kernelwright.prompt import build_prompt

    _, source = read_problem_statically(args.problem)
    hardware = None
    if args.hardware:
        from kernelwright.environment import gpu_info

        info = gpu_info()
        hardware = info["name"] if info else None
    print(build_prompt(source, include_example=not args.no_example, hardware=hardware), end="")
    return 0
