"""`kernelwright bench [SUITE]`: judge systems (eager, torch.compile, kernelwright, folders of candidate
files) on a suite of problems; resumable results, a Markdown report and plots (kernelwright/bench/)."""

from __future__ import annotations

from kernelwright.errors import UsageError
from kernelwright.judge.options import JudgeOptions
from kernelwright.output_paths import check_output_dir


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="judge eager, torch.compile, kernelwright and candidate folders on a suite",
        description="Each (problem, system) is judged in its own process; rows are appended to "
                    "OUT/results.jsonl as they finish, then OUT/report.md, report.json and plots are "
                    "written.")
    parser.add_argument("suite", nargs="?", help="folder of problem files, subfolders are levels "
                                                 "(default: the bundled suite)")
    parser.add_argument("--systems", default="eager,compile,kernelwright",
                        help="comma-separated: eager, compile, kernelwright, eager-copy (the reference "
                             "judged as a candidate: the A/A check of the timing), or folders of candidate "
                             "files named like the problems (default: %(default)s)")
    parser.add_argument("--level", type=int, help="only this level")
    parser.add_argument("--filter", metavar="GLOB",
                        help="only problem ids matching, e.g. 'level1/2*' or '*Softmax*'; several globs "
                             "separated by commas match any")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="default: %(default)s")
    parser.add_argument("--gpus", help="GPU indices, e.g. 0,1 (one worker each; default: every visible GPU)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="at most N tasks at once per GPU, as many as its memory holds (measured peaks, "
                             "else estimates): their compiling (nvcc, torch.compile) overlaps, while every "
                             "timed series holds the GPU alone (default: %(default)s)")
    parser.add_argument("--output-dir", "--out", dest="out", metavar="DIR",
                        help="results folder (default: bench/results/<date>-<gpu>/); one that holds results "
                             "is refused unless --resume")
    parser.add_argument("--resume", action="store_true", help="skip (problem, system) pairs already in --out")
    parser.add_argument("--shrink", action="store_true", help="judge shrunk problems (fast CPU runs, tests)")
    parser.add_argument("--reduce-overhead", action="store_true",
                        help='also time torch.compile(Model, mode="reduce-overhead") (CUDA graphs) and '
                             "report each candidate's speedup against it")
    defaults = JudgeOptions()
    parser.add_argument("--trials", type=int, default=defaults.trials,
                        help="correctness trials (default: %(default)s)")
    parser.add_argument("--min-runs", type=int, default=defaults.min_runs,
                        help="timing: at least this many runs (default: %(default)s)")
    parser.add_argument("--min-time", type=float, default=defaults.min_time_s, metavar="S",
                        help="timing: and at least this many seconds (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=defaults.run_timeout_s, metavar="S",
                        help="wall clock for running one candidate: its trials and timing "
                             "(default: %(default)s)")
    parser.add_argument("--build-timeout", type=float, default=defaults.build_timeout_s, metavar="S",
                        help="wall clock for building/importing one candidate, and for "
                             "`kernelwright optimize` (default: %(default)s)")
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                        help="run the tasks on a Ray cluster (pip install 'kernelwright[ray]'): ADDRESS is "
                             "HOST:PORT, ray://HOST:PORT, auto or local; without one: $RAY_ADDRESS, else "
                             "the cluster `ray start` runs on this machine, else a new local one")
    parser.add_argument("--timing-cpus", default="auto", metavar="CPUS",
                        help="CPUs kept for timings while other tasks build on the rest: auto (one per GPU "
                             "where tasks run side by side and the host has 8 CPUs per GPU; "
                             "$KERNELWRIGHT_TIMING_CPUS if set), off, or a list such as 15 or 14-15 "
                             "(default: %(default)s)")
    parser.add_argument("--time-budget", type=float, metavar="S",
                        help="start no task after S seconds and report what is done (finish it later "
                             "with --resume)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console

    from kernelwright.bench.report import summary_tables, write_report
    from kernelwright.bench.runner import BenchConfig, run_bench

    for name in ("trials", "min_runs"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.timeout, args.build_timeout) <= 0 or args.min_time < 0:
        raise UsageError("--timeout and --build-timeout must be positive and --min-time not negative")
    if args.out:
        check_output_dir(args.out)
    options = JudgeOptions(device=args.device, trials=args.trials, min_runs=args.min_runs,
                           min_time_s=args.min_time, shrink=args.shrink, run_timeout_s=args.timeout,
                           reduce_overhead=args.reduce_overhead,
                           build_timeout_s=args.build_timeout)
    config = BenchConfig(suite=args.suite, systems=args.systems, level=args.level, pattern=args.filter,
                         device=args.device, gpus=args.gpus, jobs=args.jobs, out=args.out, resume=args.resume,
                         options=options, time_budget_s=args.time_budget, ray=args.ray,
                         timing_cpus=args.timing_cpus)
    outcome = run_bench(config)
    console = Console()
    for table in summary_tables(write_report(outcome.store)):
        console.print(table)
    console.print(f"report: {outcome.store.directory / 'report.md'}")
    return 0
