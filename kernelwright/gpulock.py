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
- **The machine lock** (one per user and host, two classes that exclude each other). A launch-bound model
  timed while nvcc builds load every core runs slower (an unchanged ResNet18 was credited 1.32x that
  way), on any GPU of the host. `gpu_timing()` also enters the *timing* class; `cpu_work()` (builds,
  capture, torch.compile's compilation, making inputs, and torch's import where judge workers, bench tasks
  and `optimize` start) enters the *work* class. Any number of holders of one
  class run together (timings on different GPUs overlap, builds overlap), never a holder of each. On by
  default (path `$KERNELWRIGHT_MACHINE_LOCK`, default in the temp folder; `off` disables it).

**Reserved timing CPUs** (`$KERNELWRIGHT_TIMING_CPUS`, e.g. `15` or `14-15`, one or more per GPU; off by
default, to be measured: scripts/background_load.py): every kernelwright process keeps its threads off those
CPUs (`keep_off_timing_cpus`, at each entry point; children inherit it), timings pin there (judge/timing.py
`CpuWatch`), and CPU work no longer waits for timings nor they for it (the machine lock's work class is not
entered by a process that keeps off them): a timing then shares the host's caches and memory with builds and
imports, but never its CPU. For CUDA timings only: a judge timing on the CPU device is not pinned.

A waiting holder of either lock has priority over later arrivals (a turnstile file), so a stream of trials
or builds cannot starve a timer, nor a stream of timings a build. Nested use in one process is allowed when
the inner lock is no stronger than the outer one (inside a timing, trials and builds of the same process are
no-ops); asking for a timing while holding shared GPU work or CPU work would wait on the process itself, and
a GPU lock taken inside CPU work could close a circle with a timer, so those raise.
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

_held: list[str] = []      # this process's GPU-lock nesting: "shared" / "exclusive"
_machine: list[str] = []   # this process's machine-lock nesting: "timing" / "work"
_waited = [0.0]            # seconds this process has spent blocked entering either lock
_kept_off = [False]        # this process keeps off reserved timing CPUs (keep_off_timing_cpus succeeded)
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
def gpu_timing() -> Iterator[None]:
    with _lock(exclusive=True), _machine_lock("timing"), _on_a_timing_cpu():
        yield


@contextlib.contextmanager
def _on_a_timing_cpu() -> Iterator[None]:
    """With reserved timing CPUs, the calling thread runs on one of them while it times (one per GPU lock
    file, so that two GPUs' timings spread over two reserved CPUs where there are two), then goes back."""
    reserved = sorted(reserved_cpus())
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
    """Heavy CPU work (a build, a capture, a compilation): never while a timing runs on this machine, unless
    timings have CPUs of their own that this process keeps off (`keep_off_timing_cpus` succeeded here): then
    it goes ahead, logged as a hold without a wait."""
    if not _kept_off[0]:
        with _machine_lock("work"):
            yield
        return
    start = time.time()
    try:
        yield
    finally:
        _log_hold("machine_work", start, start, "reserved")


def reserved_cpus() -> frozenset[int]:
    """The CPUs kept for timings (`$KERNELWRIGHT_TIMING_CPUS`: CPU numbers and ranges, `14,15` or `14-15`);
    empty when unset or unreadable."""
    cpus: set[int] = set()
    for part in os.environ.get(RESERVED_ENV, "").replace(" ", "").split(","):
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


def holds_timing() -> bool:
    """Whether this process is inside `gpu_timing()` with the machine lock in force: a process it starts
    now cannot begin its CPU work (a judge worker's start) until the timing ends, so it must not wait for
    one (unless CPU work does not wait for timings here: reserved timing CPUs)."""
    return "timing" in _machine and not _kept_off[0]


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
    if path and "work" in _machine and not _held:
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
    """Enter class `kind` ("timing" or "work") of the machine lock: one file per class, held shared by its
    members; to enter, a process takes the other class's file exclusively for a moment (which waits until
    that class is empty), then its own shared, behind a turnstile that orders arrivals."""
    path = machine_lock_path()
    if path is None or _machine:
        if _machine and kind == "timing" and "timing" not in _machine:
            raise RuntimeError("gpu_timing() inside cpu_work(): the process would wait on itself")
        yield
        return
    other = "work" if kind == "timing" else "timing"
    try:
        turnstile = os.open(path + ".turnstile", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # an unwritable temp folder: no machine-wide coordination, timings as before
        yield
        return
    mine = os.open(f"{path}.{kind}", os.O_RDWR | os.O_CREAT, 0o666)
    theirs = os.open(f"{path}.{other}", os.O_RDWR | os.O_CREAT, 0o666)
    asked, got = time.time(), None
    try:
        with _waiting():
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(theirs, fcntl.LOCK_EX)   # waits until the other class has drained
            fcntl.flock(mine, fcntl.LOCK_SH)
            fcntl.flock(theirs, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        got = time.time()
        _machine.append(kind)
        with _draining(_machine):   # a build's or a load's queued GPU work (inputs, autotuning) too
            yield
    finally:
        for fd in (mine, theirs, turnstile):
            os.close(fd)
        if got is not None:
            _log_hold(f"machine_{kind}", asked, got, os.path.basename(path))


def _log_hold(lock: str, asked: float, got: float, file: str) -> None:
    """One line of `$KERNELWRIGHT_LOCK_LOG` (when set) for a hold just released: which lock (`lock`: gpu_
    exclusive/shared, machine_timing/work; `file`: the lock's file), when it was asked for, got and released
    (host clock), by whom. The bench sets it for its tasks (`locks.jsonl` in the results folder), so that a
    run shows where its wall time went (bench/locks.py). Never fails the caller."""
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
