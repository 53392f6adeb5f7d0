"""Sharing one GPU between several processes without spoiling timings: a reader-writer lock on files.

`kernelwright bench --jobs N` runs N tasks per GPU at once, so that compiling (nvcc, torch.compile,
imports: all CPU work) overlaps. What must not overlap is a timed series with any other GPU work. So:
- `gpu_timing()` (exclusive) brackets every timed series: the judge's `measure` and the compiler's
  per-kernel timing. Nothing else runs on the GPU meanwhile.
- `gpu_work()` (shared) brackets GPU work that is not timed (correctness trials, warm-ups, the compile
  call of torch.compile): any number at once, but none while a timing holds the lock.
A waiting timer has priority: new shared holders queue behind it (a turnstile file), so a stream of
trials cannot starve it.

The lock is per GPU: its path comes from `$KERNELWRIGHT_GPU_LOCK` (set by the bench for each worker);
unset, both are no-ops (one process per GPU needs no lock). Nested use in one process is allowed when
the inner lock is no stronger than the outer one; a shared holder asking for the exclusive lock would
wait on itself, so that raises.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

ENV = "KERNELWRIGHT_GPU_LOCK"

_held: list[str] = []  # this process's nesting: "shared" / "exclusive"


@contextlib.contextmanager
def gpu_timing() -> Iterator[None]:
    with _lock(exclusive=True):
        yield


@contextlib.contextmanager
def gpu_work() -> Iterator[None]:
    with _lock(exclusive=False):
        yield


@contextlib.contextmanager
def _lock(exclusive: bool) -> Iterator[None]:
    path = os.environ.get(ENV)
    if not path or "exclusive" in _held or (_held and not exclusive):
        yield
        return
    if _held:
        raise RuntimeError("gpu_timing() inside gpu_work(): the process would wait on its own shared lock")
    turnstile = os.open(path + ".turnstile", os.O_RDWR | os.O_CREAT, 0o600)
    main = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if exclusive:
            fcntl.flock(main, fcntl.LOCK_EX)  # the turnstile stays held: new readers queue behind us
        else:
            fcntl.flock(main, fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        _held.append("exclusive" if exclusive else "shared")
        try:
            yield
        finally:
            _held.pop()
    finally:
        os.close(main)  # closing the descriptors releases their locks
        os.close(turnstile)
