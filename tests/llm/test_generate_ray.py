"""`kernelwright generate --ray`: answers judged on a local Ray cluster (the real judge, on the CPU) give the
same verdicts, feedback and kept candidate as the local judge. Skipped with a reason without Ray."""

from __future__ import annotations

import json

import pytest
from test_generate_cli import FIXED, PROBLEM, WRONG, generate_in_process

pytest.importorskip("ray", reason="Ray is optional: pip install -e '.[ray]' to run the --ray tests")


def test_generate_judges_answers_on_a_ray_cluster(ray_cluster, replay_server, tmp_path, capsys, monkeypatch):
    problem = tmp_path / "level1" / "1_DoubleReLU.py"
    problem.parent.mkdir()
    problem.write_text(PROBLEM)
    replay_server.answers = {"Doubled ReLU": [WRONG, FIXED]}
    out = tmp_path / "run"
    code, err = generate_in_process(capsys, monkeypatch, str(problem), "--model", replay_server.model,
                                    "--base-url", replay_server.base_url, "--device", "cpu", "--shrink",
                                    "--turns", "3", "--out", str(out), "--ray")
    assert code == 0, err
    events = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    turns = [e for e in events if e["event"] == "turn"]
    assert [t["verdict"]["status"] for t in turns] == ["mismatch", "correct"]
    # the verdict names the driver's files, not the node's scratch copies
    assert turns[0]["verdict"]["problem"] == str(problem.resolve())
    assert turns[0]["verdict"]["candidate"] == str((out / turns[0]["code_path"]).resolve())
    assert "max abs" in turns[0]["feedback"]
    assert "clamp_min" in (out / "candidates" / "level1" / "1_DoubleReLU.py").read_text()
