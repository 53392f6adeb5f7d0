"""The options of `kernelwright optimize`, apart from the compiler so that the CLI's warm path (the result
cache, `result_cache.py`) can name them without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptimizeOptions:
    verify: bool = True                 # on a GPU: build, check each group, judge the file
    allow_tf32: bool = False            # recorded in the header; FP32 semantics unless set
    seeds: tuple[int, ...] = (0, 1, 2)  # per-group correctness checks
    judge_trials: int = 5
    # Convolutions: "auto" compiles both layouts on a GPU and keeps the faster verified file (without a GPU,
    # or with --no-verify, NCHW); "nchw" or "channels_last" forces one (rewrite/layout.py).
    layout: str = "auto"
    # After an environment failure that persists: emit the compiled file marked "NOT verified: <cause>"
    # instead of raising EnvironmentFailure.
    allow_unverified: bool = False
    # CUDA-graph replay of the emitted forward (emit/replay.py): "auto" times the file both ways on a GPU and
    # keeps replay where it is faster; "off" never emits it.
    replay: str = "auto"
    # Our CUTLASS convolutions with their epilogues (fuse/conv.py) on a Hopper GPU, each plan measured
    # against the cuDNN one and kept only where faster (~30 s of nvcc per problem that has one).
    conv_kernels: bool = True
