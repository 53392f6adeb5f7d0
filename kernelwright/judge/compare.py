"""Compare a candidate's outputs with the reference's: structure, shape, dtype, NaN/Inf, then values with
the tolerance table. Runs where the reference lives (its worker process, on the judge device), in chunks so
that comparing multi-GB outputs needs little extra memory."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from kernelwright.judge.outputs import flatten, structure
from kernelwright.judge.tolerance import ENVELOPE_CAP, ORACLE_FACTOR, effective_atol, tolerance_for

CHUNK = 1 << 25  # elements per comparison chunk: bounds the temporaries to a few hundred MB


def compare_outputs(reference: Any, candidate: Any, preset: str, distribution: str = "normal") -> dict:
    """{"status": correct|mismatch|wrong_shape|wrong_dtype|nan, "detail", "max_abs_err", "max_rel_err",
    "first_mismatch"}; errors are the worst over all output leaves."""
    result = {
        "status": "correct",
        "detail": "",
        "max_abs_err": 0.0,
        "max_rel_err": 0.0,
        "first_mismatch": None,
    }
    ref_leaves, cand_leaves = flatten(reference), flatten(candidate)
    if structure(reference) != structure(candidate):
        return {
            **result,
            "status": "wrong_shape",
            "detail": f"output structure differs: expected {structure(reference)}, "
            f"got {structure(candidate)}",
        }
    for (path, ref), (_, cand) in zip(ref_leaves, cand_leaves, strict=True):
        leaf = _compare_leaf(path, ref, cand, preset, distribution)
        result["max_abs_err"] = max(result["max_abs_err"], leaf.get("max_abs_err", 0.0))
        result["max_rel_err"] = max(result["max_rel_err"], leaf.get("max_rel_err", 0.0))
        if leaf["status"] != "correct" and result["status"] == "correct":
            result.update(
                status=leaf["status"], detail=leaf["detail"], first_mismatch=leaf.get("first_mismatch")
            )
    return result


def _compare_leaf(path: str, ref: Any, cand: Any, preset: str, distribution: str) -> dict:
    if not isinstance(ref, torch.Tensor):
        if ref is None or isinstance(ref, bool) or not isinstance(ref, numbers.Number):
            ok = ref == cand
            return {
                "status": "correct" if ok else "mismatch",
                "detail": "" if ok else f"{path}: expected {ref!r}, got {cand!r}",
            }
        ref, cand = torch.tensor(ref), torch.tensor(cand)
    if tuple(ref.shape) != tuple(cand.shape):
        return {
            "status": "wrong_shape",
            "detail": f"{path}: expected shape {tuple(ref.shape)}, got {tuple(cand.shape)}",
        }
    if ref.dtype != cand.dtype:
        return {"status": "wrong_dtype", "detail": f"{path}: expected dtype {ref.dtype}, got {cand.dtype}"}
    cand = cand.to(ref.device)
    if not (ref.is_floating_point() or ref.is_complex()):
        return _compare_exact(path, ref, cand)
    return _compare_close(path, ref, cand, preset, distribution)


def _compare_exact(path: str, ref: torch.Tensor, cand: torch.Tensor) -> dict:
    diff = (ref != cand).reshape(-1)
    if not diff.any():
        return {"status": "correct", "detail": ""}
    index = _unravel(int(diff.nonzero()[0, 0]), ref.shape)
    return {
        "status": "mismatch",
        "first_mismatch": index,
        "detail": f"{path}: {int(diff.sum())} of {ref.numel()} values differ; first at {index}: "
        f"expected {ref[index].item()}, got {cand[index].item()}",
    }


def _compare_close(path: str, ref: torch.Tensor, cand: torch.Tensor, preset: str, distribution: str) -> dict:
    atol, rtol = tolerance_for(preset, ref.dtype)
    flat_ref, flat_cand = ref.reshape(-1), cand.reshape(-1)
    atol = effective_atol(atol, _rms(flat_ref), distribution)
    max_abs = max_rel = 0.0
    bad_count, first_bad, first_nan = 0, None, None
    for start in range(0, flat_ref.numel(), CHUNK):
        r = flat_ref[start : start + CHUNK].double()
        c = flat_cand[start : start + CHUNK].double()
        r_finite, c_finite = torch.isfinite(r), torch.isfinite(c)
        # NaN/Inf in the candidate where the reference is finite: a `nan` verdict, reported first.
        new_nonfinite = r_finite & ~c_finite
        if first_nan is None and new_nonfinite.any():
            first_nan = start + int(new_nonfinite.nonzero()[0, 0])
        # Where the reference itself is not finite the candidate must produce the same special value.
        same_special = ~r_finite & ((r == c) | (torch.isnan(r) & torch.isnan(c)))
        both = r_finite & c_finite
        err = torch.where(both, (r - c).abs(), torch.zeros_like(r))
        bad = (both & (err > atol + rtol * r.abs())) | (~r_finite & ~same_special)
        if err.numel():
            max_abs = max(max_abs, float(err.max()))
            scale = r.abs()
            rel = torch.where(both & (scale > atol), err / scale.clamp_min(1e-300), torch.zeros_like(r))
            max_rel = max(max_rel, float(rel.max()))
        count = int(bad.sum())
        if count and first_bad is None:
            first_bad = start + int(bad.nonzero()[0, 0])
        bad_count += count
    result = {"max_abs_err": max_abs, "max_rel_err": max_rel}
    if first_nan is not None:
        index = _unravel(first_nan, ref.shape)
        return {
            **result,
            "status": "nan",
            "first_mismatch": index,
            "detail": f"{path}: NaN/Inf at {index} where the reference is finite ({ref[index].item():.6g})",
        }
    if bad_count:
        index = _unravel(first_bad, ref.shape)
        return {
            **result,
            "status": "mismatch",
            "first_mismatch": index,
            "detail": f"{path}: {bad_count} of {ref.numel()} values outside atol={atol:.3g} rtol={rtol:.3g}; "
            f"max abs err {max_abs:.4g}, max rel err {max_rel:.4g}; first at {index}: "
            f"expected {ref[index].item():.6g}, got {cand[index].item():.6g}",
        }
    return {**result, "status": "correct", "detail": ""}


def oracle_check(reference: Any, oracle: Any, candidate: Any,
                 envelope: list[float] | None = None) -> tuple[bool, str]:
    """Whether the candidate is, output by output, at most ORACLE_FACTOR times less accurate than the
    FP32 reference, both measured by max abs error against the float64 `oracle` (see tolerance.py):
    `oracle_verdict` of their `oracle_errors`."""
    return oracle_verdict(oracle_errors(reference, oracle, candidate), envelope)


def oracle_verdict(errors: list[tuple[str, float, float]],
                   envelope: list[float] | None = None) -> tuple[bool, str]:
    """`oracle_check` on errors already measured (`oracle_errors`: a multi-GB output's are measured once
    for the plain rule, the envelope's reach and the envelope's rule).
    `envelope`: per floating output (in `float_errors` order), the largest error against the oracle of
    eager FP32 runs whose float32 inputs and parameters were moved one ulp (reference_worker.fp32_envelope):
    where it exceeds eager's own, FP32 rounding alone moves this output that far, and that is the measure,
    up to ENVELOPE_CAP times eager's error (a mask or a cast of a moved value can jump by anything: with
    eager exact there, nothing widens). Where eager's own error is not finite, the oracle cannot vouch."""
    notes = []
    for index, (path, cand_err, ref_err) in enumerate(errors):
        if not math.isfinite(ref_err):
            return False, f"{path}: eager FP32 is not finite where float64 is (no measure of accuracy)"
        spread = envelope[index] if envelope is not None else None
        spread = spread if spread is not None and math.isfinite(spread) else None
        baseline = ref_err if spread is None else max(ref_err, min(spread, ENVELOPE_CAP * ref_err))
        eager = f"eager FP32's {ref_err:.3g}" + (f", {spread:.3g} one ulp away" if spread is not None else "")
        if not cand_err <= ORACLE_FACTOR * baseline:
            return False, f"{path}: error vs float64 {cand_err:.3g}, {eager}"
        notes.append(f"{path}: error vs float64 {cand_err:.3g} ({eager})")
    return True, "; ".join(notes)


def oracle_errors(reference: Any, oracle: Any, candidate: Any) -> list[tuple[str, float, float]]:
    """(path, the candidate's max abs error against the float64 `oracle`, eager FP32's) per floating
    output."""
    errors = []
    leaves = zip(flatten(reference), flatten(oracle), flatten(candidate), strict=True)
    for (path, ref), (_, exact), (_, cand) in leaves:
        if isinstance(ref, torch.Tensor) and ref.is_floating_point():
            # `exact` may be on the CPU: moved a chunk at a time
            errors.append((path, _max_abs_diff(cand.to(ref.device), exact), _max_abs_diff(ref, exact)))
    return errors


def within_envelope_reach(errors: list[tuple[str, float, float]]) -> bool:
    """Whether an envelope could still accept a candidate of these `oracle_errors`: every output's error
    within ORACLE_FACTOR * ENVELOPE_CAP times eager's (finite). A clearly wrong candidate costs no envelope
    runs."""
    return all(math.isfinite(ref) and cand <= ORACLE_FACTOR * ENVELOPE_CAP * ref for _, cand, ref in errors)


def float_errors(outputs: Any, oracle: Any) -> list[float]:
    """Max abs error against the float64 `oracle` of each floating output (inf where one is not finite
    where the oracle is)."""
    return [_max_abs_diff(out, exact) for (_, out), (_, exact) in zip(flatten(outputs), flatten(oracle),
                                                                        strict=True)
            if isinstance(out, torch.Tensor) and out.is_floating_point()]


def _max_abs_diff(a: torch.Tensor, exact: torch.Tensor) -> float:
    """Max |a - exact| over the elements where `exact` is finite; inf when `a` is not finite there."""
    worst = 0.0
    flat_a, flat_exact = a.reshape(-1), exact.reshape(-1)
    for start in range(0, flat_a.numel(), CHUNK):
        x = flat_a[start : start + CHUNK].double()
        e = flat_exact[start : start + CHUNK].to(x.device, torch.float64)
        finite = torch.isfinite(e)
        if (finite & ~torch.isfinite(x)).any():
            return float("inf")
        diff = torch.where(finite, (x - e).abs(), torch.zeros_like(e))
        if diff.numel():
            worst = max(worst, float(diff.max()))
    return worst


def _rms(flat: torch.Tensor) -> float:
    if flat.numel() == 0:
        return 0.0
    total = 0.0
    for start in range(0, flat.numel(), CHUNK):
        chunk = flat[start : start + CHUNK].double()
        total += float(torch.where(torch.isfinite(chunk), chunk, torch.zeros_like(chunk)).pow(2).sum())
    return (total / flat.numel()) ** 0.5


def _unravel(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(tuple(shape)):
        index.append(flat_index % size)
        flat_index //= size
    return tuple(reversed(index))


def compare_buffers(
    reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor], preset: str
) -> dict:
    """Buffers the reference's forward updated (BatchNorm running stats in training mode) must match."""
    for name, ref in reference.items():
        if name not in candidate:
            return {
                "status": "mismatch",
                "detail": f"buffer {name} is updated by Model.forward but ModelNew has no such buffer",
            }
        result = compare_outputs(ref, candidate[name], preset)
        if result["status"] != "correct":
            return {
                **result,
                "status": "mismatch",
                "detail": f"buffer {name} after forward: {result['detail']}",
            }
    return {"status": "correct", "detail": ""}
