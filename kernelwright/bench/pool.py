"""Runs bench tasks on the workers: one thread per worker slot (`--jobs` per GPU) takes the next task
its GPU has memory for (admission.py) and runs it in a fresh subprocess pinned to its GPU
(CUDA_VISIBLE_DEVICES) and given its GPU's lock file. The GPU work is all in those subprocesses; the
threads only wait on them (sampling their memory, hostmemory.py), and hand rows back to the main thread,
the only writer of results.

A task's process runs in its own session, so a hang is ended by killing its whole process group
(the judge's and compiler's children included), and a crash only costs that task's rows. A task killed
by a SIGKILL the bench did not send is told apart: the kernel's out-of-memory killer (`host_oom`) or
something outside kernelwright, with the host's memory figures either way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelwright.bench.admission import Admission, Need
from kernelwright.bench.devices import Worker
from kernelwright.bench.hostmemory import POLL_S, HostMemory, TaskWatch
from kernelwright.bench.locks import LOCKS_FILE
from kernelwright.bench.plan import BenchTask
from kernelwright.bench.rows import failure_row, finish, missing_row, out_of_memory, settle
from kernelwright.bench.store import ResultsStore
from kernelwright.gpulock import CPU_ENV, RESERVED_ENV
from kernelwright.gpulock import ENV as GPU_LOCK_ENV
from kernelwright.gpulock import LOG_ENV as LOCK_LOG_ENV
from kernelwright.judge.judge import REFERENCE_TIMEOUT_S
from kernelwright.judge.options import JudgeOptions

Execute = Callable[[BenchTask, Worker], list[dict]]
LOG_TAIL_CHARS = 20000
# Beyond the judge's own limits: starting the task (imports, loading the problem) and the reference.
STARTUP_SLACK_S = 60.0


class SubprocessExecutor:
    """Runs one task in `python -m kernelwright.bench.tasks` under a wall-clock limit: the sum of the
    judge's limits for each system (plus kernelwright's optimize step and the reference). It is only a
    backstop: a candidate's hang is ended by the judge first, as that system's `timeout` verdict."""

    def __init__(self, store: ResultsStore, options: JudgeOptions, host: HostMemory | None = None,
                 timing_cpus: str | None = None, timing_cpu: dict[str, str] | None = None):
        self.store = store
        self.options = options
        self.timing_cpus = timing_cpus   # the tasks' $KERNELWRIGHT_TIMING_CPUS; None: as in this process
        self.timing_cpu = timing_cpu or {}   # per GPU, its tasks' $KERNELWRIGHT_TIMING_CPU (devices.py)
        self.host = host or HostMemory()
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopped = False

    def __call__(self, task: BenchTask, worker: Worker) -> list[dict]:
        if all(run.kind == "candidates" and run.candidate is None for run in task.runs):
            return [missing_row(task, run) for run in task.runs]
        env = dict(os.environ)
        if worker.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = worker.gpu
        if worker.lock is not None:
            env[GPU_LOCK_ENV] = worker.lock
        # every hold of a lock by the task's processes, for the report's "where the wall time went"
        env.setdefault(LOCK_LOG_ENV, str(self.store.directory.resolve() / LOCKS_FILE))
        if self.timing_cpus is not None:
            env[RESERVED_ENV] = self.timing_cpus
        if worker.gpu in self.timing_cpu:
            env.setdefault(CPU_ENV, self.timing_cpu[worker.gpu])
        options = self.options
        optimizes = sum(run.kind == "kernelwright" for run in task.runs)
        timeout = (len(task.runs) * (options.build_timeout_s + options.run_timeout_s)
                   + optimizes * options.build_timeout_s + REFERENCE_TIMEOUT_S + STARTUP_SLACK_S)
        with tempfile.TemporaryDirectory(prefix="kernelwright-bench-") as scratch:
            spec, out = Path(scratch) / "spec.json", Path(scratch) / "rows.jsonl"
            spec.write_text(json.dumps({"task": dataclasses.asdict(task),
                                        "options": dataclasses.asdict(options)}))
            command = self._command(spec, out)
            watch = TaskWatch(self.host)
            returncode, output = self._run(command, env, timeout, watch)
            rows = _read_rows(out)
        done = {row["system"] for row in rows}
        if returncode is None:
            status, detail = "timeout", f"the bench task ran past its {timeout:.0f} s limit and was killed"
        elif returncode == -signal.SIGKILL and not self._stopped:
            status, detail = watch.killed()
        else:
            reason = f"killed by {_signal_name(-returncode)}" if returncode < 0 else f"exit code {returncode}"
            status = "bench_error"
            detail = f"the bench task process failed ({reason}): {output.strip()[-400:]}"
        rows += [failure_row(task, run, status, detail) for run in task.runs if run.system not in done]
        for row in rows:
            if row["status"] != "correct":
                self._write_log(row, command, output)
        return rows

    def _command(self, spec: Path, out: Path) -> list[str]:
        return [sys.executable, "-m", "kernelwright.bench.tasks", str(spec), str(out)]

    def _run(self, command: list[str], env: dict, timeout: float,
             watch: TaskWatch | None = None) -> tuple[int | None, str]:
        """(exit code, combined output); exit code None when the limit was hit. `watch` samples the
        process tree's memory every POLL_S meanwhile."""
        with self._lock:
            if self._stopped:
                return -signal.SIGTERM, "the bench was interrupted"
            process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, errors="replace", start_new_session=True)
            self._live.add(process)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:  # communicate() may be called again after a timeout without losing output
                    output, _ = process.communicate(timeout=min(POLL_S, max(deadline - time.monotonic(), 0)))
                    return process.returncode, output
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        break
                    if watch is not None:
                        watch.sample(process.pid)
            _kill_group(process)
            output, _ = process.communicate()
            return None, output
        finally:
            with self._lock:
                self._live.discard(process)

    def stop(self) -> None:
        """Kill every running task (Ctrl-C): their process groups die with them."""
        with self._lock:
            self._stopped = True
            for process in list(self._live):
                _kill_group(process)

    def _write_log(self, row: dict, command: list[str], output: str) -> None:
        path = self.store.log_path(row["system"], row["problem"])
        path.parent.mkdir(parents=True, exist_ok=True)
        header = f"{row['status']}: {row['detail']}\n\n$ {' '.join(command)}\n"
        path.write_text(header + output[-LOG_TAIL_CHARS:])


def _read_rows(path: Path) -> list[dict]:
    """The rows a task wrote before it ended (a torn last line, from a killed task, is dropped)."""
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_pool(tasks: list[BenchTask], workers: list[Worker], execute: Execute,
             on_rows: Callable[[BenchTask, list[dict]], None], deadline: float | None = None,
             stop: Callable[[], None] | None = None, retry_alone: bool = True,
             need: Need | None = None) -> list[BenchTask]:
    """Run `tasks` on `workers` (one at a time per worker slot; with `need`, the bytes of GPU memory a
    task needs or None when unknown, also only as many at once as each GPU's memory holds: admission.py),
    calling `on_rows` in this thread as each finishes. No task starts after `deadline`
    (time.monotonic()); the tasks not started are returned. On Ctrl-C, `stop` is called to end the
    running tasks before the interrupt propagates.

    A task that ran out of GPU memory, or whose reference failed, while it shared its GPU with other tasks
    is not recorded: it runs again at the end, alone on its GPU, and that attempt's rows are the ones kept
    (on the H100 with --jobs 6, OOMs caused by the other tasks were reported as the problem's errors). A
    task killed by the host's out-of-memory killer runs again alone on the host. Rows are then settled
    (rows.py): only a reference that failed alone is the problem's fault."""
    admission = Admission(tasks, workers, need)
    finished: queue.Queue[tuple[BenchTask, list[dict]]] = queue.Queue()
    again_on_gpu: list[BenchTask] = []
    again_on_host: list[BenchTask] = []

    def work(worker: Worker) -> None:
        while (lease := admission.take(worker, deadline)) is not None:
            task, started = lease.task, time.monotonic()
            try:
                rows = execute(task, worker)
            except Exception as exc:  # the bench's own failure: recorded, retried by --resume
                detail = f"{type(exc).__name__}: {exc}"
                rows = [failure_row(task, run, "bench_error", detail) for run in task.runs]
            admission.finish(lease)
            if retry_alone and len(workers) > 1 and any(row.get("status") == "host_oom" for row in rows):
                again_on_host.append(task)
                continue
            if retry_alone and lease.shared and _environment_suspect(rows):
                again_on_gpu.append(task)
                continue
            for row in rows:
                finish(settle(row, alone=not lease.shared), worker.device, worker.gpu,
                       time.monotonic() - started)
            finished.put((task, rows))

    with ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="bench-worker") as threads:
        futures = [threads.submit(work, worker) for worker in workers]
        try:
            while not (all(f.done() for f in futures) and finished.empty()):
                try:
                    on_rows(*finished.get(timeout=0.1))
                except queue.Empty:
                    continue
        except BaseException:
            admission.close()
            if stop:
                stop()
            raise
    left = admission.left()
    alone_on_gpu = list({w.gpu: w for w in reversed(workers)}.values())
    for again, alone in ((again_on_gpu, alone_on_gpu), (again_on_host, workers[:1])):
        if again:
            again.sort(key=tasks.index)
            left += run_pool(again, alone, execute, on_rows, deadline, stop, retry_alone=False)
    return left


def _environment_suspect(rows: list[dict]) -> bool:
    """Failures that sharing a GPU can cause: out of memory, and the reference failing at all."""
    return any(out_of_memory(row) or (row.get("flags") or {}).get("reference_failed") for row in rows)
