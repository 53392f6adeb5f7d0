"""The GPU lock (kernelwright/gpulock.py): timings exclude all other GPU work across processes, shared
holders overlap, a waiting timer is not starved, and without the environment variable nothing locks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kernelwright import gpulock

HOLD = """
import sys, time
from kernelwright import gpulock
from kernelwright.gpulock import cpu_work, gpu_timing, gpu_work
kind, seconds, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
gpulock._kept_off[0] = kind == "offbuild"   # a build in a process that keeps off reserved timing CPUs
with {"timing": gpu_timing, "quiet": lambda: gpu_timing(quiet=True), "work": gpu_work, "build": cpu_work,
      "offbuild": cpu_work}[kind]():
    start = time.time()
    time.sleep(seconds)
    end = time.time()
with open(log, "a") as f:
    f.write(f"{kind} {start} {end}\\n")
"""


def _start(kind: str, seconds: float, log: Path, lock: Path, machine: str = "off",
           gpu: bool = True, lock_log: Path | None = None, reserved: str = "") -> subprocess.Popen:
    env = {"KERNELWRIGHT_MACHINE_LOCK": machine, "PATH": "/usr/bin:/bin", gpulock.RESERVED_ENV: reserved}
    if lock_log is not None:
        env[gpulock.LOG_ENV] = str(lock_log)
    if gpu:
        env["KERNELWRIGHT_GPU_LOCK"] = str(lock)
    return subprocess.Popen([sys.executable, "-c", HOLD, kind, str(seconds), str(log)],
                            env={**env, "PYTHONPATH": str(Path(gpulock.__file__).parents[1])})


def _intervals(log: Path) -> list[tuple[str, float, float]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(kind, float(a), float(b)) for kind, a, b in rows]


def _finished_spans(procs: list[subprocess.Popen], log: Path, other: str) -> tuple[list, list]:
    """Wait for every holder; (the timing spans, the `other` kind's spans) from the log."""
    for proc in procs:
        assert proc.wait(timeout=30) == 0
    spans = _intervals(log)
    return [s for s in spans if s[0] == "timing"], [s for s in spans if s[0] == other]


def _overlap(a: tuple, b: tuple) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_timing_excludes_shared_work_and_shared_holders_overlap(tmp_path: Path):
    log, lock = tmp_path / "log", tmp_path / "gpu.lock"
    workers = [_start("work", 1.0, log, lock), _start("work", 1.0, log, lock)]
    time.sleep(0.4)  # both hold the shared lock by now
    workers += [_start("timing", 0.5, log, lock), _start("timing", 0.5, log, lock)]
    time.sleep(0.2)
    workers.append(_start("work", 0.3, log, lock))  # arrives while a timer waits: queues behind it
    timings, works = _finished_spans(workers, log, "work")
    assert len(timings) == 2 and len(works) == 3
    for t in timings:
        assert not any(_overlap(t, other) for other in timings + works if other is not t)
    first_two = sorted(works, key=lambda s: s[1])[:2]
    assert _overlap(*first_two)  # shared holders ran together
    late = max(works, key=lambda s: s[1])
    assert late[1] >= min(t[2] for t in timings)  # the late reader did not overtake the waiting timer


def test_without_the_variable_nothing_locks(monkeypatch, tmp_path: Path):
    monkeypatch.delenv(gpulock.ENV, raising=False)
    monkeypatch.setenv(gpulock.MACHINE_ENV, "off")
    with gpulock.gpu_work(), gpulock.gpu_timing(), gpulock.cpu_work():
        pass
    assert not list(tmp_path.iterdir())


def test_without_the_variable_the_gpu_lock_is_the_devices_own(monkeypatch):
    """Unset, the GPU lock is the current device's file, named by its UUID as the bench names it (so that
    separate optimize runs and benches on one GPU keep their timings apart); `off` disables it; a process
    without a CUDA device has none."""
    from kernelwright.bench.devices import lock_path

    monkeypatch.delenv(gpulock.ENV, raising=False)
    monkeypatch.setattr(gpulock, "_device_uuid", lambda: "8a1b2c3d-0000-1111-2222-333344445555")
    assert gpulock.gpu_lock_path() == lock_path("GPU-8A1B2C3D-0000-1111-2222-333344445555")
    monkeypatch.setenv(gpulock.ENV, "off")
    assert gpulock.gpu_lock_path() is None
    monkeypatch.setenv(gpulock.ENV, "/x/gpu.lock")
    assert gpulock.gpu_lock_path() == "/x/gpu.lock"
    monkeypatch.delenv(gpulock.ENV)
    monkeypatch.setattr(gpulock, "_device_uuid", lambda: None)
    assert gpulock.gpu_lock_path() is None
    # a MIG instance named by CUDA_VISIBLE_DEVICES (before CUDA starts) and by torch (after): one file
    assert gpulock.gpu_lock_file("MIG-5c0b2a1e-aaaa-bbbb-cccc-0123456789ab") == \
        gpulock.gpu_lock_file("5c0b2a1e-aaaa-bbbb-cccc-0123456789ab")


def test_the_devices_uuid_is_found_without_a_cuda_context(monkeypatch):
    """Before CUDA is initialized in the process, the lock's name comes from CUDA_VISIBLE_DEVICES or NVML:
    asking torch would create a context (half a GiB of GPU memory) in processes that only orchestrate."""
    monkeypatch.setattr(gpulock, "_uuids", {})
    assert gpulock._first_visible_uuid("GPU-1a2b,GPU-3c4d") == "GPU-1a2b"
    assert gpulock._first_visible_uuid("bogus") is None
    monkeypatch.setattr(torch.cuda, "_raw_device_uuid_nvml", lambda: ["GPU-aa", "GPU-bb"])
    assert gpulock._first_visible_uuid("1,0") == "GPU-bb" and gpulock._first_visible_uuid(None) == "GPU-aa"
    assert gpulock._first_visible_uuid("2") is None
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("would create a CUDA context"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpulock._device_uuid() == "GPU-bb"


def test_a_lock_file_that_cannot_be_opened_leaves_the_work_unlocked(monkeypatch, tmp_path: Path):
    """Another user's lock file (or an unwritable temp folder): the work runs, without coordination."""
    monkeypatch.setenv(gpulock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv(gpulock.MACHINE_ENV, "off")

    def refuse(path: str) -> int:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(gpulock, "_open_shared", refuse)
    ran = []
    with gpulock.gpu_timing():
        ran.append("timing")
    with gpulock.gpu_work():
        ran.append("work")
    assert ran == ["timing", "work"]


def test_machine_lock_keeps_builds_and_timings_apart(tmp_path: Path):
    """Timings on two GPUs overlap each other, builds overlap each other, never a timing and a build; a
    build arriving while a timing waits queues behind it."""
    log, machine = tmp_path / "log", str(tmp_path / "machine.lock")
    procs = [_start("build", 1.0, log, tmp_path / "gpu0.lock", machine),
             _start("build", 1.0, log, tmp_path / "gpu1.lock", machine)]
    time.sleep(0.4)
    procs += [_start("timing", 0.6, log, tmp_path / "gpu0.lock", machine),
              _start("timing", 0.6, log, tmp_path / "gpu1.lock", machine)]
    time.sleep(0.2)
    procs.append(_start("build", 0.3, log, tmp_path / "gpu0.lock", machine))
    timings, builds = _finished_spans(procs, log, "build")
    assert len(timings) == 2 and len(builds) == 3
    for t in timings:
        assert not any(_overlap(t, b) for b in builds)
    assert _overlap(*timings)  # two GPUs' timings ran together
    assert _overlap(*sorted(builds, key=lambda s: s[1])[:2])
    late = max(builds, key=lambda s: s[1])
    assert late[1] >= max(t[2] for t in timings)  # did not overtake the waiting timers


def test_with_reserved_timing_cpus_only_a_quiet_timing_keeps_their_builds_off_the_host(tmp_path: Path):
    """The CPU work of processes that keep off reserved timing CPUs runs beside an ordinary timing (pinned
    to its own CPU), never beside a quiet one (a launch-bound model's): the quiet timer waits for that work
    to drain, and work arriving while it waits queues behind it."""
    import os

    from kernelwright.bench.locks import read_holds

    log, machine, lock_log = tmp_path / "log", str(tmp_path / "machine.lock"), tmp_path / "locks.jsonl"
    reserved = str(max(os.sched_getaffinity(0)))
    procs = [_start("offbuild", 1.5, log, tmp_path / "gpu0.lock", machine, lock_log=lock_log)]
    time.sleep(0.4)
    procs.append(_start("timing", 0.4, log, tmp_path / "gpu0.lock", machine, lock_log=lock_log,
                        reserved=reserved))
    time.sleep(0.2)
    procs.append(_start("quiet", 0.5, log, tmp_path / "gpu1.lock", machine, reserved=reserved))
    time.sleep(0.3)
    procs.append(_start("offbuild", 0.3, log, tmp_path / "gpu0.lock", machine, lock_log=lock_log))
    for proc in procs:
        assert proc.wait(timeout=30) == 0
    spans = _intervals(log)
    first, late = sorted((s for s in spans if s[0] == "offbuild"), key=lambda s: s[1])
    (timing,), (quiet,) = [s for s in spans if s[0] == "timing"], [s for s in spans if s[0] == "quiet"]
    assert _overlap(timing, first)
    assert not _overlap(quiet, first) and not _overlap(quiet, late)
    assert late[1] >= quiet[2]   # did not overtake the waiting quiet timer
    assert {h["lock"] for h in read_holds(lock_log)} == {"machine_offwork", "machine_pinned", "gpu_exclusive"}


def test_the_lock_log_has_every_hold_and_says_where_the_time_went(tmp_path: Path):
    """With KERNELWRIGHT_LOCK_LOG set, each hold is one line (lock, asked, got, released, who); the bench's
    summary of it (bench/locks.py) gives each lock's held time and the waits."""
    from kernelwright.bench.locks import lock_summary, read_holds

    log, machine, lock_log = tmp_path / "log", str(tmp_path / "machine.lock"), tmp_path / "locks.jsonl"
    procs = [_start("build", 1.0, log, tmp_path / "gpu.lock", machine, lock_log=lock_log)]
    time.sleep(0.4)
    procs.append(_start("timing", 0.5, log, tmp_path / "gpu.lock", machine, lock_log=lock_log))
    _finished_spans(procs, log, "build")
    holds = read_holds(lock_log)
    assert sorted(h["lock"] for h in holds) == ["gpu_exclusive", "machine_timing", "machine_work"]
    assert all(h["asked"] <= h["got"] <= h["released"] for h in holds)
    assert {h["who"] for h in holds} == {"-c build", "-c timing"}   # the script, its first argument
    summary = lock_summary(holds)
    locks = summary["locks"]
    assert 0.9 <= locks["machine_work"]["held_s"] < 3 and 0.4 <= locks["machine_timing"]["held_s"] < 2
    assert locks["machine_timing"]["wait_s"] >= 0.3   # the timer waited for the build to drain
    assert summary["runs"] == 1 and summary["span_s"] >= 1.4


def test_a_dead_holder_releases_the_machine_lock(tmp_path: Path):
    machine = str(tmp_path / "machine.lock")
    holder = _start("build", 60.0, tmp_path / "log", tmp_path / "gpu.lock", machine, gpu=False)
    time.sleep(0.5)
    holder.kill()
    holder.wait()
    timer = _start("timing", 0.0, tmp_path / "log", tmp_path / "gpu.lock", machine)
    assert timer.wait(timeout=20) == 0


def test_nesting(monkeypatch, tmp_path: Path):
    monkeypatch.setenv(gpulock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv(gpulock.MACHINE_ENV, str(tmp_path / "machine.lock"))
    with gpulock.gpu_timing(), gpulock.cpu_work():
        pass  # a build inside this process's own timing: a no-op
    with gpulock.gpu_work(), gpulock.cpu_work():
        pass
    with gpulock.cpu_work(), pytest.raises(RuntimeError, match="inside cpu_work"):
        with gpulock.gpu_work():
            pass
    with gpulock.gpu_timing(), gpulock.gpu_work(), gpulock.gpu_timing():
        pass  # weaker or equal inside a timing: no-ops
    with gpulock.gpu_work(), gpulock.gpu_work():
        pass
    with gpulock.gpu_work(), pytest.raises(RuntimeError, match="own shared lock"):
        with gpulock.gpu_timing():
            pass
    with gpulock.gpu_timing(quiet=True), gpulock.gpu_timing(), gpulock.cpu_work():
        pass  # an ordinary timing or a build inside a quiet one: no-ops
    with gpulock.gpu_timing(), gpulock.gpu_timing(quiet=True):
        pass  # without reserved timing CPUs every timing has the host quiet
    monkeypatch.setattr(gpulock, "_kept_off", [True])
    monkeypatch.setenv(gpulock.ENV, "off")   # the machine lock's own check, not the GPU lock's
    with gpulock.cpu_work(), pytest.raises(RuntimeError, match="gpu_timing.. inside cpu_work"):
        with gpulock.gpu_timing(quiet=True):
            pass
    monkeypatch.setenv(gpulock.RESERVED_ENV, "0")
    with gpulock.gpu_timing():   # pinned: a worker started now could still wait on the turnstile
        assert gpulock._machine == ["pinned"] and gpulock.holds_timing()
        with pytest.raises(RuntimeError, match="quiet timing inside an ordinary"):
            with gpulock.gpu_timing(quiet=True):
                pass
    assert gpulock._machine == [] and gpulock._held == []


def test_a_holder_waits_for_its_queued_gpu_work_before_releasing(monkeypatch, tmp_path: Path):
    """CUDA calls return before their kernels run: a holder that released at once would leave its work
    running under the next holder's timed series. Releasing drains the process's GPU work first (when it
    has initialized CUDA at all)."""
    import torch

    monkeypatch.setenv("KERNELWRIGHT_GPU_LOCK", str(tmp_path / "gpu.lock"))
    monkeypatch.setenv("KERNELWRIGHT_MACHINE_LOCK", "off")
    events = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda *a, **k: events.append(("sync", list(gpulock._held))))
    with gpulock.gpu_work():
        events.append(("work", list(gpulock._held)))
    with gpulock.gpu_timing():
        pass
    # drained while the lock was still held, once per outermost holder
    assert events == [("work", ["shared"]), ("sync", ["shared"]), ("sync", ["exclusive"])]
    # the machine lock's work class too: a worker's `load` copies inputs to the GPU under it
    events.clear()
    monkeypatch.setenv("KERNELWRIGHT_MACHINE_LOCK", str(tmp_path / "machine.lock"))
    with gpulock.cpu_work():
        pass
    assert events == [("sync", [])]
    events.clear()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    with gpulock.gpu_work():
        pass
    assert events == []      # a process that never touched CUDA does not start it to synchronize


def test_a_failing_drain_leaves_the_lock_and_the_body_s_error_wins(monkeypatch, tmp_path: Path):
    import torch

    monkeypatch.setenv("KERNELWRIGHT_GPU_LOCK", str(tmp_path / "gpu.lock"))
    monkeypatch.setenv("KERNELWRIGHT_MACHINE_LOCK", str(tmp_path / "machine.lock"))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    def sticky_fault(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", sticky_fault)
    with pytest.raises(ValueError, match="the candidate's own error"), gpulock.gpu_timing():
        raise ValueError("the candidate's own error")
    assert gpulock._held == [] and gpulock._machine == []
    with pytest.raises(RuntimeError, match="illegal memory access"), gpulock.gpu_work():
        pass
    assert gpulock._held == []


def test_time_waiting_for_a_lock_is_counted_apart(monkeypatch, tmp_path: Path):
    """`waited_seconds` grows by the time spent blocked entering a lock held by another process, and
    optimize's stage clock leaves that time out of the stage (it goes to "waiting")."""
    from kernelwright.compiler import _Stages

    machine = str(tmp_path / "machine.lock")
    monkeypatch.setenv(gpulock.MACHINE_ENV, machine)
    monkeypatch.delenv(gpulock.ENV, raising=False)
    holder = ("import sys, time\nfrom kernelwright.gpulock import gpu_timing\nwith gpu_timing():\n"
              "    print('held', flush=True)\n    time.sleep(0.8)\n")
    timer = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                             env={"KERNELWRIGHT_MACHINE_LOCK": machine, "PATH": "/usr/bin:/bin",
                                  "PYTHONPATH": str(Path(gpulock.__file__).parents[1])})
    assert timer.stdout.readline().strip() == "held"  # the timer holds the machine's timing class now
    seconds: dict[str, float] = {}
    before = gpulock.waited_seconds()
    with _Stages(None, seconds).run("capture", cpu=True):
        time.sleep(0.2)  # the stage's own work
    assert timer.wait(timeout=20) == 0
    waited = gpulock.waited_seconds() - before
    assert 0.3 <= waited <= 5     # most of the timer's 0.8 s
    assert seconds["waiting"] == pytest.approx(waited, abs=0.01)
    assert 0.15 <= seconds["capture"] < 0.3
    with _Stages(None, seconds).run("rewrite"):
        pass
    assert seconds["waiting"] == pytest.approx(waited, abs=0.01)  # nothing more was waited for


def test_reserved_timing_cpus_are_parsed_kept_off_and_picked(monkeypatch, tmp_path: Path):
    """$KERNELWRIGHT_TIMING_CPUS: kernelwright processes keep off those CPUs (children inherit it; one
    started from a pinned thread moves off too), timings pin there, and a process that keeps off them does
    its CPU work without waiting for a timing (each has CPUs of its own)."""
    import os

    from kernelwright.judge.timing import CpuWatch

    monkeypatch.setenv(gpulock.RESERVED_ENV, "3, 5-7,x,9-")
    assert gpulock.reserved_cpus() == {3, 5, 6, 7}
    monkeypatch.delenv(gpulock.RESERVED_ENV)
    assert gpulock.reserved_cpus() == frozenset()
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    reserved = allowed[-1]
    child = ("import contextlib, os\nfrom kernelwright import gpulock\nfrom kernelwright.judge.timing import "
             "pinned_cpu\ngpulock.keep_off_timing_cpus()\nprint(sorted(os.sched_getaffinity(0)), "
             "gpulock._kept_off[0])\nwith contextlib.ExitStack() as stack:\n"
             f"    print(pinned_cpu(stack, {reserved}), sorted(os.sched_getaffinity(0)))\n"
             "print(sorted(os.sched_getaffinity(0)))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(gpulock.__file__).parents[1]),
           gpulock.RESERVED_ENV: str(reserved)}
    others = str(allowed[:-1])
    expected = [f"{others} True", f"{reserved} [{reserved}]", others]
    for start_on in (None, {reserved}):   # a child of a thread pinned to the timing CPU moves off it too
        pin = start_on and (lambda cpus=start_on: os.sched_setaffinity(0, cpus))
        out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                             check=True, preexec_fn=pin)
        assert out.stdout.strip().splitlines() == expected
    monkeypatch.setenv(gpulock.RESERVED_ENV, str(reserved))
    monkeypatch.delenv("KERNELWRIGHT_TIMING_CPU", raising=False)
    assert CpuWatch(window_s=0.01).pick() == reserved
    monkeypatch.setenv(gpulock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv(gpulock.MACHINE_ENV, "off")
    with gpulock.gpu_timing():   # any timing (the compiler's too) runs on the reserved CPU, then goes back
        assert os.sched_getaffinity(0) == {reserved}
    assert sorted(os.sched_getaffinity(0)) == allowed
    # the bench gives each GPU's tasks one reserved CPU of their own ($KERNELWRIGHT_TIMING_CPU)
    monkeypatch.setenv(gpulock.RESERVED_ENV, f"{allowed[0]},{reserved}")
    monkeypatch.setenv(gpulock.CPU_ENV, str(allowed[0]))
    with gpulock.gpu_timing():
        assert os.sched_getaffinity(0) == {allowed[0]}
    monkeypatch.setenv(gpulock.RESERVED_ENV, str(reserved))
    monkeypatch.delenv(gpulock.CPU_ENV)
    # a timer holds the machine's timing class; a process that keeps off its CPU goes ahead with CPU work
    machine = str(tmp_path / "machine.lock")
    monkeypatch.setenv(gpulock.MACHINE_ENV, machine)
    holder = ("import sys, time\nfrom kernelwright.gpulock import gpu_timing\nwith gpu_timing():\n"
              "    print('held', flush=True)\n    time.sleep(1.0)\n")
    timer = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                             env={**env, "KERNELWRIGHT_MACHINE_LOCK": machine})
    assert timer.stdout.readline().strip() == "held"
    monkeypatch.setattr(gpulock, "_kept_off", [True])
    start = time.monotonic()
    with gpulock.cpu_work():
        waited = time.monotonic() - start
    assert waited < 0.5
    monkeypatch.setattr(gpulock, "_kept_off", [False])   # one that does not keep off waits as before
    with gpulock.cpu_work():
        waited = time.monotonic() - start
    assert waited >= 0.5 and timer.wait(timeout=20) == 0
