"""`optimize`'s per-group timing (verify/measure.py `series_ms`) on the GPU: a call's host time hides behind
its GPU work, as in the judge's series and the emitted forward, and shows where the GPU waits for it."""

from __future__ import annotations

import time

import pytest
import torch

from kernelwright.verify.measure import time_ms

pytestmark = pytest.mark.gpu


def _spin(cycles: int, host_s: float) -> None:
    torch.cuda._sleep(cycles)   # GPU work of a known length, queued at once
    time.sleep(host_s)          # then the host busy elsewhere, as Python around a launch is


def test_a_calls_host_time_is_hidden_behind_longer_gpu_work():
    cycles = 2_000_000
    gpu_ms = time_ms(lambda: _spin(cycles, 0.0))
    assert gpu_ms > 0.2
    # host time of a third of the GPU time: the queue stays ahead, so the time is the GPU's
    with_host = time_ms(lambda: _spin(cycles, gpu_ms / 3e3))
    assert with_host == pytest.approx(gpu_ms, rel=0.1)


def test_a_host_bound_call_is_timed_at_its_host_time():
    cycles = 20_000
    gpu_ms = time_ms(lambda: _spin(cycles, 0.0))
    host_s = max(2e-3, 20 * gpu_ms / 1e3)
    # the GPU waits for each launch: the time between the events is the host's
    assert time_ms(lambda: _spin(cycles, host_s)) > 0.8 * host_s * 1e3
