"""Paths and options shared by the judge tests."""

from __future__ import annotations

from pathlib import Path

from kernelwright.judge import JudgeOptions

CORPUS = Path(__file__).resolve().parent.parent / "judge_corpus"
CANDIDATES = CORPUS / "candidates"
GPU_CANDIDATES = CORPUS / "gpu_candidates"
PROBLEMS = CORPUS / "problems"

# The CPU has nothing to flush or warm up: a few timed runs exercise the timing path.
CPU_OPTIONS = JudgeOptions(device="cpu", min_runs=3, min_time_s=0.0, compile_baseline=False,
                           build_timeout_s=60.0, run_timeout_s=60.0)
