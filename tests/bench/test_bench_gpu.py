"""`kernelwright bench` on a GPU, end to end: a slice of the bundled suite for eager, torch.compile and
kernelwright (optimize, then the judge), through the command line as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kernelwright.bench.store import ResultsStore
from kernelwright.judge import STATUSES

SLICE = "level1/0[1-3]_*"   # ReLU, LeakyReLU, GELU (erf)


@pytest.mark.gpu
def test_bench_bundled_slice_on_gpu(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kernelwright.cli", "bench", "--filter", SLICE, "--gpus", "0",
               "--systems", "eager,compile,kernelwright", "--min-runs", "20", "--min-time", "0.1",
               "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]

    rows = ResultsStore(out).rows()
    assert len(rows) == 9
    for row in rows:
        assert row["device"] and row["gpu"] is not None
        if row["system"] in ("eager", "compile"):
            assert row["status"] == "correct" and row["time_ms"] > 0, row
        else:
            assert row["status"] in STATUSES or row["status"] == "optimize_error", row
            if row["status"] == "correct":
                assert row["speedup_vs_eager"] > 0 and row["speedup_vs_compile"] > 0
    report = json.loads((out / "report.json").read_text())
    assert report["summary"][0]["overall"]["all"]["compile"]["problems"] == 3
    assert report["runs"][0]["gpus"][0]["name"]
    for name in ("report.md", "speedup.png", "fast_p.png", "compile_time.png"):
        assert (out / name).stat().st_size > 0
