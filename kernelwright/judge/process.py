"""Parent side of the judge's child processes: spawn a fresh interpreter running `judge/worker.py`, send it
JSON commands, wait for each reply under a wall-clock deadline, and turn a hang or a death into an exception
the judge maps to a verdict (the judge itself never dies with the child)."""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

# Every worker runs under one string-hash seed (the caller's PYTHONHASHSEED when it is a number, else this),
# so that a comparison's two processes lay out their dicts of names alike. A launch-bound model's time
# depends on it: level3/13's eager forward in four processes at once (scripts/process_bias.py, one H200,
# 2026-11-28), each process's fastest series differed by up to 12% with a seed of its own and by 1.4% with
# one seed; the median ratio of the worst pair was 6.6% off (4.8% under load) against 2.8%. An A/A under
# `bench --jobs 8` had held 0.95x and 1.035x through 60 rounds (bench/results/2026-11-28-h200-aa-rounds).
WORKER_HASH_SEED = "0"
REFERENCE_TIMEOUT_S = 600.0  # a reference worker's reply: trusted code, this only bounds a broken problem


class WorkerTimeout(Exception):
    """The child did not reply within its deadline (it has been killed)."""


class WorkerDied(Exception):
    """The child exited without replying: a segfault, an abort, the OOM killer, os._exit in candidate code."""

    def __init__(self, returncode: int | None, log_tail: str) -> None:
        self.returncode = returncode
        self.log_tail = log_tail
        super().__init__(f"{describe_exit(returncode)}{': ' + log_tail if log_tail else ''}")


def describe_exit(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the process was killed by {name}"
    return f"the process exited with code {returncode}"


def waited_in(reply: dict) -> float:
    """A reply's `waited_s` (worker.py): a finite non-negative number, else 0 (a worker's reply is not to
    be trusted: candidate code runs in that process)."""
    value = reply.get("waited_s")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        return 0.0
    return float(value)


def worker_hash_seed() -> str:
    """Every judge worker's PYTHONHASHSEED: the caller's own when it is a number, else WORKER_HASH_SEED."""
    value = os.environ.get("PYTHONHASHSEED", "").strip()
    return value if value.isdigit() else WORKER_HASH_SEED


class WorkerProcess:
    """One child process (`role` = "reference" or "candidate") with its own log file. `waited_s`: the
    seconds it has spent blocked on other processes' locks, summed over its replies (worker.py)."""

    def __init__(self, role: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.role = role
        self.log_path = workdir / f"{role}.log"
        reply_read, reply_write = os.pipe()
        self._log = open(self.log_path, "wb")
        child_env = {**os.environ, "PYTHONHASHSEED": worker_hash_seed(), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelwright.judge.worker", role, str(reply_write)],
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            pass_fds=(reply_write,),
            cwd=workdir,
            env=child_env,
            start_new_session=True,  # its own process group: killable with its compilers
        )
        os.close(reply_write)
        self._replies = os.fdopen(reply_read, "rb", buffering=0)
        self._buffer = b""
        self.waited_s = 0.0

    def send(self, command: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child is gone; receive() reports how

    def receive(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout(f"no reply within {timeout:.0f} s")
            ready, _, _ = select.select([self._replies], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._replies.fileno(), 1 << 16)
            if not chunk:
                returncode = self._wait_exit()
                raise WorkerDied(returncode, self.log_tail())
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError as exc:
            self.kill()
            raise WorkerDied(None, f"unreadable reply from the {self.role} process ({exc})") from exc
        if not isinstance(reply, dict):   # the candidate's code shares the process and could write one
            self.kill()
            raise WorkerDied(None, f"unreadable reply from the {self.role} process (not an object)")
        self.waited_s += waited_in(reply)
        return reply

    def request(self, command: dict, timeout: float) -> dict:
        self.send(command)
        return self.receive(timeout)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def _wait_exit(self) -> int | None:
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        """Kill the child's whole process group (compilers it started, processes the candidate forked)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if self.proc.poll() is None:
                self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send({"op": "exit"})
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        for stream in (self.proc.stdin, self._replies, self._log):
            try:
                stream.close()
            except OSError:
                pass
