"""`kernelwright capture`: text and JSON dumps, and the --stats coverage report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kernelwright.cli import main
from kernelwright.problem import resolve_problem_path

UNEXPORTABLE = Path(__file__).parent / "unexportable"


def test_capture_prints_the_graph(capsys):
    assert main(["capture", "level1/23_Softmax", "--shrink"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("graph(training=True):") and "softmax(x)  dim=1" in out


def test_capture_json(capsys):
    assert main(["capture", "level1/23_Softmax", "--shrink", "--json"]) == 0
    graph = json.loads(capsys.readouterr().out)
    assert [n["op"] for n in graph["nodes"]] == ["input", "softmax"]
    assert graph["outputs"] == ["%0"]


def test_capture_error_is_one_clear_line(capsys):
    assert main(["capture", str(UNEXPORTABLE / "data_dependent_branch.py")]) == 2
    err = capsys.readouterr().err
    assert "data-dependent" in err and "Traceback" not in err


def test_usage_errors(capsys, tmp_path):
    assert main(["capture"]) == 2
    assert main(["capture", "level1/23_Softmax", "--stats", str(tmp_path)]) == 2
    assert main(["capture", "--stats", str(tmp_path)]) == 2  # no problem files
    assert "needs a problem" in capsys.readouterr().err


def test_stats_reports_native_share_fallbacks_and_failures(tmp_path, capsys):
    for problem_id in ("level1/23_Softmax", "level1/36_CrossEntropyLoss"):
        shutil.copy(resolve_problem_path(problem_id), tmp_path / resolve_problem_path(problem_id).name)
    shutil.copy(UNEXPORTABLE / "mutates_input.py", tmp_path / "mutates_input.py")
    assert main(["capture", "--stats", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["captured"] == 2
    assert [f["target"] for f in report["fallback"]] == ["aten.gather.default"]
    assert 0.8 < report["native_share"] < 1.0
    assert "modifies its argument" in report["failures"][0]["message"]
    assert main(["capture", "--stats", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "native share" in text and "aten_fallback" in text and "not captured" in text
