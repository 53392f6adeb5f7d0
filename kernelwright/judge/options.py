"""Options of one judge run (`kernelwright eval`), shared by bench and generate."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JudgeOptions:
    device: str = "cuda"                 # "cuda" or "cpu" (cpu: pure-PyTorch candidates, tests)
    trials: int = 5                      # random-input trials (different input seeds)
    seed: int = 42                       # model construction seed (same for Model and ModelNew)
    tolerance: str = "default"           # preset name in judge/tolerance.py ("default", "kernelbench")
    extra_distributions: bool = True     # x1000 scale, all-negative, tiny values, non-contiguous views
    perturb_params: bool = True          # one more trial with perturbed parameters/buffers (judge/perturb.py)
    timing: bool = True                  # time candidate, eager and (unless disabled) torch.compile
    compile_baseline: bool = True        # also time torch.compile(Model) (default mode)
    reduce_overhead: bool = False        # also time torch.compile(Model, mode="reduce-overhead")
    busy_share: bool = True              # after timing, profile a few forwards (judge/busy.py)
    compile_only: bool = False           # only build the candidate's CUDA sources: "builds" or build_error
    build_timeout_s: float = 600.0       # wall clock for importing/building the candidate
    run_timeout_s: float = 300.0         # wall clock for correctness + timing
    min_runs: int = 100                  # timing: at least this many runs ...
    min_time_s: float = 1.0              # ... and at least this much time
    settle: bool = True                  # timing rounds until their ratios agree (session.py), else the least
    process_pairs: int = 3               # a launch-bound model is timed in this many pairs of processes
    shrink: bool = False                 # judge a shrunk variant of the problem (CPU tests)
    memory_fraction: float = 0.8         # cap on the candidate's share of GPU memory (reference holds some)
    build_dir: str | None = None         # root of candidate build dirs (default: <cache>/judge-builds)
