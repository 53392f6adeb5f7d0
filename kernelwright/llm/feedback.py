"""What the model is told after a turn: the judge's verdict in words it can act on (the trimmed compiler
errors, the max error and where, the timing against eager), and when a turn counts as a success."""

from __future__ import annotations

import json

# The judge trims compiler output already; this bounds what any verdict can add to the conversation.
MAX_DETAIL_CHARS = 4000
MAX_DETAIL_LINES = 60

NO_CODE_DETAIL = "the answer has no fenced ```python code block defining `class ModelNew`"

_ASK_FOR_CODE = "Answer with the complete, corrected `ModelNew` file in one ```python code block."

_OPENINGS = {
    "build_error": "Your code did not build. The compiler said:",
    "mismatch": "Your ModelNew ran, but its outputs do not match the reference Model:",
    "wrong_shape": "Your ModelNew ran, but an output has the wrong shape:",
    "wrong_dtype": "Your ModelNew ran, but an output has the wrong dtype:",
    "nan": "Your ModelNew produced NaN or Inf where the reference Model has finite values:",
    "runtime_error": "Your ModelNew failed at run time:",
    "timeout": "Your ModelNew did not finish within the judge's time limit:",
    "oom": "Your ModelNew ran out of memory:",
    "rejected": "The judge rejected your answer:",
}


def no_code_verdict() -> dict:
    """The verdict for an answer with nothing to judge (recorded like a judge verdict, never judged)."""
    return {"status": "rejected", "detail": NO_CODE_DETAIL}


def is_success(verdict: dict, require_speedup: bool) -> bool:
    """Correct, and faster than eager PyTorch when timings matter (on the CPU device correct suffices)."""
    if verdict.get("status") != "correct":
        return False
    if not require_speedup:
        return True
    speedup = verdict.get("speedup_vs_eager")
    return speedup is not None and speedup > 1.0


def feedback_message(verdict: dict, require_speedup: bool) -> str:
    """The next turn's user message for a verdict that was not a success."""
    status = verdict.get("status", "unknown")
    parts = []
    if status == "correct":
        parts.append("Your ModelNew is correct, but it is not faster than eager PyTorch.")
    else:
        parts.append(_OPENINGS.get(status, f"The judge's verdict is `{status}`:"))
        detail = format_detail(verdict.get("detail"))
        if detail:
            parts.append(f"```\n{detail}\n```")
    timing = timing_line(verdict)
    if timing:
        parts.append(timing)
    if (verdict.get("flags") or {}).get("no_custom_kernel"):
        parts.append(
            "Note: your ModelNew uses only PyTorch operators; the task is to write custom CUDA kernels."
        )
    if status == "correct":
        goal = "Make it faster while keeping it correct." if require_speedup else "Keep it correct."
        parts.append(f"{goal} {_ASK_FOR_CODE}")
    else:
        parts.append(f"Fix it. {_ASK_FOR_CODE}")
    return "\n\n".join(parts)


def format_detail(detail: object) -> str:
    """A verdict's `detail` as text, cut to a size that helps a model rather than drowning it."""
    if detail is None or detail == "":
        return ""
    text = detail if isinstance(detail, str) else json.dumps(detail, indent=1, default=str)
    lines = text.strip().splitlines()
    if len(lines) > MAX_DETAIL_LINES:
        lines = lines[:MAX_DETAIL_LINES] + [f"... ({len(lines) - MAX_DETAIL_LINES} more lines)"]
    text = "\n".join(lines)
    if len(text) > MAX_DETAIL_CHARS:
        text = text[:MAX_DETAIL_CHARS] + "\n... (truncated)"
    return text


def timing_line(verdict: dict) -> str:
    """`Timing: yours 1.20 ms, eager PyTorch 2.40 ms (2.00x vs eager), torch.compile 1.80 ms.`, or ''."""
    timings = verdict.get("timings") or {}
    candidate, eager = _median(timings, "candidate"), _median(timings, "eager")
    if candidate is None or eager is None:
        return ""
    speedup = verdict.get("speedup_vs_eager")
    speedup = eager / candidate if speedup is None and candidate > 0 else speedup
    text = f"Timing (median): yours {candidate:.3f} ms, eager PyTorch {eager:.3f} ms"
    if speedup is not None:
        text += f" ({speedup:.2f}x vs eager)"
    compiled = _median(timings, "compile")
    if compiled is not None:
        text += f", torch.compile {compiled:.3f} ms"
    return text + "."


def _median(timings: dict, key: str) -> float | None:
    entry = timings.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("median_ms"), (int, float)):
        return float(entry["median_ms"])
    return None
