"""How an exception raised by the code under judgement (the candidate's or the reference's, in a judge
worker) becomes a reply: its verdict status, a short detail naming the candidate's line, and whether the
process's CUDA context is lost."""

from __future__ import annotations

import os
import traceback


def classify_failure(exc: BaseException, source_file: str | None = None) -> dict:
    """{"status", "detail", "fatal"} for an exception raised while running candidate or reference code."""
    name = type(exc).__name__
    text = str(exc).strip()
    lowered = text.lower()
    if (
        isinstance(exc, MemoryError)
        or name == "OutOfMemoryError"
        or "out of memory" in lowered
        or "can't allocate memory" in lowered
    ):
        status = "oom"
    else:
        status = "runtime_error"
    cuda_error = (
        name == "AcceleratorError"
        or "cuda error" in lowered
        or "illegal memory access" in lowered
        or "device-side assert" in lowered
        or "unspecified launch failure" in lowered
    )
    where = ""
    if source_file:
        frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if os.path.realpath(f.filename) == os.path.realpath(source_file)
        ]
        if frames:
            where = f" (candidate line {frames[-1].lineno}: {frames[-1].line})"
    first_lines = "\n".join(text.splitlines()[:6])
    return {"status": status, "detail": f"{name}: {first_lines}{where}", "fatal": cuda_error}
