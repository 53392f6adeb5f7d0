"""`kernelwright bench` end to end: pick the problems and systems, plan what is not done yet and how much
GPU memory each task needs, run it on the workers with a live progress bar, and append rows as they
finish (the command then renders the report from them)."""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kernelwright.bench.admission import USABLE_FRACTION, Need
from kernelwright.bench.devices import Worker, gpu_properties, resolve_workers, timing_cpu_of, timing_cpus
from kernelwright.bench.memory import PeakCache, plan_needs
from kernelwright.bench.plan import BenchTask, longest_first, plan_tasks
from kernelwright.bench.pool import Execute, SubprocessExecutor, run_pool
from kernelwright.bench.prior import read_prior, with_prior
from kernelwright.bench.report import fmt_ms, fmt_speedup
from kernelwright.bench.store import ResultsStore, default_results_dir, open_results
from kernelwright.bench.suite import discover_suite
from kernelwright.bench.systems import parse_systems
from kernelwright.environment import cache_dir, collect_environment
from kernelwright.errors import UsageError
from kernelwright.gpulock import RESERVED_ENV
from kernelwright.judge.options import JudgeOptions

NODE = socket.gethostname()  # every row names the machine that ran it


@dataclass(frozen=True)
class BenchConfig:
    suite: str | None = None          # a folder of problem files; None: the bundled suite
    systems: str = "eager,compile,kernelwright"
    level: int | None = None
    pattern: str | None = None        # glob on problem ids
    device: str = "cuda"
    gpus: str | None = None           # "0,1"; None: every visible GPU
    jobs: int = 1                     # tasks at once per GPU (their timed series never overlap)
    out: str | None = None            # None: bench/results/<date>-<gpu>/
    resume: bool = False
    options: JudgeOptions = JudgeOptions()
    time_budget_s: float | None = None  # start no task after this many seconds
    ray: str | None = None            # run the tasks on a Ray cluster at this address ("": find or start one)
    timing_cpus: str = "auto"         # CPUs kept for timings: auto, off or a list (devices.py `timing_cpus`)


@dataclass
class BenchOutcome:
    store: ResultsStore
    ran: int           # tasks run now
    left: int          # tasks (problems) not started (time budget): `--resume` runs them


def run_bench(config: BenchConfig, execute: Execute | None = None,
              console: Console | None = None) -> BenchOutcome:
    """Run (or resume) a bench. `execute` runs one task on a worker; the default
    runs it in a subprocess through the judge (tests inject fakes)."""
    console = console or Console(stderr=True)
    problems = discover_suite(config.suite, config.level, config.pattern)
    systems = parse_systems(config.systems)
    if config.options.shrink and any(system.kind == "kernelwright" for system in systems):
        raise UsageError("--shrink cannot bench the kernelwright system: `kernelwright optimize` "
                         "specializes its kernels to the full shapes (leave it out, or drop --shrink)")
    cluster = _connect_ray(config) if config.ray is not None else None
    workers = [] if cluster else resolve_workers(config.device, config.gpus, config.jobs)
    # CPUs kept for timings on this host (none for a Ray cluster's tasks: their hosts are not this one)
    local_cuda = not cluster and config.device == "cuda"
    if not local_cuda and config.timing_cpus.strip().lower() not in ("auto", "off"):
        raise UsageError(f"--timing-cpus {config.timing_cpus}: only for CUDA tasks on this host (not --ray, "
                         "not --device cpu)")
    gpus = list(dict.fromkeys(w.gpu for w in workers if w.gpu is not None))
    reserved = timing_cpus(config.timing_cpus, len(gpus), len(workers)) if local_cuda else None
    # what the tasks will have (None: this host's CPUs are not theirs)
    kept = (os.environ.get(RESERVED_ENV, "") if reserved is None else reserved) if local_cuda else None
    timing_cpu = timing_cpu_of(gpus, kept) if kept is not None else {}
    device_name = cluster.device_name if cluster else workers[0].device
    out = config.out or default_results_dir("cpu" if config.device == "cpu" else device_name)
    store = open_results(out, config.resume)
    options = dataclasses.replace(config.options, device=config.device)
    done = store.done_keys() if config.resume else set()
    peaks = None if cluster else _peak_cache(config, workers)
    tasks = longest_first(plan_tasks(problems, systems, done, str(store.candidates_dir().resolve())),
                          with_prior(peaks.task_seconds if peaks else None, read_prior()))
    need, memory = _memory_plan(config, tasks, workers, peaks, console)
    store.add_run({**_run_info(config, options, problems, workers, len(tasks), device_name), "memory": memory,
                   "timing_cpus": kept}
                  | (cluster.run_info() if cluster else {}))
    devices = cluster.description() if cluster else _describe_workers(workers, config.jobs)
    if need and not cluster:
        devices += " as its memory allows"
    runs = sum(len(task.runs) for task in tasks)
    console.print(f"bench: {len(problems)} problems × {len(systems)} systems: {runs} to run "
                  f"({len(done)} done) on {escape(devices)}; results in {store.directory}")
    if execute is None and not cluster:
        executor = SubprocessExecutor(store, options, timing_cpus=reserved, timing_cpu=timing_cpu)
        execute, stop = executor, executor.stop
    else:
        stop = None
    deadline = time.monotonic() + config.time_budget_s if config.time_budget_s else None
    with LiveProgress(len(tasks), console) as progress:
        def on_rows(task: BenchTask, rows: list[dict]) -> None:
            for row in rows:
                row.setdefault("node", NODE)  # rows from a Ray cluster name their node already
            store.append(rows)
            if peaks is not None:
                peaks.record(task, [row for row in rows if row["device"] == workers[0].device])
            progress.advance(task, rows)

        if cluster:
            with cluster:
                left = cluster.run(tasks, options, store, on_rows, deadline=deadline, execute=execute)
        else:
            left = run_pool(tasks, workers, execute, on_rows, deadline=deadline, stop=stop, need=need)
    if left:
        console.print(f"[yellow]time budget spent:[/] {len(left)} problems not started; rerun with --resume "
                      f"--out {store.directory} to finish")
    return BenchOutcome(store, ran=len(tasks) - len(left), left=len(left))


def _memory_plan(config: BenchConfig, tasks: list[BenchTask], workers: list[Worker], peaks: PeakCache | None,
                 console: Console) -> tuple[Need | None, dict]:
    """Each task's GPU memory need, for admission by memory (only where GPUs are shared and their size is
    known), and its record for run.json."""
    if config.jobs < 2 or not any(w.memory_bytes for w in workers) or not tasks:
        return None, {}
    needs, sources = plan_needs(tasks, peaks)
    counts = Counter(sources.values())
    console.print(f"memory per task: {counts['measured']} measured, {counts['static']} estimated, "
                  f"{counts['unknown']} unknown (those run alone)")
    record = {"usable_fraction": USABLE_FRACTION, "need_bytes": needs, "need_source": sources,
              "gpu_bytes": {w.gpu: w.memory_bytes for w in workers}}
    return (lambda task: needs.get(task.problem_id)), record


def _peak_cache(config: BenchConfig, workers: list[Worker]) -> PeakCache | None:
    """The measured-peak cache of this GPU model and torch; None on the CPU and for shrunk problems."""
    if config.device != "cuda" or config.options.shrink:
        return None
    import torch

    return PeakCache(cache_dir() / "memory", workers[0].device, torch.__version__)

def _describe_workers(workers: list[Worker], jobs: int) -> str:
    devices = ", ".join(dict.fromkeys(f"{w.device}" + (f" (GPU {w.gpu})" if w.gpu is not None else "")
                                      for w in workers))
    return devices + (f", {jobs} tasks at once per GPU" if jobs > 1 else "")


def _connect_ray(config: BenchConfig):
    """The Ray cluster for `--ray` (kernelwright/bench/ray_backend.py; Ray is imported only here)."""
    if config.gpus is not None:
        raise UsageError("--gpus picks this machine's GPUs; with --ray every GPU of the cluster is used")
    from kernelwright.bench.ray_backend import RayCluster

    return RayCluster.connect(config.ray, config.device, config.jobs)


def _run_info(config: BenchConfig, options: JudgeOptions, problems: list, workers: list[Worker],
              tasks: int, device_name: str) -> dict:
    environment = collect_environment()
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:]),
        "suite": config.suite or "bundled",
        "problems": len(problems),
        "tasks": tasks,
        "options": {**dataclasses.asdict(options), "systems": config.systems,
                    "time_budget_s": config.time_budget_s},
        "gpus": [{"index": gpu, **gpu_properties(gpu)}
                 for gpu in dict.fromkeys(w.gpu for w in workers if w.gpu is not None)],
        "jobs_per_gpu": config.jobs,
        "device_name": device_name,
        "environment": environment,
    }


class LiveProgress:
    """A rich progress bar with ETA and live counts; one line per finished task above it."""

    def __init__(self, total: int, console: Console):
        self.console = console
        self.counts = {"judged": 0, "correct": 0, "faster": 0, "failed": 0}
        self.progress = Progress(
            TextColumn("[bold]problems"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
        )
        self.bar = self.progress.add_task("bench", total=total, counts=self._counts_text())

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    def advance(self, task: BenchTask, rows: list[dict]) -> None:
        for row in rows:
            if row["system"] != "eager":  # eager is the yardstick: counting it would inflate both counts
                self.counts["judged"] += 1
                self.counts["correct"] += row["status"] == "correct"
                self.counts["faster"] += row["status"] == "correct" and (row["speedup_vs_eager"] or 0) > 1
            self.counts["failed"] += row["status"] != "correct"
            self.console.print(_row_line(row), highlight=False)
        self.progress.update(self.bar, advance=1, counts=self._counts_text())

    def _counts_text(self) -> str:
        c = self.counts
        return (f"[green]{c['correct']}/{c['judged']} correct[/] [cyan]{c['faster']} faster than eager[/] "
                f"[red]{c['failed']} failed[/]")


def _row_line(row: dict) -> str:
    mark = "[green]✓[/]" if row["status"] == "correct" else "[red]✗[/]"
    timing = (f"{fmt_ms(row['time_ms'])} ms  {fmt_speedup(row['speedup_vs_eager'])} vs eager"
              if row["time_ms"] is not None else escape(row["detail"][:80]))
    return f"{mark} {escape(row['problem'])}  {escape(row['system'])}  {row['status']}  {timing}"
