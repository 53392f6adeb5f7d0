"""A numpy model of the SM90 3xTF32 GEMM's operand splits (`kernelwright/codegen/cuda/kw_gemm_sm90_x3.cuh`),
bit for bit, on the CPU: the bias and error each split leaves in a product, and what each does to edge values.

    python bench/kernels/x3_split_model.py

The kernel computes A_small.B + A_big.B_small + A_big.B from TF32 parts (FP32 bit patterns whose 13 low
mantissa bits the tensor cores drop). Modelled here: the parts as the tensor cores read them, and the three
products summed exactly (float64), i.e. the split's own error; the tensor cores' accumulation (its adds
truncate) and the FP32 promotion are not modelled. Non-negative operands show a bias (every product of one
sign), which random signs hide. Splits:
- `truncated` (before 2026-11-29): big = x truncated, small = x - big, truncated again by the tensor cores;
- `rounded` (4490427): A's big rounded to nearest (ties away), A's and B's small parts rounded (ties away);
- `clamped_trunc` (7859f2a): A clamped to the largest TF32 value, rounded; A's small = x - big, truncated by
  the tensor cores; B's small part rounded to nearest even (cvt.rn.tf32);
- `clamped` (the kernel since session 42): as `clamped_trunc`, A's small part rounded to nearest even.
"""

from __future__ import annotations

import numpy as np

MASK = np.uint32(0xFFFFE000)
MAX_TF32 = np.array([0x7F7FE000], dtype=np.uint32).view(np.float32)[0]


def _bits(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).view(np.uint32)


def _float(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def truncate(x: np.ndarray) -> np.ndarray:
    """What the tensor cores read of a TF32 operand."""
    return _float(_bits(x) & MASK)


def round_away(x: np.ndarray) -> np.ndarray:
    """(bits + 0x1000) & mask: to nearest, ties away from zero (finite x that cannot round past FLT_MAX)."""
    return _float((_bits(x).astype(np.uint64) + 0x1000) & 0xFFFFE000)


def round_even(x: np.ndarray) -> np.ndarray:
    """cvt.rn.tf32.f32: to nearest, ties to even."""
    bits = _bits(x).astype(np.uint64)
    return _float((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000)


def split_a(x: np.ndarray, form: str) -> tuple[np.ndarray, np.ndarray]:
    """A's (big, small) as the tensor cores read them."""
    with np.errstate(invalid="ignore", over="ignore"):
        if form == "truncated":      # no small part for inf and NaN
            big = truncate(x)
            return big, truncate(np.where(np.isfinite(x), x - big, 0).astype(np.float32))
        if form == "rounded":
            ok = (_bits(x) & 0x7FFFFFFF) < 0x7F7FF000
            big = np.where(ok, round_away(x), truncate(x)).astype(np.float32)
            return big, truncate(np.where(ok, round_away(x - big), 0).astype(np.float32))
        big = round_away(np.fmin(np.fmax(x, -MAX_TF32), MAX_TF32))
        small = (x - big).astype(np.float32)
        return big, truncate(small if form == "clamped_trunc" else round_even(small))


def split_b(x: np.ndarray, form: str) -> tuple[np.ndarray, np.ndarray]:
    """B's (big, small): big is the raw tile truncated in every form; non-finite x has no small part."""
    big = truncate(x)
    with np.errstate(invalid="ignore"):
        rest = (x - big).astype(np.float32)
    rounding = {"truncated": lambda r: r, "rounded": round_away}.get(form, round_even)
    return big, truncate(np.where(np.isfinite(x), rounding(rest), 0).astype(np.float32))


def product(a: np.ndarray, b: np.ndarray, form: str) -> np.ndarray:
    (a_big, a_small), (b_big, b_small) = split_a(a, form), split_b(b, form)
    a_big, a_small, b_big, b_small = (t.astype(np.float64) for t in (a_big, a_small, b_big, b_small))
    return a_small @ b_big + a_big @ b_small + a_big @ b_big


def main() -> None:
    rng = np.random.default_rng(0)
    for k in (64, 1024):
        for name, draw in (("random signs", rng.standard_normal), ("non-negative", lambda s: np.abs(
                rng.standard_normal(s)))):
            a, b = draw((256, k)).astype(np.float32), draw((k, 256)).astype(np.float32)
            exact = a.astype(np.float64) @ b.astype(np.float64)
            fp32 = np.abs((a @ b).astype(np.float64) - exact).max()
            cells = [f"K={k:5d} {name:12s} numpy FP32 max err {fp32:.2e}"]
            for form in ("truncated", "rounded", "clamped_trunc", "clamped"):
                out = product(a, b, form)
                cell = f"{form} max err {np.abs(out - exact).max():.2e}"
                if name == "non-negative":   # every exact value positive: the mean relative error is a bias
                    cell += f" (bias {((out - exact) / exact).mean():+.1e})"
                cells.append(cell)
            print(" | ".join(cells))
    named = np.array([0.0, -0.0, 1.0, 1e-40, 3.4e38, np.inf, -np.inf, np.nan], dtype=np.float32)
    edges = np.concatenate([named, _float(np.array([0x7F7FEFFF, 0x7F7FF000, 0x7F7FFFFF], dtype=np.uint32))])
    print("\nA's edge values, clamped split (big, small as the tensor cores read them):")
    with np.errstate(invalid="ignore"):
        for x, big, small in zip(edges, *split_a(edges, "clamped"), strict=True):
            print(f"  {x!s:>14} ({int(_bits(np.array([x]))[0]):#010x}): big {big!s:>14}, small {small!s:>11}")


if __name__ == "__main__":
    main()
