"""Orchestration of one judgement (DESIGN.md §1, §4): the reference worker and a fresh candidate worker
run side by side, trial by trial; the verdict is assembled here from what each reports.

    reference process                parent (this module)                 candidate process
    load problem, plan trials   <-- Judge(problem)
                                    evaluate(candidate): static report --> import, build ModelNew
    make inputs_k.pt, run Model <-- trial k                            --> run ModelNew(inputs_k), guarded
    compare (outputs stay here) <-- compare k <-- outputs_k.pt <---------- (writes outputs_k.pt)
    time eager / torch.compile  <--  timing                               -->  time ModelNew

A `Judge` keeps its reference worker between candidates of the same problem (bench, generate loops), so
the reference is loaded and timed once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from kernelwright.environment import collect_environment
from kernelwright.errors import EnvironmentFailure, KernelwrightError, ProblemLoadError, UsageError
from kernelwright.gpulock import ENV as GPU_LOCK_ENV
from kernelwright.gpulock import gpu_timing, holds_timing, shares_host, waited_seconds
from kernelwright.judge import tensorfile
from kernelwright.judge.build import build_root
from kernelwright.judge.busy import host_bound, launch_bound_section
from kernelwright.judge.extract import forbidden_imports, read_candidate
from kernelwright.judge.options import JudgeOptions
from kernelwright.judge.process import (
    REFERENCE_TIMEOUT_S,
    WorkerDied,
    WorkerProcess,
    WorkerTimeout,
    waited_in,
)
from kernelwright.judge.session import CandidateSession, Failed
from kernelwright.judge.static import static_report
from kernelwright.judge.timing import combine_rounds, paired_ratio, public
from kernelwright.judge.tolerance import describe as describe_tolerance
from kernelwright.judge.tolerance import preset_names
from kernelwright.problem import Problem, load_problem, load_shrunk

STATUSES = (
    "correct",
    "mismatch",
    "wrong_shape",
    "wrong_dtype",
    "nan",
    "build_error",
    "runtime_error",
    "timeout",
    "oom",
    "rejected",
    "builds",
)
# Statuses after which the candidate has released all the reference shared with it (trials ran to their
# comparison, or none started).
CONSUMED = frozenset({"correct", "mismatch", "wrong_shape", "wrong_dtype", "nan", "build_error"})
DEFAULT_OPTIONS = JudgeOptions()
SHM, SHM_MIN_FREE = "/dev/shm", 32 << 30


class Judge:
    """Judges candidates for one problem. Use as a context manager, or call `close()`."""

    def __init__(self, problem: str | Path, options: JudgeOptions = DEFAULT_OPTIONS) -> None:
        if options.device not in ("cuda", "cpu"):
            raise UsageError(f"--device must be cuda or cpu, got {options.device!r}")
        if options.tolerance not in preset_names():
            raise UsageError(
                f"--tolerance must be one of {', '.join(preset_names())}, got {options.tolerance!r}"
            )
        if options.trials < 1:
            raise UsageError("--trials must be at least 1")
        if options.process_pairs < 1:
            raise UsageError("--process-pairs must be at least 1")
        if options.device == "cuda" and not options.compile_only and not torch.cuda.is_available():
            raise UsageError("--device cuda but no CUDA GPU is available here; use --device cpu "
                             "(pure-PyTorch candidates) or --compile-only (build CUDA sources without a GPU)")
        self.options = options
        self.problem: Problem = load_shrunk(problem) if options.shrink else load_problem(problem)
        self.workdir = Path(tempfile.mkdtemp(prefix="kernelwright-judge-", dir=scratch_dir()))
        self.init_inputs_path = self.workdir / "init_inputs.pt"
        try:
            tensorfile.save(self.problem.init_inputs(), self.init_inputs_path)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self._reference: WorkerProcess | None = None
        self._loading: WorkerProcess | None = None   # the reference process while it loads the problem
        self._trials: list[dict] = []
        self._env: dict | None = None
        self._reference_timings: dict = {}
        self._reference_busy: dict | None = None
        self._reference_quiet = False   # the cached reference timings were timed quiet (gpulock.py)
        self.reference_peak: int | None = None  # bytes of GPU memory the reference held at most
        # seconds the reference processes spent blocked on other processes' locks, over all their replies
        self.reference_waited_s = 0.0
        self._count = 0
        # A candidate worker started ahead of its candidate (`prepare`): its interpreter and torch import
        # (1-5 s) overlap the caller's own work instead of the next `evaluate`. It has run nothing yet, so
        # the candidate it gets still has a fresh process of its own.
        self._spare: WorkerProcess | None = None
        self._keep_spare = False
        # Workers judging on the CPU take no GPU's lock (the machine lock still keeps builds off timings).
        self.worker_env = {GPU_LOCK_ENV: "off"} if options.device == "cpu" else None

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._keep_spare = False
        if self._spare is not None:
            self._spare.kill()    # it has run nothing: no need to wait for its imports to finish
            self._spare.close()
            self._spare = None
        if self._reference is not None:
            self._reference.close()
            self._reference = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ candidates

    def _candidate_dir(self, count: int) -> Path:
        return self.workdir / f"candidate_{count}"

    def _start_spare(self) -> None:
        """Start the next candidate's worker now, in a folder of its own."""
        if self._spare is None:
            workdir = self._candidate_dir(self._count + 1)
            workdir.mkdir(exist_ok=True)
            self._spare = WorkerProcess("candidate", workdir, env=self.worker_env)

    def _take_worker(self) -> WorkerProcess | None:
        """The spare worker if it is still alive (it has run nothing), else None."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.proc.poll() is None:
            return spare
        if spare is not None:
            spare.close()
        return None

    # ------------------------------------------------------------------------------------------- reference

    def _start_reference(self) -> WorkerProcess:
        """The reference worker, started and loaded on first use (and again if it died)."""
        if self._reference is not None and self._reference.proc.poll() is None:
            return self._reference
        if holds_timing():   # a new worker starts under the machine lock's CPU-work class, after the timing
            raise Failed("runtime_error", "the reference process exited during the timing")
        worker = WorkerProcess("reference", self.workdir, env=self.worker_env)
        self._loading = worker
        try:
            reply = worker.request(
                {
                    "op": "load",
                    "problem": str(self.problem.path.resolve()),
                    "overrides": self.problem.constants,
                    "seed": self.options.seed,
                    "device": self.options.device,
                    "trials": self.options.trials,
                    "extra_distributions": self.options.extra_distributions,
                    "perturb_params": self.options.perturb_params,
                    "tolerance": self.options.tolerance,
                    "workdir": str(self.workdir),
                    "env": True,
                },
                REFERENCE_TIMEOUT_S,
            )
        except (WorkerDied, WorkerTimeout) as exc:
            worker.close()
            raise ProblemLoadError(f"{self.problem.path}: the reference process failed: {exc}") from exc
        finally:
            self._loading = None
        self.reference_waited_s += waited_in(reply)
        if not reply.get("ok"):
            worker.close()
            raise ProblemLoadError(f"{self.problem.path}: {reply.get('detail')}")
        self._trials, self._env = reply["trials"], reply.get("env")
        self._reference = worker
        return worker

    def restart_reference(self) -> None:
        """Close the reference process: the next request starts and loads a fresh one."""
        if self._reference is not None:
            self._reference.close()
            self._reference = None

    def _reference_request(self, command: dict) -> dict:
        worker = self._start_reference()
        try:
            reply = worker.request(command, REFERENCE_TIMEOUT_S)
        except (WorkerDied, WorkerTimeout) as exc:
            raise self._reference_lost(exc) from exc
        return self._reference_reply(reply)

    def _reference_lost(self, exc: Exception) -> Failed:
        """The reference worker died or hung (`exc`): not the problem's fault as far as we know (a candidate
        can kill a sibling process): a failed run, and a fresh reference worker next time."""
        self.restart_reference()
        return Failed("runtime_error", f"the reference process failed during this run: {exc}")

    def _reference_reply(self, reply: dict) -> dict:
        """A reference worker's reply, or the failure it reports raised as the judge's exception."""
        self.reference_waited_s += waited_in(reply)
        if not reply.get("ok"):
            detail = f"{self.problem.path}: the reference Model failed: {reply.get('detail')}"
            if reply.get("status") == "oom":
                # Out of memory is the machine's state (a candidate or another task holds the GPU), not a
                # verdict on the problem: the caller retries with the GPU to itself.
                raise EnvironmentFailure(f"{detail} (other processes held GPU memory)", cause="oom")
            if "No space left on device" in str(reply.get("detail")):
                full = f"{detail} (the judge's scratch folder {self.workdir.parent} is full)"
                raise EnvironmentFailure(full, cause="disk")
            raise ProblemLoadError(detail)
        return reply

    def prepare(self) -> None:
        """Start the reference process and load the problem now (e.g. while the candidate is being built),
        and a candidate worker for the first candidate, then one ahead of each next candidate; a failure
        here is raised again by the first `evaluate`, which starts it anew."""
        self._keep_spare = True
        with contextlib.suppress(OSError):
            self._start_spare()
        with contextlib.suppress(KernelwrightError):
            self._start_reference()

    def stop_loading(self) -> None:
        """Kill the reference process if it is still loading (`prepare` on another thread then ends at
        once, its failure kept for an `evaluate` that will not come): for a caller about to close a judge
        it never used. Safe from any thread."""
        loading = self._loading
        if loading is not None:
            loading.kill()

    def reference_timings(self, eager: bool = True, quiet: bool = False) -> dict:
        """{"eager": stats, "compile": stats or None, "eager_over_compile": ratio, ...}, measured once per
        Judge: eager and each torch.compile mode wanted in alternating rounds (judge/timing.py), each
        `eager_over_<mode>` the median of the rounds' ratios. A candidate's ratio to a mode is its own
        paired ratio to eager over this one (eager bridges the two pairings). A mode that fails to compile
        or to run leaves None and `<mode>_error`. `eager=False` (a candidate's verdict, which has its own
        eager rounds): eager is timed only as the bridge to a compile mode. `quiet`: the rounds with no CPU
        work on the host (gpulock.py; a launch-bound eager's, where timings share the host), measured again
        where the cached ones were not."""
        cached = self._reference_timings
        if cached and (not eager or "eager" in cached) and (self._reference_quiet or not quiet):
            return cached
        timings: dict = {"compile": None}
        sides = ["eager"]
        for which, wanted in (("compile", self.options.compile_baseline),
                              ("compile_reduce_overhead", self.options.reduce_overhead)):
            if not wanted:
                continue
            timings[which] = None
            if f"{which}_error" in cached:   # failed already (a call with eager=False): not compiled again
                timings[f"{which}_error"] = cached[f"{which}_error"]
                continue
            try:
                reply = self._reference_request({"op": "prepare_compile", "which": which})
                sides.append(which)
            except ProblemLoadError as exc:
                timings[f"{which}_error"] = str(exc)
                continue
            self._note_reference_peak(reply)
        if eager or len(sides) > 1:
            options = self.options
            reply = self._reference_request({"op": "time_rounds", "sides": sides, "settle": options.settle,
                                             "min_runs": options.min_runs, "min_time_s": options.min_time_s,
                                             "quiet": quiet})
            self._reference_quiet = quiet
            self._note_reference_peak(reply)
            rounds = reply["rounds"]
            for side, detail in (reply.get("errors") or {}).items():
                timings[f"{side}_error"] = f"{self.problem.path}: torch.compile failed while timed: {detail}"
            for side in rounds:
                timings[side] = public(combine_rounds(rounds[side]))
                if side != "eager":
                    timings[f"eager_over_{side}"] = paired_ratio(rounds[side], rounds["eager"])
        self._reference_timings = timings
        return timings

    def _note_reference_peak(self, reply: dict) -> None:
        self.reference_peak = max(self.reference_peak or 0, reply.get("peak_memory_bytes") or 0) or None

    def quiet_reference_timings(self, eager: bool = True) -> dict:
        """`reference_timings` of a launch-bound eager: where ordinary timings share the host with builds on
        other CPUs (gpulock.py `shares_host`), measured again quiet in a fresh reference process, which is
        closed after, so that a candidate's eager rounds never run in a process that ran torch.compile;
        elsewhere they were quiet already."""
        if not shares_host() or self._reference_quiet:
            return self.reference_timings(eager)
        self.restart_reference()
        self._reference_request({"op": "reset"})   # a fresh process builds its Model on this
        timings = self.reference_timings(eager, quiet=True)
        self.restart_reference()
        return timings

    def measures_busy(self) -> bool:
        """Whether verdicts get the GPU busy share (judge/busy.py): on CUDA, with timing."""
        options = self.options
        return options.busy_share and options.timing and options.device == "cuda" and not options.compile_only

    def reference_busy(self) -> dict:
        """Eager's GPU busy share, measured once per Judge under the timing lock, or {"error": why}."""
        if self._reference_busy is None:
            try:
                with gpu_timing():
                    reply = self._reference_request({"op": "busy"})
                self._reference_busy = reply.get("busy") or {"error": "no measurement in the reply"}
            except (Failed, KernelwrightError) as exc:  # the reference failed: the share is only a report
                self._reference_busy = {"error": str(exc)}
            # A profiled pass leaves launches slower in its process, CUPTI torn down or not (+11% on a
            # launch-bound loop, H100): eager is never timed again in this one; a later candidate's eager
            # rounds start a fresh reference process.
            self.restart_reference()
        return self._reference_busy

    def reference_report(self) -> dict:
        """Eager (and torch.compile) timings of the problem alone: what `evaluate_reference` returns."""
        self._start_reference()
        self._reference_request({"op": "reset"})
        timings = self.reference_timings()
        eager_busy = self.reference_busy() if self.measures_busy() else None
        if host_bound(eager_busy):
            timings = self.quiet_reference_timings()
        busy = {"launch_bound": launch_bound_section(eager_busy)} if eager_busy is not None else {}
        return {
            "status": "reference",
            "detail": "",
            "problem": str(self.problem.path),
            "problem_id": self.problem.id,
            "device": self.options.device,
            "timings": {"candidate": None, "eager": timings["eager"], "compile": timings["compile"]},
            # eager's time over torch.compile's, paired by rounds (judge/timing.py)
            "eager_over_compile": timings.get("eager_over_compile"),
            "memory": {"reference_peak_bytes": self.reference_peak, "candidate_peak_bytes": None},
            "warnings": [{"check": "compile", "line": None, "message": timings["compile_error"]}]
            if "compile_error" in timings
            else [],
            "env": self._env or collect_environment(),
            "seeds": self._seeds(),
            **busy,
        }

    def _seeds(self) -> dict:
        return {"model": self.options.seed, "inputs": [t["seed"] for t in self._trials]}

    # ------------------------------------------------------------------------------------------- candidate

    def evaluate(self, candidate: str | Path) -> dict:
        """The verdict for one candidate. Never raises because of the candidate."""
        self._count += 1
        started = time.monotonic()
        verdict = self._new_verdict(candidate)
        source, how = read_candidate(candidate)
        if source is None:
            return _finish(verdict, "rejected", how, started)
        verdict["source"] = how
        verdict["warnings"] = static_report(source)
        imported = forbidden_imports(source)
        if imported:
            return _finish(
                verdict,
                "rejected",
                f"the candidate imports {', '.join(imported)} "
                "(a ModelNew file is self-contained; it may not use kernelwright)",
                started,
            )
        # flags.precision says "downcast" only for a measured change of torch's global precision switches
        # (session.py); a source that merely mentions TF32/FP16 (a comment, a 3xTF32 GEMM, which is FP32
        # accurate) gets the static warning above, for a person to read.
        verdict["flags"]["custom_kernel_source"] = (
            "load_inline" in source or "cpp_extension" in source or "triton.jit" in source
        )
        worker = self._take_worker()
        # the spare's folder (named for the count when it started), else this count's; unique either way
        workdir = worker.log_path.parent if worker is not None else self._candidate_dir(self._count)
        workdir.mkdir(exist_ok=True)
        source_file = workdir / "candidate.py"
        source_file.write_text(source)
        session = CandidateSession(
            self, verdict, workdir, source_file, build_root(self.options.build_dir, source), worker
        )
        waited_before = (self.reference_waited_s, waited_seconds())
        try:
            status, detail = session.run()
        finally:
            session.close()
            verdict["profile"]["lock_wait_s"] = round(
                session.waited_s() + self.reference_waited_s - waited_before[0]
                + waited_seconds() - waited_before[1], 3)
            shutil.rmtree(workdir, ignore_errors=True)
            if self._keep_spare:
                with contextlib.suppress(OSError):
                    self._start_spare()
        if status not in CONSUMED and tensorfile.sharing_enabled(self.options.device) and self._reference:
            # Memory the reference shared stays reserved until the candidate releases it; one that stopped
            # early (died, killed, rejected mid-trial) may never have: a fresh reference for the next one.
            self._reference.close()
            self._reference = None
        return _finish(verdict, status, detail, started)

    def _new_verdict(self, candidate: str | Path) -> dict:
        options = self.options
        return {
            "status": None,
            "detail": "",
            "problem": str(self.problem.path),
            "problem_id": self.problem.id,
            "candidate": str(candidate),
            "device": options.device,
            "trials": [],
            "timings": {"candidate": None, "eager": None, "compile": None},
            "memory": {"reference_peak_bytes": None, "candidate_peak_bytes": None},
            # seconds per phase: reference_s (overlaps build_s), build_s, trials_s (and trials_<phase>: its
            # reference_s, candidate_s, compare_s (float64_s, the float64 re-check, is part of it), summed
            # over the trials run), timing_s (timing_rounds_s: the lockstep rounds' wall time, and
            # timing_<side>_measure_s: each side's own share of it, its waits for the other's turns left out);
            # lock_wait_s: the seconds this verdict's processes (the candidate's, the reference's, the
            # judge's) were blocked on other processes' GPU work, timings and builds (gpulock.py), summed
            # over the processes (they overlap in time): the share of the phases that other tasks cost;
            # timing_pairs_s: a launch-bound model's further pairs of timing processes, their starts and
            # rounds (judge `process_pairs`). A
            # candidate worker started ahead (`prepare`) counts the wait of its start, which may precede the
            # verdict (in optimize, behind the compiler's own kernel timings)
            "profile": {},
            # the median of the timing rounds' ratios (judge/timing.py); for a launch-bound model, the median
            # of the pairs of processes' own (speedup_vs_eager_pairs, only then present) ...
            "speedup_vs_eager": None,
            "speedup_vs_eager_rounds": None,   # ... each round's ratio ...
            "speedup_vs_eager_spread": None,   # ... and half their interquartile range over the median
            "speedup_vs_compile": None,
            "flags": {
                "no_custom_kernel": None,
                "precision": "fp32",
                "nondeterministic": False,
                "fallback_detected": False,
                "timing_disagreement": False,
            },
            "warnings": [],
            "build_seconds": None,
            "env": None,
            "seeds": self._seeds(),
            "tolerance": {"preset": options.tolerance, "table": describe_tolerance(options.tolerance)},
            "options": {k: getattr(options, k) for k in options.__dataclass_fields__},
        }


def scratch_dir(min_free: int = SHM_MIN_FREE) -> str | None:
    """Where the judge's processes exchange tensors: shared memory (/dev/shm) when it has room, so that a
    trial's gigabytes of inputs and outputs are not written to disk; else the temp folder (None)."""
    try:
        stats = os.statvfs(SHM)
    except OSError:
        return None
    return SHM if stats.f_bavail * stats.f_frsize >= min_free and os.access(SHM, os.W_OK) else None


def _finish(verdict: dict, status: str, detail: str, started: float) -> dict:
    assert status in STATUSES, status
    verdict["status"], verdict["detail"] = status, detail
    verdict["judge_seconds"] = round(time.monotonic() - started, 3)
    if verdict["env"] is None:
        verdict["env"] = collect_environment()
    return verdict


def evaluate(problem: str | Path, candidate: str | Path, options: JudgeOptions = DEFAULT_OPTIONS) -> dict:
    """The verdict dict (DESIGN.md §1) for `candidate` on `problem`. Raises only for a bad problem or bad
    options (ProblemLoadError / UsageError), never because of the candidate."""
    with Judge(problem, options) as judge:
        return judge.evaluate(candidate)


def evaluate_reference(problem: str | Path, options: JudgeOptions = DEFAULT_OPTIONS) -> dict:
    """Eager and (unless disabled) torch.compile timings of the problem, no candidate."""
    with Judge(problem, options) as judge:
        return judge.reference_report()
