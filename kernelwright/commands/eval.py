"""`kernelwright eval PROBLEM CANDIDATE`: judge a candidate ModelNew (a .py file or a raw LLM answer).
Exit code 0 when correct (or `builds` with --compile-only, or passing KernelBench's strict static checks
with --kernelbench-static), 1 for any other verdict, 2 for usage errors. While it runs, a spinner on stderr
shows what the candidate's process is doing (which extension, which compiler)."""

from __future__ import annotations

import json
from pathlib import Path

from kernelwright.errors import UsageError
from kernelwright.judge.options import JudgeOptions


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="judge a candidate ModelNew against a problem")
    parser.add_argument("problem", help="problem file or bundled id (e.g. level1/01_ReLU)")
    parser.add_argument("candidate", help="a .py file defining ModelNew, or an LLM answer (last code block)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu judges pure-PyTorch candidates without a GPU")
    parser.add_argument("--trials", type=int, default=5, help="random-input trials (default 5)")
    parser.add_argument("--seed", type=int, default=42, help="model construction seed (default 42)")
    # Not `choices=`: the preset table (judge/tolerance.py) imports torch; `run` checks the name.
    parser.add_argument("--tolerance", default="default",
                        help="tolerance preset: default, or kernelbench (atol=rtol=1e-2 as in KernelBench)")
    parser.add_argument("--no-extra-distributions", action="store_true",
                        help="skip the x1000 / all-negative / tiny / non-contiguous trials")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--no-compile-baseline", action="store_true", help="do not time torch.compile")
    parser.add_argument("--reduce-overhead", action="store_true",
                        help='also time torch.compile(Model, mode="reduce-overhead") (CUDA graphs)')
    parser.add_argument("--no-busy-share", action="store_true",
                        help="do not profile the GPU busy share of eager and the candidate after timing")
    parser.add_argument("--process-pairs", type=int, default=3, metavar="N",
                        help="time a launch-bound model (GPU busy under 30%%, as profiled after timing: not "
                             "with --no-busy-share) in N pairs of fresh candidate and eager processes, the "
                             "speedup their median, timed with no CPU work on the host; with "
                             "$KERNELWRIGHT_TIMING_CPUS the first pair, timed beside builds on other CPUs, "
                             "is not one of them (default 3; 1: one pair)")
    parser.add_argument("--compile-only", action="store_true",
                        help="only compile the candidate's CUDA/C++ sources (no GPU needed)")
    parser.add_argument("--build-timeout", type=float, default=600.0, metavar="S",
                        help="build wall clock (s)")
    parser.add_argument("--run-timeout", type=float, default=300.0, metavar="S",
                        help="correctness + timing wall clock (s)")
    parser.add_argument("--min-runs", type=int, default=100, help="timing: at least this many runs")
    parser.add_argument("--min-time", type=float, default=1.0, metavar="S", help="timing: at least this long")
    parser.add_argument("--shrink", action="store_true", help="judge a shrunk (small) variant of the problem")
    parser.add_argument("--kernelbench-static", action="store_true",
                        help="only run KernelBench's static checks (strict and warning sets, reimplemented) "
                             "and ours on the candidate's source; nothing is built or run")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.set_defaults(func=run)


def options_from_args(args) -> JudgeOptions:
    return JudgeOptions(
        device=args.device, trials=args.trials, seed=args.seed, tolerance=args.tolerance,
        extra_distributions=not args.no_extra_distributions, timing=not args.no_timing,
        compile_baseline=not args.no_compile_baseline, busy_share=not args.no_busy_share,
        reduce_overhead=args.reduce_overhead,
        compile_only=args.compile_only,
        build_timeout_s=args.build_timeout, run_timeout_s=args.run_timeout, min_runs=args.min_runs,
        min_time_s=args.min_time, shrink=args.shrink, process_pairs=args.process_pairs,
    )


def run(args) -> int:
    if args.kernelbench_static:
        return _static(args)
    from rich.console import Console
    from rich.markup import escape

    from kernelwright.judge import evaluate
    from kernelwright.judge.progress import watch_steps
    from kernelwright.judge.report import print_verdict
    from kernelwright.judge.tolerance import preset_names

    if args.tolerance not in preset_names():
        choices = " or ".join(preset_names())
        raise UsageError(f"--tolerance {args.tolerance}: no such preset; choose {choices}")
    _check_candidate_path(args.candidate)
    with Console(stderr=True).status("judging") as status, \
            watch_steps(lambda step: status.update(f"judging: {escape(step)}")):
        verdict = evaluate(args.problem, args.candidate, options_from_args(args))
    if args.json:
        print(json.dumps(verdict, indent=2, default=str))
    else:
        print_verdict(verdict)
    passing = "builds" if args.compile_only else "correct"
    return 0 if verdict["status"] == passing else 1


def _check_candidate_path(candidate: str) -> None:
    """A candidate path that names nothing readable is the user's mistake (exit 2), not a verdict; a file
    that is there but unreadable as code is judged (rejected) like any bad answer."""
    path = Path(candidate)
    if not path.exists():
        raise UsageError(f"{candidate}: no such candidate file")
    if path.is_dir():
        raise UsageError(f"{candidate}: is a directory, not a candidate file")


def _static(args) -> int:
    """KernelBench's static checks and ours on the candidate's source, without building or running it."""
    from kernelwright.judge.extract import read_candidate
    from kernelwright.judge.kernelbench import kernelbench_static
    from kernelwright.judge.report import print_static_report
    from kernelwright.judge.static import static_report
    from kernelwright.problem_files import read_problem_statically

    read_problem_statically(args.problem)
    source, how = read_candidate(args.candidate)
    if source is None:
        raise UsageError(f"{args.candidate}: {how}")
    report = {"candidate": args.candidate, "source": how, "kernelbench": kernelbench_static(source),
              "ours": static_report(source)}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_static_report(report)
    return 0 if report["kernelbench"]["passes_strict"] else 1
