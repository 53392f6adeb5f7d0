"""The one table of numerical tolerances used to compare a candidate's outputs with the reference's.

A value passes when `|candidate - reference| <= atol + rtol * |reference|` element-wise (the
`torch.allclose` rule). Presets:

- `default`: our FP32 contract (DESIGN.md §3). FP32 atol = rtol = 1e-4 leaves room for reassociated sums
  and fused multiply-adds but not for TF32 (10-bit mantissa, errors ~1e-3) or half precision.
- `kernelbench`: KernelBench's published evaluation, `torch.allclose(atol=1e-2, rtol=1e-2)` for every
  dtype; use it to compare numbers with published results.

Integer and boolean outputs (argmax, masks) must match exactly under every preset.

For the rescaled input distributions (x1000, tiny values) an absolute tolerance in output units is
meaningless, so there atol is taken relative to the reference output's RMS (`effective_atol`).

The float64 oracle: eager FP32 is itself only an approximation. Where a candidate's floating outputs miss
the table against eager FP32, the judge reruns the model in float64 on the same inputs and still accepts
the trial when, for every output, the candidate's max abs error against float64 is at most
`ORACLE_FACTOR` times eager FP32's own (and finite where float64 is). This keeps ill-conditioned problems
(a softmax of large logits amplifies the last-bit differences of two correct GEMMs) from failing a
candidate that is as accurate as PyTorch, and rejects one that is clearly less accurate.

Where the candidate fails even that, eager's own error is one draw of FP32 rounding, and on an output
that amplifies rounding it can fall low by chance: a GEMM with K summed in two halves, as exact as eager's,
measured 2.9x eager's error on a softmax of large logits. The judge then runs eager FP32 ENVELOPE_RUNS more
times with every float32 input and parameter moved one ulp in a random direction (what a different order
of the same FP32 sums amounts to), and holds the candidate to ORACLE_FACTOR times the largest of those
errors and eager's, that largest counted at most ENVELOPE_CAP times eager's own. Bounds:
- a well-conditioned FP32 output's envelope stays within 1-2x eager's error, and TF32 rounding, two to
  three orders of magnitude above it, still fails;
- the cap: a mask or a cast of a moved value (`x > 0`, `.long()`) can jump by anything, and with eager
  exact there (error 0) nothing widens;
- half-precision values are not moved (one ulp of bfloat16 is 2^-8: its envelope measured the storage
  format, not the sums, and accepted a candidate rounding its sums to bfloat16);
- no envelope where eager does not repeat itself bit for bit (a forward with state of its own, a
  nondeterministic kernel), nor where eager's own error is not finite (then the oracle cannot vouch at all).
"""

from __future__ import annotations

import torch

_DEFAULT = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.complex64: (1e-4, 1e-4),
    torch.complex128: (1e-7, 1e-7),
}
PRESETS: dict[str, dict[torch.dtype, tuple[float, float]]] = {
    "default": _DEFAULT,
    "kernelbench": dict.fromkeys(_DEFAULT, (1e-2, 1e-2)),     # the same floating dtypes, one pair for all
}

# A candidate may be at most this many times less accurate than eager FP32, measured against float64.
ORACLE_FACTOR = 2.0
# Eager FP32 runs one ulp away that measure FP32's own spread where the oracle rejects, and the most that
# spread may count for, in times eager's own error (module doc).
ENVELOPE_RUNS, ENVELOPE_CAP = 4, 4.0

# Input distributions whose outputs are not O(1): atol scales with the reference output (see module doc).
RESCALED_DISTRIBUTIONS = frozenset({"scale1000", "tiny"})


def preset_names() -> list[str]:
    return list(PRESETS)


def tolerance_for(preset: str, dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for outputs of `dtype`; (0, 0) (exact) for integer and boolean outputs."""
    if preset not in PRESETS:
        raise ValueError(f"unknown tolerance preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[preset].get(dtype, (0.0, 0.0))


def effective_atol(atol: float, reference_rms: float, distribution: str) -> float:
    """atol for one output: as in the table, or relative to the reference's RMS for rescaled inputs."""
    if distribution not in RESCALED_DISTRIBUTIONS or not reference_rms > 0 or reference_rms == float("inf"):
        return atol
    return atol * reference_rms


def describe(preset: str) -> dict[str, list[float]]:
    """The preset as JSON: dtype name -> [atol, rtol]."""
    return {str(dtype).removeprefix("torch."): list(pair) for dtype, pair in PRESETS[preset].items()}
