"""The float64 oracle: a candidate that misses eager FP32 but is as accurate as it (against float64) is
accepted; one that is less accurate is not."""

from __future__ import annotations

import pytest
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


def _worker_on(problem_text: str, tmp_path, device: str = "cpu"):
    """A reference worker loaded with a problem on `device`, its model built."""
    from kernelwright.judge.reference_worker import ReferenceWorker

    path = tmp_path / "problem.py"
    path.write_text(problem_text)
    worker = ReferenceWorker()
    worker.op_load({"device": device, "workdir": str(tmp_path), "problem": str(path), "seed": 0, "trials": 2,
                    "extra_distributions": False})
    worker.op_reset({})
    return worker


_SOFTMAX_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8) * scale)

    def forward(self, x):
        return torch.softmax(x * self.w, dim=-1)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [3.0]
'''


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_float64_recheck_that_does_not_fit_the_gpu_runs_on_the_cpu(tmp_path, monkeypatch, device):
    """Out of GPU memory in the float64 re-check: the same model (its current parameters) on the CPU, on
    the trial's input values; out of memory there too is raised (the machine's state), never a verdict.
    (On the CPU the first attempt is the CPU too: what is checked there is the fallback's logic.)"""
    from kernelwright.judge import reference_worker as module

    worker = _worker_on(_SOFTMAX_PROBLEM, tmp_path, device)
    trial = worker.plan[0]
    with torch.no_grad():
        worker.model.w.mul_(2.0)   # state changed since construction: the CPU copy must carry it
    expected, why = worker.float64_outputs(trial, worker.model)
    assert why == "" and expected.dtype == torch.float64

    real = module.ReferenceWorker._float64_run
    tries = []

    def gpu_full(self, trial, model, on_cpu):
        tries.append(on_cpu)
        if not on_cpu:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(self, trial, model, on_cpu)

    monkeypatch.setattr(module.ReferenceWorker, "_float64_run", gpu_full)
    exact, why = worker.float64_outputs(trial, worker.model)
    assert tries == [False, True] and why == "" and exact.device.type == "cpu"
    torch.testing.assert_close(exact, expected.cpu(), rtol=1e-12, atol=1e-15)
    with torch.no_grad():
        outputs = worker.model(*worker.trial_inputs(trial))
    assert oracle_check(outputs, exact, outputs)[0]   # the float64 result read from the CPU

    def nowhere(self, trial, model, on_cpu):
        raise torch.OutOfMemoryError("out of memory") if not on_cpu else RuntimeError("tensors on cuda:0")

    monkeypatch.setattr(module.ReferenceWorker, "_float64_run", nowhere)
    try:
        worker.float64_outputs(trial, worker.model)
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError("out of memory on both devices must be raised, not judged")


def test_a_model_that_cannot_run_in_float64_says_why(tmp_path):
    # a float32 tensor made inside forward meets the float64 ones
    mixed = _SOFTMAX_PROBLEM.replace("dim=-1)", "dim=-1) @ torch.ones(8, 2)")
    worker = _worker_on(mixed, tmp_path)
    exact, why = worker.float64_outputs(worker.plan[0], worker.model)
    assert exact is None and "does not run in float64" in why


def test_the_oracle_reads_a_float64_result_kept_on_another_device():
    """`oracle_check` moves the float64 result a chunk at a time (it may be on the CPU, too large for
    the GPU); here both on the CPU, the exact values as a non-contiguous view."""
    exact, fp32, _, _ = _softmax_of_large_logits()
    candidate = (exact + (exact - fp32.double()) * 0.9).float()
    accepted, _ = oracle_check(fp32, exact.t().contiguous().t(), candidate)
    assert accepted


def test_the_cpu_float64_copy_keeps_what_a_rebuild_would_lose():
    """The CPU copy of the float64 re-check is the judged model's, not a rebuilt one: parameters and
    buffers as they are now (a non-persistent buffer included), shared parameters still shared, the
    training flag kept; the original untouched."""
    from kernelwright.judge.reference_worker import _copy_to

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    model[1].register_buffer("scratch", torch.full((3,), 7.0), persistent=False)
    model.tied = model[0].weight           # the same Parameter reachable twice
    model.eval()
    with torch.no_grad():
        model[0].weight.fill_(0.5)
    copied = _copy_to(model, torch.device("cpu"))
    assert not copied.training and copied[0].weight.dtype == torch.float64
    assert torch.equal(copied[0].weight, torch.full((3, 3), 0.5, dtype=torch.float64))
    assert torch.equal(copied[1].scratch, torch.full((3,), 7.0, dtype=torch.float64))
    assert copied.tied is copied[0].weight and copied[0].weight is not model[0].weight
    assert model[0].weight.dtype == torch.float32


def test_a_rejection_by_the_float64_recheck_says_both_errors(tmp_path):
    """A candidate off the table and less accurate than eager against float64: the mismatch's detail gives
    the candidate's and eager FP32's errors, so that a rejected file says by how much it lost."""
    from kernelwright.judge import evaluate
    from tests.judge.corpus import CPU_OPTIONS

    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(_SOFTMAX_PROBLEM)
    candidate.write_text(_SOFTMAX_PROBLEM + '''

class ModelNew(Model):
    def forward(self, x):
        return super().forward(x) * 1.01
''')
    verdict = evaluate(problem, candidate, CPU_OPTIONS)
    assert verdict["status"] == "mismatch"
    assert "the float64 re-check: output: error vs float64" in verdict["detail"]
    assert "eager FP32's" in verdict["detail"]


def _chaotic_softmax(seed: int = 2):
    """A softmax of large logits where eager FP32's error against float64 fell low by chance: a GEMM with K
    summed in two halves (as exact an FP32 GEMM as eager's) is 2.9x as far from float64 on seed 2."""
    torch.manual_seed(seed)
    a, w = torch.randn(256, 512, dtype=torch.float64) * 30, torch.randn(512, 256, dtype=torch.float64)
    af, wf = a.float(), w.float()
    split = torch.softmax(af[:, :256] @ wf[:256] + af[:, 256:] @ wf[256:], dim=1)
    return torch.softmax(a @ w, dim=1), torch.softmax(af @ wf, dim=1), split, af, wf


def _envelope(af, wf, exact, runs: int = 4, seed: int = 2) -> list[float]:
    """What the reference worker's fp32_envelope measures, for `softmax(a @ w)`."""
    from kernelwright.judge.compare import float_errors
    from kernelwright.judge.reference_worker import nudge_one_ulp_

    generator = torch.Generator().manual_seed(seed)
    errors = []
    for _ in range(runs):
        a, w = af.clone(), wf.clone()
        nudge_one_ulp_(a, generator)
        nudge_one_ulp_(w, generator)
        errors.append(float_errors(torch.softmax(a @ w, dim=1), exact)[0])
    return [max(errors)]


def test_an_fp32_sum_in_another_order_is_held_to_fp32s_envelope_not_eagers_one_draw():
    exact, fp32, split, af, wf = _chaotic_softmax()
    accepted, note = oracle_check(fp32, exact, split)
    assert not accepted   # eager's draw alone: the one-draw rule rejected an exact FP32 GEMM
    envelope = _envelope(af, wf, exact)
    accepted, note = oracle_check(fp32, exact, split, envelope)
    assert accepted and "one ulp away" in note


def test_tf32_rounding_still_fails_against_the_envelope():
    exact, fp32, _, af, wf = _chaotic_softmax()

    def to_tf32(t):
        return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)

    candidate = torch.softmax(to_tf32(af) @ to_tf32(wf), dim=1)
    envelope = _envelope(af, wf, exact)
    accepted, note = oracle_check(fp32, exact, candidate, envelope)
    assert not accepted and "one ulp away" in note
    # far outside: two orders of magnitude and more
    assert (candidate.double() - exact).abs().max() > 100 * envelope[0]


def test_an_envelope_that_is_not_finite_opens_nothing():
    exact, fp32, _, _, _ = _chaotic_softmax()
    candidate = fp32 * 1.01
    assert not oracle_check(fp32, exact, candidate, [float("inf")])[0]
    assert not oracle_check(fp32, exact, candidate, [float("nan")])[0]


def test_one_ulp_moves_every_finite_value_to_a_neighbour_in_place(monkeypatch):
    from kernelwright.judge import reference_worker
    from kernelwright.judge.reference_worker import nudge_one_ulp_

    t = torch.tensor([0.0, 1.0, -2.5, 1e30, float("inf"), float("nan"), 3e-40])
    for chunk in (1 << 24, 2):   # whole, and a chunk at a time
        monkeypatch.setattr(reference_worker, "ULP_CHUNK", chunk)
        moved = t.clone()
        nudge_one_ulp_(moved, torch.Generator().manual_seed(0))
        finite = torch.isfinite(t)
        up = torch.nextafter(t, torch.tensor(float("inf")))
        down = torch.nextafter(t, torch.tensor(float("-inf")))
        assert bool(((moved == up) | (moved == down))[finite].all()) and bool((moved != t)[finite].all())
        assert moved[4] == float("inf") and moved[5].isnan()
    strided = torch.randn(6, 4).t()   # the noncontiguous trial's layout is kept
    before = strided.clone()
    nudge_one_ulp_(strided, torch.Generator().manual_seed(0))
    assert strided.stride() == (1, 4) and bool((strided != before).all())


def test_the_envelope_widens_at_most_envelope_cap_times_eagers_error():
    """A mask of a moved value can jump by anything: where eager is exact (a mask of exact zeros), nothing
    widens, and elsewhere the envelope counts for at most ENVELOPE_CAP times eager's error."""
    from kernelwright.judge.compare import oracle_errors, within_envelope_reach
    from kernelwright.judge.tolerance import ENVELOPE_CAP, ORACLE_FACTOR

    torch.manual_seed(0)
    x = torch.randn(64, dtype=torch.float64)
    m = torch.relu(torch.randn(64, dtype=torch.float64))
    exact, fp32 = x * (m > 0), x.float() * (m.float() > 0)
    ignores_mask = x.float()   # wrong: the mask left out
    assert not oracle_check(fp32, exact, ignores_mask, [3.0])[0]     # eager exact: no widening
    assert not within_envelope_reach(oracle_errors(fp32, exact, ignores_mask))   # and no envelope runs
    exact, fp32, split, _, _ = _chaotic_softmax()
    eager = (fp32.double() - exact).abs().max().item()
    far = (exact + 3 * ORACLE_FACTOR * ENVELOPE_CAP * eager * torch.sign(exact - 0.5)).float()
    assert not oracle_check(fp32, exact, far, [1e9])[0]   # a huge envelope counts only up to the cap


def test_eager_not_finite_where_float64_is_vouches_for_nothing():
    exact = torch.tensor([1.0, 2.0], dtype=torch.float64)
    fp32 = torch.tensor([float("inf"), 2.0])
    candidate = torch.tensor([12345.0, 2.0])
    accepted, note = oracle_check(fp32, exact, candidate)
    assert not accepted and "not finite" in note


# a forward whose result depends on how often it ran (the worker's inputs reseed torch's generator, so
# dropout repeats itself there)
_COUNTING_PROBLEM = _SOFTMAX_PROBLEM.replace("return torch.softmax(x * self.w, dim=-1)",
                                             "self.calls = getattr(self, 'calls', 0) + 1\n"
                                             "        return torch.softmax(x * self.w, dim=-1) + self.calls")


def _first_trial_envelope(worker) -> tuple[list[float] | None, str, torch.Tensor, torch.Tensor]:
    """(envelope, why, eager's outputs, float64's) of the worker's first trial, as op_compare measures it."""
    trial = worker.plan[0]
    with torch.no_grad():
        outputs = worker.model(*worker.trial_inputs(trial))
    exact, _ = worker.float64_outputs(trial, worker.model)
    return (*worker.fp32_envelope(trial, worker.model, outputs, exact), outputs, exact)


def test_the_worker_measures_the_envelope_only_where_eager_repeats_itself(tmp_path, monkeypatch):
    """Four runs one ulp away on a deterministic model; none where eager does not repeat itself, nor where
    a parameter cannot be moved in place (then the verdict is the oracle's without an envelope)."""
    from kernelwright.judge import reference_worker

    worker = _worker_on(_SOFTMAX_PROBLEM, tmp_path)
    envelope, why, _, _ = _first_trial_envelope(worker)
    assert why == "" and len(envelope) == 1 and 0 < envelope[0] < 1e-5
    (tmp_path / "random").mkdir()
    envelope, why, _, _ = _first_trial_envelope(_worker_on(_COUNTING_PROBLEM, tmp_path / "random"))
    assert envelope is None and "does not repeat itself" in why

    def unwritable(t, generator):
        raise RuntimeError("unsupported operation: more than one element refers to a single memory location")

    monkeypatch.setattr(reference_worker, "nudge_one_ulp_", unwritable)
    envelope, why, _, _ = _first_trial_envelope(worker)
    assert envelope is None and "no FP32 envelope: RuntimeError" in why


def test_half_precision_values_are_not_moved(tmp_path):
    """One ulp of bfloat16 measures the storage format, not the sums: such a model's envelope is eager's
    own error (nothing moved), so a candidate summing in bfloat16 is not let through."""
    half = _SOFTMAX_PROBLEM.replace("torch.randn(8) * scale", "(torch.randn(8) * scale).bfloat16()").replace(
        "[torch.randn(4, 8)]", "[torch.randn(4, 8).bfloat16()]")
    envelope, why, outputs, exact = _first_trial_envelope(_worker_on(half, tmp_path))
    assert why == "" and envelope == [(outputs.double() - exact).abs().max().item()]
