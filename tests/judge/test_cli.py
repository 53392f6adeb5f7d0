"""`kernelwright eval` and `evaluate_reference` end to end on the CPU."""

from __future__ import annotations

import json

import pytest
import torch
from corpus import CANDIDATES, CPU_OPTIONS, PROBLEMS

from kernelwright.cli import main
from kernelwright.judge import evaluate_reference

FAST = ["--device", "cpu", "--min-runs", "3", "--min-time", "0", "--no-compile-baseline", "--trials", "2"]


def test_eval_json_correct_exits_0(capsys):
    code = main(["eval", str(PROBLEMS / "gelu.py"), str(CANDIDATES / "correct_gelu.py"), *FAST, "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 0 and verdict["status"] == "correct"
    assert len(verdict["trials"]) == 7 and verdict["timings"]["candidate"]["n"] >= 3
    assert verdict["options"]["trials"] == 2 and verdict["tolerance"]["preset"] == "default"


def test_eval_table_rejected_exits_1(capsys):
    code = main(["eval", str(PROBLEMS / "gelu.py"), str(CANDIDATES / "no_code_block.md"), *FAST])
    out = capsys.readouterr().out
    assert code == 1 and "rejected" in out and "no fenced code block" in out


def test_malformed_problem_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef get_inputs():\n    return []\n")
    code = main(["eval", str(bad), str(CANDIDATES / "correct_gelu.py"), "--device", "cpu"])
    assert code == 2 and "missing Model" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when there is no GPU")
def test_device_cuda_without_gpu_is_a_usage_error(capsys):
    code = main(["eval", str(PROBLEMS / "gelu.py"), str(CANDIDATES / "correct_gelu.py")])
    assert code == 2 and "--device cpu" in capsys.readouterr().err


def test_a_candidate_path_naming_nothing_is_a_usage_error(tmp_path, capsys):
    """A missing file or a folder is the user's typo (exit 2, one line), not a 'rejected' verdict."""
    for candidate, why in ((tmp_path / "nosuch.py", "no such candidate file"), (tmp_path, "is a directory")):
        code = main(["eval", str(PROBLEMS / "gelu.py"), str(candidate), "--device", "cpu"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and why in err and len(err.splitlines()) == 1


def test_unknown_tolerance_is_a_usage_error(capsys):
    assert main(["eval", "p.py", "c.py", "--tolerance", "loose"]) == 2
    assert "--tolerance loose: no such preset; choose default or kernelbench" in capsys.readouterr().err


def test_evaluate_reference_times_eager_only():
    report = evaluate_reference(PROBLEMS / "batchnorm_train.py", CPU_OPTIONS)
    assert report["status"] == "reference" and report["timings"]["candidate"] is None
    assert report["timings"]["eager"]["median_ms"] > 0 and report["timings"]["compile"] is None
    assert report["env"]["torch"] and len(report["seeds"]["inputs"]) == 10
