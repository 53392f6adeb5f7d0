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


AA_SLICE = "level1/0[1-6]_*"   # elementwise ops on 0.75-0.8 GiB inputs


@pytest.mark.gpu
def test_aa_check_with_tasks_admitted_by_memory(tmp_path):
    """The reference judged against itself (eager-copy) on a slice, four tasks at once admitted by memory:
    every ratio within 1.00 ± 0.03, and nothing blamed on a problem or the bench."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kernelwright.cli", "bench", "--filter", AA_SLICE, "--gpus", "0",
               "--jobs", "4", "--systems", "eager,eager-copy", "--trials", "1", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)  # timing at its defaults
    assert result.returncode == 0, result.stderr[-3000:]

    rows = ResultsStore(out).rows()
    memory = ResultsStore(out).runs()[0]["memory"]
    for row in rows:  # the admission's estimate beside the judge's measured peaks, for the record
        peaks, problem = row.get("memory") or {}, row["problem"]
        gib = {key: (peaks.get(key) or 0) / 2**30 for key in ("reference_peak_bytes", "candidate_peak_bytes")}
        print(f"{problem:28} {row['system']:10} {row['status']:8} need "
              f"{(memory['need_bytes'][problem] or 0) / 2**30:5.1f} GiB ({memory['need_source'][problem]}), "
              f"measured reference {gib['reference_peak_bytes']:5.2f} GiB, "
              f"candidate {gib['candidate_peak_bytes']:5.2f} GiB")
    failed = [(r["problem"], r["system"], r["status"], r["detail"]) for r in rows if r["status"] != "correct"]
    assert not failed
    (check,) = json.loads((out / "report.json").read_text())["aa_check"]
    print("A/A ratios:", {problem: round(ratio, 4) for problem, ratio in check["ratios"].items()})
    assert len(check["ratios"]) == 6 and not check["outside"], check
