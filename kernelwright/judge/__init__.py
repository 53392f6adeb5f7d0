"""The judge: isolated, multi-trial correctness, rigorous timing and reward-hack defences.

Contract (DESIGN.md §1, §4): `evaluate(problem, candidate, options) -> dict`, a JSON-able verdict with
`status` in {correct, mismatch, wrong_shape, wrong_dtype, nan, build_error, runtime_error, timeout, oom,
rejected, builds}, `detail`, per-trial results, timings {candidate, eager, compile}: {median_ms, iqr_ms, n},
`speedup_vs_eager`, `speedup_vs_compile`, flags and environment. It never raises on a bad candidate.
`Judge(problem, options)` judges several candidates of one problem with one reference process.
"""

from kernelwright.judge.extract import extract_code
from kernelwright.judge.judge import STATUSES, Judge, evaluate, evaluate_reference
from kernelwright.judge.options import JudgeOptions

__all__ = ["STATUSES", "Judge", "JudgeOptions", "evaluate", "evaluate_reference", "extract_code"]
