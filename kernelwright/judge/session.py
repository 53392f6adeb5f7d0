"""One candidate's run inside a `Judge`: build, trials in lockstep with the reference, timing. Each step's
reply is folded into the verdict; the first failing step decides the status."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from kernelwright.errors import KernelwrightError
from kernelwright.gpulock import gpu_timing, shares_host
from kernelwright.judge.build import trim_build_log
from kernelwright.judge.busy import host_bound, launch_bound_section
from kernelwright.judge.process import (
    REFERENCE_TIMEOUT_S,
    WorkerDied,
    WorkerProcess,
    WorkerTimeout,
    describe_exit,
)
from kernelwright.judge.timing import (
    NOISY_ROUNDS_S,
    alternating_rounds,
    combine_rounds,
    max_turns,
    paired_ratios,
    per_round,
    public,
    ratio_spread,
)
from kernelwright.problem import BUNDLED_DIR, Problem

# The GPU busy share's profiler pass (judge/busy.py) takes well under a second; these bound a stuck one.
BUSY_MIN_LEFT_S, BUSY_TIMEOUT_S = 5.0, 60.0
# A fresh pair of timing processes (judge `process_pairs`) starts only with this much of the run timeout left
# beyond three times the first pair's timing: two process starts, the candidate's import, the rounds.
PAIR_MIN_LEFT_S = 30.0


# A trial's verdicts on what the candidate computed: in a fresh process for timing they fail the candidate.
WRONG_OUTPUT = frozenset({"mismatch", "wrong_shape", "wrong_dtype", "nan"})


class _PairCut(Exception):
    """A fresh pair of timing processes could not be timed (why)."""


class Rejected(Exception):
    """A defence fired: the verdict is `rejected` with this message."""


class Failed(Exception):
    """The candidate failed a step: `status` with `detail`."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class CandidateSession:
    def __init__(self, judge, verdict: dict, workdir: Path, source_file: Path, build_dir: Path,
                 worker: WorkerProcess | None = None) -> None:
        """`worker`: a candidate worker started ahead in `workdir` that has run nothing yet (else one is
        started); the build command points its TORCH_EXTENSIONS_DIR at `build_dir`."""
        self.judge, self.options, self.verdict = judge, judge.options, verdict
        self.workdir, self.source_file = workdir, source_file
        self.flags = verdict["flags"]
        self.custom_calls = 0
        self.build_dir = build_dir
        self.worker = worker or WorkerProcess("candidate", workdir, env=judge.worker_env)
        self.worker_retired = False   # closed, its waits counted in retired_waited_s (`_retire_worker`)
        self.retired_waited_s = 0.0
        self.phase = "build"

    def close(self) -> None:
        self._retire_worker()

    def run(self) -> tuple[str, str]:
        try:
            return self._run()
        except Rejected as exc:
            return "rejected", str(exc)
        except Failed as exc:
            return exc.status, exc.detail
        except WorkerTimeout:
            limit = self.options.build_timeout_s if self.phase == "build" else self.options.run_timeout_s
            what = "building/importing the candidate" if self.phase == "build" else "running the candidate"
            return "timeout", f"{what} took longer than {limit:g} s (wall clock); the process was killed"
        except WorkerDied as exc:
            if exc.returncode is None or self.worker.proc.poll() is None:
                return "runtime_error", str(exc)
            return describe_death(exc)

    def _build_command(self) -> dict:
        options = self.options
        return {
            "op": "build",
            "candidate": str(self.source_file),
            "init_inputs": str(self.judge.init_inputs_path),
            "seed": options.seed,
            "device": options.device,
            "compile_only": options.compile_only,
            "build_dir": str(self.build_dir),
            "memory_fraction": options.memory_fraction,
            "protected": protected_paths(self.judge.problem),
        }

    def _run(self) -> tuple[str, str]:
        options = self.options
        self.worker.send(self._build_command())
        profile = self.verdict["profile"]
        started = time.monotonic()
        if not options.compile_only:
            # The reference loads while the candidate builds (it needs no GPU time for that).
            self.judge._start_reference()
            self.judge._reference_request({"op": "reset"})
            self.verdict["env"] = self.judge._env
            self.verdict["seeds"] = self.judge._seeds()
            profile["reference_s"] = round(time.monotonic() - started, 3)
        build = self.worker.receive(options.build_timeout_s)
        profile["build_s"] = round(time.monotonic() - started, 3)
        self.verdict["build_seconds"] = round(build.get("build_seconds", 0.0), 3)
        if build.get("status") == "build_error":
            raise Failed("build_error", trim_build_log(build.get("log", "")))
        self._check(build)
        extensions = build.get("extensions", 0)
        if options.compile_only:
            self.flags["no_custom_kernel"] = extensions == 0 and not self.flags["custom_kernel_source"]
            note = f"; {build['note']}" if build.get("note") else ""
            if not extensions:
                return "builds", ("nothing was compiled: importing the candidate and constructing ModelNew "
                                  "built no extension (it builds elsewhere, e.g. only on a GPU or inside "
                                  f"forward), so its CUDA sources were not checked{note}")
            return "builds", f"{extensions} extension(s) compiled{note}"

        self.phase = "run"
        started = time.monotonic()
        deadline = started + options.run_timeout_s
        for trial in self.judge._trials:
            self._run_trial(trial, deadline)
        profile["trials_s"] = round(time.monotonic() - started, 3)
        # Custom kernels are seen at runtime (calls into a built extension); Triton only in the source.
        self.flags["no_custom_kernel"] = (
            self.custom_calls == 0 and "triton.jit" not in self.source_file.read_text()
        )
        if options.timing:
            started = time.monotonic()
            self._time(deadline)
            profile["timing_s"] = round(time.monotonic() - started, 3)
        return "correct", self._summary()

    def _left(self, deadline: float) -> float:
        return max(deadline - time.monotonic(), 0.001)

    def _check(self, reply: dict) -> None:
        """Fold the always-present parts of a candidate reply into the verdict; raise on a failure."""
        if reply.get("precision_changes"):
            self.flags["precision"] = "downcast"
            self.flags["precision_changes"] = reply["precision_changes"]
        if reply.get("violations"):
            raise Rejected("; ".join(dict.fromkeys(reply["violations"])))
        if not reply.get("ok"):
            raise Failed(reply.get("status", "runtime_error"), reply.get("detail", ""))

    def _run_trial(self, trial: dict, deadline: float, entries: list | None = None) -> None:
        """One trial in both processes, compared; its entry goes to `entries` (the verdict's trials)."""
        entries = self.verdict["trials"] if entries is None else entries
        index = trial["index"]
        clock = time.monotonic()
        reference = self.judge._reference_request({"op": "trial", "index": index})
        seconds: dict[str, float] = {}
        self._trial_phase(seconds, "reference_s", time.monotonic() - clock)
        self._note_memory("reference_peak_bytes", reference)
        if reference.get("skipped"):
            entries.append({**trial, "status": "skipped", "detail": reference["skipped"],
                                           "max_abs_err": None, "max_rel_err": None, "first_mismatch": None})
            return
        outputs = self.workdir / f"outputs_{index}.pt"
        reply = self.worker.request(
            {
                "op": "trial",
                "inputs": reference["inputs"],
                "output_buffers": reference.get("output_buffers"),
                "state_dict": reference.get("state_dict"),
                "outputs": str(outputs),
                "buffers": reference["buffers"],
                "check_inputs": not reference["mutates_inputs"],
                "check_aliasing": not reference["aliases_inputs"],
                "determinism": index == 0 and not reference["mutates_inputs"],
            },
            self._left(deadline),
        )
        self._trial_phase(seconds, "candidate_s", time.monotonic() - clock - seconds["reference_s"])
        entry = {**trial, "status": None, "max_abs_err": None, "max_rel_err": None, "first_mismatch": None,
                 "seconds": seconds}
        entries.append(entry)
        try:
            self._check(reply)
        except (Rejected, Failed) as exc:
            entry["status"] = getattr(exc, "status", "rejected")
            raise
        self._note_memory("candidate_peak_bytes", reply)
        self.custom_calls += reply.get("custom_calls", 0)
        fallback = reply.get("custom_errors", []) + reply.get("swallowed", [])
        if fallback:
            self.flags["fallback_detected"] = True
            self.flags.setdefault("fallback_notes", []).extend(
                n for n in fallback if n not in self.flags.get("fallback_notes", [])
            )
        if reply.get("nondeterministic"):
            self.flags["nondeterministic"] = True
        if reply.get("new_threads"):
            self.flags["background_threads"] = max(
                self.flags.get("background_threads", 0), reply["new_threads"]
            )
        if reply.get("wrong_device"):
            entry["status"] = "mismatch"
            raise Failed("mismatch", f"trial {index} ({trial['distribution']}): {reply['wrong_device']}")
        clock = time.monotonic()
        result = self.judge._reference_request({"op": "compare", "index": index, "outputs": str(outputs)})
        self._trial_phase(seconds, "compare_s", time.monotonic() - clock)
        if result.get("float64_s") is not None:   # part of compare_s
            self._trial_phase(seconds, "float64_s", result["float64_s"])
        outputs.unlink(missing_ok=True)
        for name in ("inputs", "output_buffers"):
            if reference.get(name):
                Path(reference[name]).unlink(missing_ok=True)
        if reference.get("state_dict"):
            Path(reference["state_dict"]).unlink(missing_ok=True)
        entry.update({k: result.get(k) for k in ("status", "max_abs_err", "max_rel_err", "first_mismatch")})
        if result["status"] not in ("correct", "skipped"):
            raise Failed(
                result["status"],
                f"trial {index} ({trial['distribution']}, seed {trial['seed']}): {result['detail']}",
            )

    def _time(self, deadline: float) -> None:
        """Candidate and eager in rounds, each in lockstep (judge/timing.py); torch.compile once per judge.
        Where either side is launch-bound (judge/busy.py `host_bound`), each side's process sets its speed
        (a process's own offset, up to 5-7% on lent H200s, that no number of rounds in it averages away):
        both are timed again in fresh processes, `process_pairs` pairs in all, and the speedup is the median
        of the pairs' own (`_launch_bound_pairs`)."""
        started = time.monotonic()
        rounds, busy = self._pair_rounds(deadline, profile=self.judge.measures_busy())
        first_pair_s = time.monotonic() - started
        self._retire_worker()  # its memory is not needed for the torch.compile timing
        reference = self.judge.reference_timings(eager=False)
        eager_busy = self.judge.reference_busy() if busy is not None else None
        if host_bound(eager_busy):
            reference = self.judge.quiet_reference_timings(eager=False)
        pairs = [rounds]
        if eager_busy is not None:
            self.verdict["launch_bound"] = launch_bound_section(eager_busy, busy)
            if host_bound(eager_busy, busy):
                pairs = self._launch_bound_pairs(rounds, deadline, first_pair_s)
        every = {side: [r for pair in pairs for r in pair[side]] for side in ("candidate", "eager")}
        stats, eager = combine_rounds(every["candidate"]), combine_rounds(every["eager"])
        timings = self.verdict["timings"]
        timings["candidate"] = public(stats)
        timings["eager"] = public(eager)
        # With work hidden from the events in any pair, the wall clock is the honest time (decided per
        # pair: a majority over pooled rounds could be outvoted by one long pair).
        wall = any(combine_rounds(pair["candidate"])["disagrees"] for pair in pairs)
        self.flags["timing_disagreement"] = wall
        per_pair = [paired_ratios(pair["candidate"], pair["eager"], wall=wall) for pair in pairs]
        timings["compile"] = reference["compile"]
        if "compile_reduce_overhead" in reference:
            timings["compile_reduce_overhead"] = reference["compile_reduce_overhead"]
        if "compile_error" in reference:
            self.verdict["warnings"].append(
                {"check": "compile", "line": None, "message": reference["compile_error"]}
            )
        if all(per_pair):
            pair_ratios = [statistics.median(ratios) for ratios in per_pair]
            paired = statistics.median(pair_ratios)
            ratios = [ratio for ratios in per_pair for ratio in ratios]
            self.verdict["speedup_vs_eager"] = round(paired, 4)
            # every round's ratio and their spread (the "±" of the speedup: judge/timing.py)
            self.verdict["speedup_vs_eager_rounds"] = [round(r, 4) for r in ratios]
            self.verdict["speedup_vs_eager_spread"] = round(ratio_spread(ratios), 4)
            if len(pairs) > 1:
                self.verdict["speedup_vs_eager_pairs"] = [round(r, 4) for r in pair_ratios]
            # torch.compile was timed in rounds beside eager (once per judge): eager bridges the two pairings
            for key, name in (("speedup_vs_compile", "compile"),
                              ("speedup_vs_compile_reduce_overhead", "compile_reduce_overhead")):
                if reference.get(f"eager_over_{name}"):
                    self.verdict[key] = round(paired / reference[f"eager_over_{name}"], 4)

    def _pair_rounds(self, deadline: float, profile: bool,
                     quiet: bool = False) -> tuple[dict[str, list[dict]], dict | None]:
        """The timing rounds of the current candidate process and reference process (`quiet`: with no CPU
        work on the host), then (`profile`) the candidate's GPU busy share: rounds by side, and the share
        or None."""
        # The candidate reads its timing inputs once, in its first round (round 0 times it first).
        inputs = self.judge._reference_request({"op": "share_timing_inputs"})["inputs"]
        with gpu_timing(quiet=quiet):
            cuda = self.options.device == "cuda"
            # rounds past MAX_ROUNDS on CUDA only, and in at most a quarter of the run's time left (the
            # GPU busy share and torch.compile's timing follow)
            noisy_s = min(NOISY_ROUNDS_S, (deadline - time.monotonic()) / 4) if cuda else 0.0
            rounds = alternating_rounds(
                None, ("candidate", "eager"), per_round(self.options.min_runs, self.options.min_time_s),
                self.options.settle, pin=cuda, noisy_s=noisy_s,
                together=lambda order, settings: self._lockstep_round(order, settings, inputs, deadline))
            # After the candidate's last timed round: its process is closed next, so the profiler never
            # precedes one of its timings.
            busy = self._candidate_busy(deadline) if profile else None
        return rounds, busy

    def _launch_bound_pairs(self, first: dict[str, list[dict]], deadline: float,
                            first_pair_s: float) -> list[dict[str, list[dict]]]:
        """The pairs of processes a launch-bound model's speedup is taken from: fresh pairs timed quiet
        (gpulock.py: no CPU work anywhere on the host), `process_pairs` in all with the first, which counts
        where every timing is quiet; where ordinary timings share the host with builds on other CPUs
        (`shares_host`: a launch loop ran 13-16% slower beside them), it is left out and only fresh pairs
        count. A pair that cannot be had leaves those timed so far (the first where there are none), with a
        warning."""
        pairs = [] if shares_host() else [first]
        why = self._more_pairs(pairs, deadline, first_pair_s)
        self.verdict["launch_bound"]["quiet_pairs"] = len(pairs)
        if why:
            which = "" if pairs else ", the first, beside CPU work on the host's other CPUs"
            message = (f"launch-bound: timed in {len(pairs) or 1} pair(s) of processes, not "
                       f"{self.options.process_pairs}{which} ({why})")
            self.verdict["warnings"].append({"check": "timing", "line": None, "message": message})
        return pairs or [first]

    def _more_pairs(self, pairs: list[dict[str, list[dict]]], deadline: float, first_pair_s: float) -> str:
        """Add fresh pairs of processes' rounds to `pairs` up to `process_pairs`, while the run's time
        allows; why it stopped short ("" when it did not). A pair that cannot be had (a process that fails
        to start, to build or in time, the machine's memory) leaves the pairs timed so far. A candidate
        whose fresh process gives wrong outputs or breaks a rule fails."""
        started = time.monotonic()
        wanted = self.options.process_pairs
        needed_s = PAIR_MIN_LEFT_S + 3 * first_pair_s
        why = ""
        while len(pairs) < wanted:
            if self._left(deadline) <= needed_s:
                why = f"{self._left(deadline):.0f} s of the run timeout left"
                break
            try:
                pairs.append(self._fresh_pair(deadline, len(pairs)))
            except _PairCut as cut:
                why = " ".join(str(cut).split())[:300]
                break
        self._count("timing_pairs_s", time.monotonic() - started)
        return why

    def _fresh_pair(self, deadline: float, index: int) -> dict[str, list[dict]]:
        """Another pair of processes: the candidate imported again (its extensions load from the build
        folder) and eager's Model built anew under the construction seed in a new reference process. The
        first trial runs in both and is compared, as in the first pair (what a fresh process computes is
        checked before it is timed), then the rounds. Their rounds by side; `_PairCut` where the pair
        could not be timed for any reason but the candidate's wrong outputs or broken rules."""
        self._retire_worker()
        try:
            workdir = self.workdir / f"pair_{index}"
            workdir.mkdir(exist_ok=True)
            self.worker = WorkerProcess("candidate", workdir, env=self.judge.worker_env)
            self.worker_retired = False
            self.worker.send(self._build_command())
            self.judge.restart_reference()
            self.judge._reference_request({"op": "reset"})
            build = self.worker.receive(self._left(deadline))
            if build.get("status") == "build_error":
                raise _PairCut("the candidate did not build again: " + trim_build_log(build.get("log", "")))
            self._check(build)
            self._run_trial(self.judge._trials[0], deadline, entries=[])
            rounds, _ = self._pair_rounds(deadline, profile=False, quiet=True)
        except Failed as exc:
            if exc.status in WRONG_OUTPUT:
                raise Failed(exc.status, f"in a fresh process for timing: {exc.detail}") from exc
            raise _PairCut(f"{exc.status}: {exc.detail}") from exc
        except (WorkerDied, WorkerTimeout, KernelwrightError, OSError) as exc:  # OSError: no process started
            raise _PairCut(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._retire_worker()
        return rounds

    def _retire_worker(self) -> None:
        """Close the candidate's current process, its lock waits kept for the verdict's lock_wait_s."""
        if not self.worker_retired:
            self.worker.close()
            self.retired_waited_s += self.worker.waited_s
            self.worker_retired = True

    def waited_s(self) -> float:
        """Seconds every candidate process of this session spent blocked on other processes' locks."""
        return self.retired_waited_s + (0.0 if self.worker_retired else self.worker.waited_s)

    def _lockstep_round(self, order: tuple[str, ...], settings: dict, inputs: str,
                        deadline: float) -> dict[str, dict]:
        """One round of candidate and eager in lockstep (judge/timing.py): both processes get the round's
        command at once, then the floor in turns, `order[0]` first, each turn until the process asks for
        the next or replies. A side that fails or dies mid-round ends its turns; the other finishes alone
        (so that its reply is read), then the failure is raised, the candidate's first. The candidate's
        code shares its process: past the run's deadline, or asking for more turns than a series has
        (`max_turns`), it is killed. Each side's timing stats, by side."""
        clock = time.monotonic()
        workers = {"candidate": self.worker, "eager": self.judge._start_reference()}
        command = {"op": "time", "locked": True, "lockstep": True, **settings}
        commands = {"candidate": {**command, "inputs": inputs}, "eager": {**command, "which": "eager"}}
        replies: dict[str, dict] = {}
        lost: dict[str, Exception] = {}
        turns = dict.fromkeys(order, 0)

        def hear(side: str) -> None:
            timeout = self._left(deadline) if side == "candidate" else REFERENCE_TIMEOUT_S
            try:
                replies[side] = workers[side].receive(timeout)
            except (WorkerDied, WorkerTimeout) as exc:
                lost[side] = exc

        def asks(side: str) -> bool:
            return side not in lost and replies[side].get("turn") is True

        for side in order:
            workers[side].send(commands[side])
        for side in order:
            hear(side)
        while any(asks(side) for side in order):
            for side in order:
                if not asks(side):
                    continue
                turns[side] += 1
                if side == "candidate" and time.monotonic() >= deadline:
                    workers[side].kill()
                    lost[side] = WorkerTimeout("the candidate's timing ran past the run's deadline")
                elif turns[side] > max_turns(settings["min_time_s"]):
                    workers[side].kill()
                    lost[side] = WorkerDied(None, f"the {side} process asked for more timing turns than a "
                                                  "series has")
                else:
                    workers[side].send({"op": "go"})
                    hear(side)
        self._count("timing_rounds_s", time.monotonic() - clock)
        Path(inputs).unlink(missing_ok=True)  # the candidate read them in its first round
        reference_failure, eager = None, None
        try:
            if "eager" in lost:
                raise self.judge._reference_lost(lost["eager"])
            eager = self.judge._reference_reply(replies["eager"])
        except Exception as exc:  # noqa: BLE001 - raised below, after the candidate's own failure
            reference_failure = exc
        if "candidate" in lost:
            raise lost["candidate"]
        self._check(replies["candidate"])
        if reference_failure is not None:
            raise reference_failure
        self._note_memory("candidate_peak_bytes", replies["candidate"])
        self._note_memory("reference_peak_bytes", eager)
        for side in order:
            self._count(f"timing_{side}_measure_s", replies[side]["timing"]["seconds"])
        return {side: replies[side]["timing"] for side in order}

    def _trial_phase(self, seconds: dict[str, float], phase: str, value: float) -> None:
        """One trial's `phase` took `value` s: in its entry's seconds and the profile's trials_<phase>."""
        seconds[phase] = round(value, 3)
        self._count(f"trials_{phase}", seconds[phase])

    def _count(self, phase: str, seconds: float) -> None:
        """Add `seconds` to the profile's `phase` as it happens (a failed verdict keeps what ran)."""
        profile = self.verdict["profile"]
        profile[phase] = round(profile.get(phase, 0.0) + seconds, 3)

    def _candidate_busy(self, deadline: float) -> dict:
        """The candidate's GPU busy share (judge/busy.py), or {"error": why}: never a verdict."""
        left = deadline - time.monotonic()
        if left < BUSY_MIN_LEFT_S:
            return {"error": f"not measured: {max(left, 0):.0f} s of the run timeout left after timing"}
        try:
            reply = self.worker.request({"op": "busy"}, min(left, BUSY_TIMEOUT_S))
        except (WorkerDied, WorkerTimeout) as exc:
            return {"error": f"the candidate's process failed while profiled: {exc}"}
        return reply.get("busy") or {"error": reply.get("detail") or "no measurement in the reply"}

    def _note_memory(self, key: str, reply: dict) -> None:
        value = reply.get("peak_memory_bytes")
        memory = self.verdict["memory"]
        if value is not None:
            memory[key] = max(memory[key] or 0, value)

    def _summary(self) -> str:
        passed = sum(1 for t in self.verdict["trials"] if t["status"] == "correct")
        skipped = sum(1 for t in self.verdict["trials"] if t["status"] == "skipped")
        text = f"{passed} trials passed" + (f", {skipped} skipped" if skipped else "")
        if self.verdict["speedup_vs_eager"] is not None:
            text += f"; {self.verdict['speedup_vs_eager']:.2f}x vs eager"
        if self.verdict["speedup_vs_compile"] is not None:
            text += f", {self.verdict['speedup_vs_compile']:.2f}x vs torch.compile"
        return text


def protected_paths(problem: Problem) -> list[str]:
    """Files the candidate may not open: the problem file and the bundled problems."""
    return [str(problem.path.resolve()), str(BUNDLED_DIR)]


def describe_death(exc: WorkerDied) -> tuple[str, str]:
    """(status, detail) for a candidate process that died without replying."""
    status = "oom" if exc.returncode == -9 else "runtime_error"
    cause = " (probably the OS out-of-memory killer)" if status == "oom" else ""
    tail = f"; last output:\n{exc.log_tail}" if exc.log_tail else ""
    return status, f"the candidate process died: {describe_exit(exc.returncode)}{cause}{tail}"
