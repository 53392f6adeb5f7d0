"""Keeping timings undisturbed when many processes share a machine: locks on files, released by the kernel
when their holder dies (flock), so a crashed process never leaves one held.

Two locks, always taken in this order (GPU lock first), so that they cannot deadlock:
- **The GPU lock** (per GPU, a reader-writer lock). `kernelwright bench --jobs N` runs N tasks per GPU at
  once; what must not overlap is a timed series with any other GPU work. `gpu_timing()` holds it exclusively
  around every timed series (the judge's `measure`, the compiler's per-kernel timing); `gpu_work()` holds it
  shared around untimed GPU work (correctness trials, warm-ups). Its path comes from `$KERNELWRIGHT_GPU_LOCK`
  (set by the bench for each worker; `off` disables it); unset, it is the GPU's own file in the temp folder,
  named by the GPU's UUID as the bench names it, so that `optimize` runs, judges and benches started
  separately on one GPU keep their timed series apart too (four `optimize` runs at once on one H100 once
  judged a 1.14 ms convolution at 4.04 ms).
- **The machine lock** (one per user and host, classes that exclude each other: `EXCLUDES`). A launch-bound
  model timed while nvcc builds load every core runs slower (an unchanged ResNet18 was credited 1.32x that
  way), on any GPU of the host. `gpu_timing()` also enters the *timing* class (*pinned*: below);
  `cpu_work()` (builds, capture, torch.compile's compilation, making inputs, and torch's import where judge
  workers, bench tasks and `optimize` start) enters the *work* class (*offwork*: below). Any number of
  holders of one class run together (timings on different GPUs overlap, builds overlap), never holders of
  two classes that exclude each other. On by default (path `$KERNELWRIGHT_MACHINE_LOCK`, default in the
  temp folder; `off` disables it).

**Reserved timing CPUs** (`$KERNELWRIGHT_TIMING_CPUS`, e.g. `15` or `14-15`, one or more per GPU; the bench
reserves one per GPU where the host has CPUs to spare, `bench --timing-cpus`): every kernelwright process
keeps its threads off those CPUs (`keep_off_timing_cpus`, at each entry point; children inherit it),
timings pin there (judge/timing.py `CpuWatch`), and the CPU work of a process that keeps off them enters
the *offwork* class, which an ordinary timing (class *pinned*) does not exclude: a timing then shares the
host's caches and memory with builds and imports, but never its CPU. That is enough where the GPU is busy
(the A/A of bench/results/2026-11-28-h200-suite-reserved-cpu), not for a launch-bound model: its launches
ran 13-16% slower beside 14 loaded CPUs (scripts/background_load.py), which would credit a candidate that
launches less. So a *quiet* timing (`gpu_timing(quiet=True)`: a launch-bound model's pairs of processes
and eager's rounds beside torch.compile, judge/session.py) keeps the *timing* class, which excludes offwork
too (`shares_host`: whether an ordinary timing here runs beside CPU work). For CUDA timings only: a judge
timing on the CPU device is not pinned.

A waiting holder of either lock has priority over later arrivals (a turnstile file), so a stream of trials
or builds cannot starve a timer, nor a stream of timings a build. Nested use in one process is allowed when
the inner lock is no stronger than the outer one (inside a timing, trials and builds of the same process are
no-ops); asking for a timing while holding shared GPU work or CPU work would wait on the process itself, a
GPU lock taken inside CPU work could close a circle with a timer, and a quiet timing inside a pinned one
cannot have the host quiet, so those raise.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

ENV = "KERNELWRIGHT_GPU_LOCK"
MACHINE_ENV = "KERNELWRIGHT_MACHINE_LOCK"
LOG_ENV = "KERNELWRIGHT_LOCK_LOG"
RESERVED_ENV = "KERNELWRIGHT_TIMING_CPUS"
CPU_ENV = "KERNELWRIGHT_TIMING_CPU"   # the one CPU this process's timings take (judge/timing.py `CpuWatch`)

_held: list[str] = []      # this process's GPU-lock nesting: "shared" / "exclusive"
_machine: list[str] = []   # this process's machine-lock nesting: a class of EXCLUDES
_waited = [0.0]            # seconds this process has spent blocked entering either lock
_kept_off = [False]        # this process keeps off reserved timing CPUs (keep_off_timing_cpus succeeded)
# The machine lock's classes and those each excludes (both ways). "timing": a timing with the host quiet
# (every timing without reserved timing CPUs, a quiet one with them) excludes all CPU work; "pinned": an
# ordinary timing on a reserved CPU excludes only "work", the CPU work of processes that do not keep off
# that CPU; "offwork" is the CPU work of processes that do. Classes that do not exclude each other overlap.
EXCLUDES = {"timing": ("offwork", "work"), "pinned": ("work",), "work": ("pinned", "timing"),
            "offwork": ("timing",)}
TIMINGS = ("timing", "pinned")
# Bound at import, before any candidate code runs in a judge worker: a patched os cannot unpin a timing.
_getaffinity = getattr(os, "sched_getaffinity", None)
_setaffinity = getattr(os, "sched_setaffinity", None)


def waited_seconds() -> float:
    """Seconds this process has spent so far waiting to enter a lock (another task's timing or build):
    time that a stage's clock counts but that is not the stage's own work."""
    return _waited[0]


@contextlib.contextmanager
def _waiting() -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        _waited[0] += time.perf_counter() - start


@contextlib.contextmanager
def gpu_timing(quiet: bool = False) -> Iterator[None]:
    """A timed series: this GPU alone and no CPU work on the host; with reserved timing CPUs, unless
    `quiet` (a launch-bound model's timing), only none on the reserved CPU it runs on."""
    kind = "pinned" if reserved_cpus() and not quiet else "timing"
    with _lock(exclusive=True), _machine_lock(kind), _on_a_timing_cpu():
        yield


@contextlib.contextmanager
def _on_a_timing_cpu() -> Iterator[None]:
    """With reserved timing CPUs, the calling thread runs on one of them while it times, then goes back:
    `$KERNELWRIGHT_TIMING_CPU` where it names one (the bench gives each GPU's tasks a core of their own),
    else one picked by the GPU lock file."""
    reserved = sorted(reserved_cpus())
    chosen = os.environ.get(CPU_ENV, "").strip()
    if chosen.isdigit() and int(chosen) in reserved:
        cpu: int | None = int(chosen)
    else:
        cpu = reserved[sum((gpu_lock_path() or "").encode()) % len(reserved)] if reserved else None
    with pinned(cpu):
        yield


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[int | None]:
    """The calling thread on `cpu` until the block ends, its affinity restored then (also when the body
    raises); yields the CPU pinned, or None when `cpu` is None or not to be had here (neither allowed to
    this thread nor a reserved timing CPU, or refused by the OS): the body then runs where it is."""
    before = None
    if cpu is not None and _setaffinity is not None:
        with contextlib.suppress(OSError):
            allowed = _getaffinity(0)
            if cpu in allowed or cpu in reserved_cpus():
                _setaffinity(0, {cpu})
                before = allowed
    try:
        yield None if before is None else cpu
    finally:
        if before is not None:
            with contextlib.suppress(OSError):   # never in place of the body's own exception
                _setaffinity(0, before)


@contextlib.contextmanager
def gpu_work() -> Iterator[None]:
    with _lock(exclusive=False):
        yield


@contextlib.contextmanager
def cpu_work() -> Iterator[None]:
    """Heavy CPU work (a build, a capture, a compilation): never while a timing runs on this machine; where
    timings have CPUs of their own that this process keeps off (`keep_off_timing_cpus` succeeded here),
    only never beside a quiet one."""
    with _machine_lock("offwork" if _kept_off[0] else "work"):
        yield


def reserved_cpus() -> frozenset[int]:
    """The CPUs kept for timings (`$KERNELWRIGHT_TIMING_CPUS`: `parse_cpus`); empty when unset."""
    return parse_cpus(os.environ.get(RESERVED_ENV, ""))


def parse_cpus(text: str) -> frozenset[int]:
    """CPU numbers and ranges, `14,15` or `14-15`; parts that are neither are skipped."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            continue
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def keep_off_timing_cpus() -> None:
    """Keep this thread (and the threads and processes it starts) off the reserved timing CPUs, where some
    are set and others remain. Call before starting threads: an entry point's first step. Only where it
    succeeds does this process's CPU work stop waiting for timings (`cpu_work`). A process started from a
    thread pinned for a timing inherits that pin: it moves to every CPU of the host but the reserved."""
    reserved = reserved_cpus()
    if not reserved or _setaffinity is None:
        return
    with contextlib.suppress(OSError):
        others = _getaffinity(0) - reserved or set(range(os.cpu_count() or 1)) - reserved
        if others:
            _setaffinity(0, others)
            _kept_off[0] = not _getaffinity(0) & reserved


def shares_host() -> bool:
    """Whether an ordinary timing in this process runs beside other processes' CPU work (reserved timing
    CPUs, with the machine lock on), so that a launch-bound model's must be asked for quiet."""
    return bool(reserved_cpus()) and machine_lock_path() is not None


def holds_timing() -> bool:
    """Whether this process is inside `gpu_timing()` with the machine lock in force: a process it starts
    now cannot begin its CPU work (a judge worker's start) until the timing ends, so it must not wait for
    one. That holds for a pinned timing too: a work-class arrival waiting on it holds the turnstile that
    every later arrival, offwork included, queues behind."""
    return any(kind in TIMINGS for kind in _machine)


def gpu_lock_path() -> str | None:
    """The GPU lock's file: `$KERNELWRIGHT_GPU_LOCK`, else the current CUDA device's `gpu_lock_file`; None
    when disabled or where this process has no CUDA GPU (torch not imported, or no device)."""
    return _lock_file_setting(ENV, _device_lock_file)


def _device_lock_file() -> str | None:
    uuid = _device_uuid()
    return None if uuid is None else gpu_lock_file(uuid)


def _lock_file_setting(variable: str, default: Callable[[], str | None]) -> str | None:
    """A lock's file: `$variable` when set (empty, 0, off or none: no lock), else `default()`."""
    value = os.environ.get(variable)
    if value is None:
        return default()
    return None if value.strip().lower() in ("", "0", "off", "none") else value


def gpu_lock_file(uuid: str) -> str:
    """The lock file of the GPU with this UUID (nvidia-smi's and CUDA_VISIBLE_DEVICES' `GPU-...`, a MIG
    instance's `MIG-...`, or torch's bare form of either), the same for every kernelwright process of this
    host."""
    bare = re.sub(r"^(gpu|mig)-", "", uuid.strip().lower())
    return os.path.join(tempfile.gettempdir(), f"kernelwright-gpu-{re.sub(r'[^a-z0-9_-]', '_', bare)}.lock")


_uuids: dict[object, str | None] = {}


def _device_uuid() -> str | None:
    """The UUID of the GPU this process uses (or will use: its first visible one), without creating a CUDA
    context: torch's view once CUDA is initialized here, else NVML's (a process that only orchestrates, such
    as the judge's parent, must not hold half a GiB of GPU memory for a lock's name)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if torch.cuda.is_initialized():
            key: object = torch.cuda.current_device()
            if key not in _uuids:
                _uuids[key] = str(torch.cuda.get_device_properties(key).uuid)
            return _uuids[key]
        key = ("visible", os.environ.get("CUDA_VISIBLE_DEVICES"))
        if key not in _uuids:
            _uuids[key] = _first_visible_uuid(key[1])
        return _uuids[key]
    except Exception:  # noqa: BLE001 - a device that cannot be queried: no lock, timings as before
        return None


def _first_visible_uuid(visible: str | None) -> str | None:
    """NVML's UUID of CUDA device 0: the first CUDA_VISIBLE_DEVICES entry (a UUID, or an index in NVML's
    PCI order, which is CUDA's on a host of one GPU model), else NVML's first device; None without NVML."""
    import warnings

    first = (visible or "0").split(",")[0].strip()
    if first.upper().startswith(("GPU-", "MIG-")):
        return first
    if not first.isdigit():
        return None
    torch = sys.modules["torch"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uuids = torch.cuda._raw_device_uuid_nvml()
    return uuids[int(first)] if uuids and int(first) < len(uuids) else None


def machine_lock_path() -> str | None:
    return _lock_file_setting(
        MACHINE_ENV, lambda: os.path.join(tempfile.gettempdir(), f"kernelwright-machine-{os.getuid()}.lock"))


@contextlib.contextmanager
def _lock(exclusive: bool) -> Iterator[None]:
    path = gpu_lock_path()
    if path and _machine and _machine[0] in ("work", "offwork") and not _held:
        # A timer holding this GPU waits for the machine's work to drain: waiting for the GPU here would
        # close the circle.
        raise RuntimeError("a GPU lock inside cpu_work(): take the GPU lock first, or outside it")
    if not path or "exclusive" in _held or (_held and not exclusive):
        yield
        return
    if _held:
        raise RuntimeError("gpu_timing() inside gpu_work(): the process would wait on its own shared lock")
    try:   # one file per GPU for every user of the host: readable and writable by all
        turnstile = _open_shared(path + ".turnstile")
    except OSError:  # an unwritable temp folder or another user's file: no GPU-wide coordination
        yield
        return
    try:
        main = _open_shared(path)
    except OSError:
        os.close(turnstile)
        yield
        return
    asked, got = time.time(), None
    try:
        with _waiting():
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            if exclusive:
                fcntl.flock(main, fcntl.LOCK_EX)  # the turnstile stays held: new readers queue behind us
            else:
                fcntl.flock(main, fcntl.LOCK_SH)
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        got = time.time()
        _held.append("exclusive" if exclusive else "shared")
        with _draining(_held):
            yield
    finally:
        os.close(main)  # closing the descriptors releases their locks
        os.close(turnstile)
        if got is not None:
            _log_hold("gpu_exclusive" if exclusive else "gpu_shared", asked, got, os.path.basename(path))


def _open_shared(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(OSError):   # the umask may have taken bits off; only the owner may add them
        os.fchmod(fd, 0o666)
    return fd


@contextlib.contextmanager
def _draining(nesting: list[str]) -> Iterator[None]:
    """The body, then `_drain_gpu()`, then this level of `nesting` is left. The level is left even when the
    drain fails (a sticky CUDA error surfaces at the synchronize), or later locks would be skipped as
    nested; and a failing body's own exception is the one that propagates, not the drain's."""
    failed = True
    try:
        yield
        failed = False
    finally:
        try:
            _drain_gpu()
        except Exception:
            if not failed:
                raise
        finally:
            nesting.pop()


def _drain_gpu() -> None:
    """Wait for this process's queued GPU work before the lock goes: CUDA calls return before their kernels
    run, so a holder that released at once left trials running under the next process's timed series (the
    channels-last plan of a conv chain timed 2.747 ms under `bench --jobs 3`, 1.537 ms alone, and lost
    its layout choice to a 2.571 ms NCHW plan)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextlib.contextmanager
def _machine_lock(kind: str) -> Iterator[None]:
    """Enter class `kind` of the machine lock (`EXCLUDES`): one file per class, held shared by its members;
    to enter, a process takes each excluded class's file exclusively for a moment (which waits until that
    class is empty), then its own shared, behind a turnstile that orders arrivals."""
    path = machine_lock_path()
    if path is None or _machine:
        if _machine and kind in TIMINGS and _machine[0] not in TIMINGS:
            raise RuntimeError("gpu_timing() inside cpu_work(): the process would wait on itself")
        if _machine and kind == "timing" and _machine[0] == "pinned":
            raise RuntimeError("a quiet timing inside an ordinary one: CPU work may hold the host already")
        yield
        return
    try:
        turnstile = os.open(path + ".turnstile", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # an unwritable temp folder: no machine-wide coordination, timings as before
        yield
        return
    names = (kind, *EXCLUDES[kind])
    files = {name: os.open(f"{path}.{name}", os.O_RDWR | os.O_CREAT, 0o666) for name in names}
    asked, got = time.time(), None
    try:
        with _waiting():
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            for other in EXCLUDES[kind]:
                fcntl.flock(files[other], fcntl.LOCK_EX)   # waits until that class has drained
            fcntl.flock(files[kind], fcntl.LOCK_SH)
            for other in EXCLUDES[kind]:
                fcntl.flock(files[other], fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        got = time.time()
        _machine.append(kind)
        with _draining(_machine):   # a build's or a load's queued GPU work (inputs, autotuning) too
            yield
    finally:
        for fd in (*files.values(), turnstile):
            os.close(fd)
        if got is not None:
            _log_hold(f"machine_{kind}", asked, got, os.path.basename(path))


def _log_hold(lock: str, asked: float, got: float, file: str) -> None:
    """One line of `$KERNELWRIGHT_LOCK_LOG` (when set) for a hold just released: which lock (`lock`: gpu_
    exclusive/shared, machine_ and a class of `EXCLUDES`; `file`: the lock's file), when it was asked for,
    got and released (host clock), by whom. The bench sets it for its tasks (`locks.jsonl` in the results
    folder), so that a run shows where its wall time went (bench/locks.py). Never fails the caller."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = json.dumps({"lock": lock, "file": file, "who": _who(), "pid": os.getpid(),
                       "asked": round(asked, 4), "got": round(got, 4), "released": round(time.time(), 4)})
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, (line + "\n").encode())   # one write of a short line: appended whole
        finally:
            os.close(fd)


def _who() -> str:
    """What this process is, from its command line: the script or module (`worker`, `cli`, `tasks`) and its
    first argument when that is a word (`reference`, `optimize`)."""
    argv = getattr(sys, "argv", None) or [""]
    name = os.path.basename(argv[0]).removesuffix(".py") or "python"
    first = argv[1] if len(argv) > 1 and re.fullmatch(r"[\w-]+", argv[1]) else ""
    return f"{name} {first}".strip()
