"""`--start-from kernelwright`: our compiler's ModelNew as the starting point of a conversation.

The compiler is run through its command line (`kernelwright optimize PROBLEM -o FILE`), the contract it
publishes, in a child process: a compiler crash then costs the starting point, never the run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernelwright.errors import KernelwrightError

OPTIMIZE_TIMEOUT_S = 1800.0


class StartingPointError(KernelwrightError):
    """`kernelwright optimize` could not produce a starting point for a problem."""


def optimize_with_kernelwright(problem_path: Path, out_file: Path) -> str:
    """Run `kernelwright optimize` on a problem and return the source of the ModelNew it wrote."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "kernelwright.cli", "optimize", str(problem_path), "-o", str(out_file)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=OPTIMIZE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise StartingPointError(
            f"{problem_path}: kernelwright optimize took over {OPTIMIZE_TIMEOUT_S:.0f} s"
        ) from exc
    if result.returncode != 0 or not out_file.is_file():
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise StartingPointError(
            f"{problem_path}: kernelwright optimize failed (exit {result.returncode}): {tail}"
        )
    return out_file.read_text()


def starting_point_message(code: str, verdict: dict) -> str:
    """Appended to the prompt: the compiler's answer and how the judge rated it, as the bar to beat."""
    status = verdict.get("status", "unknown")
    speedup = verdict.get("speedup_vs_eager")
    rating = f"{status}, {speedup:.2f}x vs eager PyTorch" if isinstance(speedup, (int, float)) else status
    return (
        "An automatic compiler already produced the `ModelNew` below for this architecture "
        f"(judge verdict: {rating}). Use it as your starting point: write a `ModelNew` that is correct and "
        "faster than it. Answer with the complete file in one ```python code block.\n\n"
        f"```python\n{code.rstrip()}\n```"
    )
