"""The judge: isolated, multi-trial correctness, rigorous timing and reward-hack defences.

Contract (DESIGN.md §1, §4): `evaluate(problem, candidate, options) -> dict`, a JSON-able verdict with
`status` in {correct, mismatch, wrong_shape, wrong_dtype, nan, build_error, runtime_error, timeout, oom,
rejected, builds}, `detail`, per-trial results, timings {candidate, eager, compile}: {median_ms, iqr_ms, n},
`speedup_vs_eager` (the median of the timing rounds' ratios; `speedup_vs_eager_rounds`, `_spread`: each
round's, and half their IQR over the median; a launch-bound model is timed in several pairs of processes,
`speedup_vs_eager_pairs`, and the speedup is their median), `speedup_vs_compile`, flags and environment. It
never raises on a bad candidate.
`Judge(problem, options)` judges several candidates of one problem with one reference process.

The names below are imported on first use (PEP 562): `kernelwright.judge.options` and the other light
modules of this package must not cost a torch import (the CLI registers its commands without torch).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "STATUSES": "kernelwright.judge.judge",
    "Judge": "kernelwright.judge.judge",
    "evaluate": "kernelwright.judge.judge",
    "evaluate_reference": "kernelwright.judge.judge",
    "JudgeOptions": "kernelwright.judge.options",
    "extract_code": "kernelwright.judge.extract",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
