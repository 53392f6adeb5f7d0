"""The float64 oracle: a candidate that misses eager FP32 but is as accurate as it (against float64) is
accepted; one that is less accurate is not."""

from __future__ import annotations

import torch

from kernelwright.judge.compare import compare_outputs, oracle_check


def _softmax_of_large_logits():
    """An ill-conditioned output: softmax amplifies last-bit differences of large logits."""
    torch.manual_seed(0)
    a, w = torch.randn(64, 256, dtype=torch.float64) * 30, torch.randn(256, 128, dtype=torch.float64)
    exact = torch.softmax(a @ w, dim=1)
    fp32 = torch.softmax(a.float() @ w.float(), dim=1)
    return exact, fp32, a, w


def test_as_accurate_as_eager_is_accepted_even_when_allclose_fails():
    exact, fp32, _, _ = _softmax_of_large_logits()
    # A candidate at most as far from float64 as eager FP32 is, but on the other side of it.
    candidate = (exact + (exact - fp32.double()) * 0.9).float()
    assert compare_outputs(fp32, candidate, "default")["status"] == "mismatch"
    accepted, note = oracle_check(fp32, exact, candidate)
    assert accepted and "error vs float64" in note


def test_less_accurate_than_eager_is_rejected():
    exact, fp32, a, w = _softmax_of_large_logits()
    # TF32-like precision: round the GEMM inputs to 10 mantissa bits.
    def to_tf32(t):
        return (t.float().view(torch.int32) & ~0x1FFF).view(torch.float32)
    candidate = torch.softmax(to_tf32(a) @ to_tf32(w), dim=1)
    accepted, note = oracle_check(fp32, exact, candidate)
    assert not accepted and "eager FP32" in note


def test_non_finite_where_float64_is_finite_is_rejected():
    exact = torch.ones(4, dtype=torch.float64)
    fp32 = torch.ones(4)
    candidate = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    assert not oracle_check(fp32, exact, candidate)[0]
