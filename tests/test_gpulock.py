"""The GPU lock (kernelwright/gpulock.py): timings exclude all other GPU work across processes, shared
holders overlap, a waiting timer is not starved, and without the environment variable nothing locks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelwright import gpulock

HOLD = """
import sys, time
from kernelwright.gpulock import gpu_timing, gpu_work
kind, seconds, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
with (gpu_timing() if kind == "timing" else gpu_work()):
    start = time.time()
    time.sleep(seconds)
    end = time.time()
with open(log, "a") as f:
    f.write(f"{kind} {start} {end}\\n")
"""


def _start(kind: str, seconds: float, log: Path, lock: Path) -> subprocess.Popen:
    env = {"KERNELWRIGHT_GPU_LOCK": str(lock), "PATH": "/usr/bin:/bin"}
    return subprocess.Popen([sys.executable, "-c", HOLD, kind, str(seconds), str(log)],
                            env={**env, "PYTHONPATH": str(Path(gpulock.__file__).parents[1])})


def _intervals(log: Path) -> list[tuple[str, float, float]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(kind, float(a), float(b)) for kind, a, b in rows]


def _overlap(a: tuple, b: tuple) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_timing_excludes_shared_work_and_shared_holders_overlap(tmp_path: Path):
    log, lock = tmp_path / "log", tmp_path / "gpu.lock"
    workers = [_start("work", 1.0, log, lock), _start("work", 1.0, log, lock)]
    time.sleep(0.4)  # both hold the shared lock by now
    workers += [_start("timing", 0.5, log, lock), _start("timing", 0.5, log, lock)]
    time.sleep(0.2)
    workers.append(_start("work", 0.3, log, lock))  # arrives while a timer waits: queues behind it
    for w in workers:
        assert w.wait(timeout=30) == 0
    spans = _intervals(log)
    timings = [s for s in spans if s[0] == "timing"]
    works = [s for s in spans if s[0] == "work"]
    assert len(timings) == 2 and len(works) == 3
    for t in timings:
        assert not any(_overlap(t, other) for other in spans if other is not t)
    first_two = sorted(works, key=lambda s: s[1])[:2]
    assert _overlap(*first_two)  # shared holders ran together
    late = max(works, key=lambda s: s[1])
    assert late[1] >= min(t[2] for t in timings)  # the late reader did not overtake the waiting timer


def test_without_the_variable_nothing_locks(monkeypatch, tmp_path: Path):
    monkeypatch.delenv(gpulock.ENV, raising=False)
    with gpulock.gpu_work(), gpulock.gpu_timing():
        pass
    assert not list(tmp_path.iterdir())


def test_nesting(monkeypatch, tmp_path: Path):
    monkeypatch.setenv(gpulock.ENV, str(tmp_path / "gpu.lock"))
    with gpulock.gpu_timing(), gpulock.gpu_work(), gpulock.gpu_timing():
        pass  # weaker or equal inside a timing: no-ops
    with gpulock.gpu_work(), gpulock.gpu_work():
        pass
    with gpulock.gpu_work(), pytest.raises(RuntimeError, match="own shared lock"):
        with gpulock.gpu_timing():
            pass
