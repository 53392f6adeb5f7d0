"""What a judge's child process is doing, for a person watching a long build (`eval --compile-only` on a
hand-written `load_inline` file can compile for minutes).

The child writes its current step (one line: which extension, which compiler on which file) to the file
named by `$KERNELWRIGHT_PROGRESS_FILE`, which the parent sets for its children while it watches; the
parent polls that file and shows the step. Nothing is written when no one watches.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

PROGRESS_ENV = "KERNELWRIGHT_PROGRESS_FILE"
POLL_SECONDS = 0.2


def report_step(step: str) -> None:
    """Record the current step, when a parent watches (written whole, then renamed: never read torn)."""
    target = os.environ.get(PROGRESS_ENV)
    if not target:
        return
    partial = f"{target}.{os.getpid()}"
    Path(partial).write_text(step)
    os.replace(partial, target)


@contextlib.contextmanager
def watch_steps(on_step: Callable[[str], None]) -> Iterator[None]:
    """Children started inside this block report their steps to `on_step` (called from a polling thread
    whenever the step changes)."""
    folder = tempfile.mkdtemp(prefix="kernelwright-progress-")
    target = Path(folder) / "step"
    previous = os.environ.get(PROGRESS_ENV)
    os.environ[PROGRESS_ENV] = str(target)
    stop = threading.Event()

    def poll() -> None:
        seen = ""
        while not stop.wait(POLL_SECONDS):
            step = target.read_text() if target.is_file() else ""
            if step and step != seen:
                seen = step
                on_step(step)

    thread = threading.Thread(target=poll, name="kernelwright-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if previous is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = previous
        for path in Path(folder).iterdir():
            path.unlink()
        os.rmdir(folder)
