"""`kernelwright optimize PROBLEM`: compile a problem into a verified, self-contained ModelNew file."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kernelwright.errors import UsageError
from kernelwright.output_paths import (
    add_force_flag,
    check_output_dir,
    check_output_file,
    make_output_dir,
    write_output_file,
)

if TYPE_CHECKING:
    from rich.console import Console

    from kernelwright.compiler import OptimizeResult


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "optimize", help="compile a problem into a ModelNew file with fused CUDA kernels",
        description="Capture, rewrite, fuse, generate CUDA kernels and emit a self-contained ModelNew file. "
                    "On a GPU every kernel is checked and timed against ATen and the file is judged; "
                    "without one the CUDA sources are compile-checked and verification is skipped.")
    parser.add_argument("problem", help="problem file or bundled id (e.g. level1/01_ReLU)")
    parser.add_argument("-o", "--output", help="the ModelNew file to write (default: ./<problem>_new.py)")
    parser.add_argument("--output-dir", metavar="DIR", help="write DIR/<problem>_new.py instead")
    add_force_flag(parser)
    parser.add_argument("--no-verify", action="store_true", help="emit without building or judging on a GPU")
    parser.add_argument("--explain", action="store_true", help="print the IR, rewrite log and fusion plan")
    parser.add_argument("--allow-tf32", action="store_true",
                        help="allow TF32 in GEMM/conv kernels (recorded in the header; off by default)")
    parser.add_argument("--layout", choices=("auto", "nchw", "channels_last"), default="auto",
                        help="layout of 2-D/3-D convolutions: auto builds both on a GPU, times them and "
                             "keeps the faster that the judge passes (NCHW without one)")
    parser.add_argument("--replay", choices=("auto", "off"), default="auto",
                        help="CUDA-graph replay of the whole forward (one launch instead of one per op): "
                             "auto times the file with and without it on a GPU and keeps the faster")
    parser.add_argument("--conv-kernels", action=argparse.BooleanOptionalAction,
                        default=os.environ.get("KERNELWRIGHT_CONV_KERNELS", "1") != "0",
                        help="on a Hopper GPU, 2-D convolutions with their epilogues also as our CUTLASS "
                             "kernels, kept only where the plan is measured faster than with cuDNN's and "
                             "passes the judge (default on; ~30 s more nvcc a problem that has one; "
                             "KERNELWRIGHT_CONV_KERNELS=0 turns it off, e.g. for bench)")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="when verification fails for the machine's sake (GPU memory held by other "
                             "processes, a build or judge failure outside the code) even after a retry, "
                             "write the compiled file marked NOT verified instead of exiting with code 4")
    parser.add_argument("--fresh", action="store_true",
                        help="run every stage even when an identical earlier run's result is cached "
                             "($KERNELWRIGHT_CACHE/results; --explain always runs fresh)")
    parser.add_argument("--profile", metavar="FILE",
                        help="write where the time went (seconds per stage, build step, judge phase) as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from kernelwright.optimize_options import OptimizeOptions

    started = time.perf_counter()
    options = OptimizeOptions(verify=not args.no_verify, allow_tf32=args.allow_tf32, layout=args.layout,
                              allow_unverified=args.allow_unverified, replay=args.replay,
                              conv_kernels=args.conv_kernels)
    if not (args.fresh or args.explain) and _served_from_cache(args, options, started):
        return 0
    from kernelwright.gpulock import cpu_work

    with cpu_work():   # torch's import and the problem's load: CPU work, kept out of timings (gpulock.py)
        from kernelwright.compiler import optimize
        from kernelwright.problem import load_problem

        problem = load_problem(args.problem)
    output = _output_path(args, Path(problem.path))
    console = Console(stderr=True, highlight=False)
    console.print(f"[bold]optimize[/] {escape(problem.id)}")
    with console.status("starting") as status:
        def on_stage(stage: str, event: str, detail: str, seconds: float | None) -> None:
            if event == "start":
                status.update(f"{stage} ...")
            elif event == "done":
                console.print(f"  [green]✓[/] {stage:<11} {escape(detail)} [dim]{seconds:.1f} s[/]")
            elif event == "fail":
                console.print(f"  [yellow]✗ {stage:<11} {escape(detail)}[/] [dim]{seconds:.1f} s[/]",
                              soft_wrap=True)
            elif stage == "cache":
                console.print(f"  [green]✓[/] {stage:<11} {escape(detail)} (--fresh runs every stage)")
            else:
                console.print(f"  [yellow]-[/] {stage:<11} skipped: {escape(detail)}")

        begun = time.perf_counter()
        result = optimize(problem, options, on_stage, cache=not (args.fresh or args.explain))
    write_output_file(output, result.source, args.force)
    # "startup": this command's own imports, the torch-free cache lookup and loading the problem
    profile = {"problem": problem.id, "seconds": round(time.perf_counter() - started, 3),
               "startup": round(begun - started, 3), **result.profile()}
    if args.profile:
        Path(args.profile).write_text(json.dumps(profile, indent=1) + "\n")
    _summary(console, result, output)
    if args.explain:
        _explain(Console(highlight=False), result, profile)
    return 0


def _served_from_cache(args, options, started: float) -> bool:
    """The warm path: an identical earlier run's file (result_cache.py), found without importing torch or
    executing the problem, so that it takes a fraction of a second. False when there is none."""
    from dataclasses import asdict

    from kernelwright import result_cache
    from kernelwright.problem_files import (
        integer_constants,
        parse_problem_source,
        problem_id_for,
        read_problem_source,
        resolve_problem_path,
    )

    identity = result_cache.identity_without_torch()
    if identity is None:
        return False
    path = resolve_problem_path(args.problem)
    source = read_problem_source(path)
    constants = integer_constants(parse_problem_source(path, source))
    entry = result_cache.load(result_cache.cache_key(source, constants, asdict(options), *identity))
    if entry is None:
        return False
    output = _output_path(args, path)
    result = entry["result"]
    write_output_file(output, result["source"], args.force)
    seconds = round(time.perf_counter() - started, 3)
    if args.profile:
        Path(args.profile).write_text(json.dumps({"problem": problem_id_for(path), "seconds": seconds,
                                                  "stages": {"cache": seconds}, "build_steps": {},
                                                  "judge": {}}, indent=1) + "\n")
    outcome = f"whole-model fallback: {result['fallback_reason']}" if result["fallback_reason"] else \
        f"verification: {result['verification']}"
    print(f"optimize {problem_id_for(path)}: the result of an identical run (--fresh runs every stage)\n"
          f"{outcome}\nwrote {output}", file=sys.stderr)
    return True


def _output_path(args, problem_path: Path) -> Path:
    """The file to write, checked before any work (a bad path must not cost a capture and an nvcc run)."""
    default_name = f"{problem_path.stem}_new.py"
    if args.output and args.output_dir:
        raise UsageError("give -o FILE or --output-dir DIR, not both")
    if args.output_dir:
        flag, output = "--output-dir", check_output_dir(args.output_dir) / default_name
        make_output_dir(output.parent)
    else:
        flag, output = "-o", Path(args.output or default_name)
    if output.resolve() == problem_path.resolve():
        raise UsageError(f"{flag} {output} would overwrite the problem file")
    return check_output_file(output, args.force, flag)


def _summary(console: Console, result: OptimizeResult, output: Path) -> None:
    from rich.markup import escape

    for line in result.notes:
        console.print(f"  {escape(line)}")
    for line in result.dropped:
        console.print(f"  [yellow]fell back to ATen:[/] {escape(line)}")
    if result.fallback_reason:
        console.print(f"[yellow]whole-model fallback:[/] {escape(result.fallback_reason)}")
    elif result.verification.startswith("NOT verified"):
        console.print(f"[bold yellow]verification skipped:[/] {escape(result.verification)}")
    else:
        console.print(f"[bold]verification:[/] {escape(result.verification)}")
    if result.build_seconds is not None:
        console.print(f"compile: {result.build_seconds:.1f} s")
    console.print(f"wrote [bold]{escape(str(output))}[/]")


def _explain(console: Console, result: OptimizeResult, profile: dict) -> None:
    from rich.markup import escape

    from kernelwright.fuse.plan import describe_plan

    if result.graph is not None:
        console.rule("IR after rewrites")
        console.print(escape(str(result.graph)))
    if result.rewrite_log is not None:
        console.rule("rewrite log")
        console.print(escape(str(result.rewrite_log)))
    if result.plan is not None:
        console.rule("fusion plan")
        console.print(escape(describe_plan(result.plan)))
    if result.group_reports:
        console.rule("kernels measured on the GPU")
        for report in result.group_reports:
            timing = (f"{report.kernel_ms:.3f} ms vs ATen {report.aten_ms:.3f} ms"
                      if report.kernel_ms is not None else report.detail)
            console.print(f"{'keep' if report.keep else 'drop'}  {report.kernel}: {escape(timing)}")
    console.rule(f"where the time went: {profile['seconds']:.1f} s")
    for section in ("stages", "build_steps", "judge"):
        for name, seconds in profile[section].items():
            console.print(f"{section:<12} {escape(name):<40} {seconds:8.2f} s")
