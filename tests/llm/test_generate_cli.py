"""`kernelwright generate` end to end: a real CLI process, real HTTP on loopback, the real judge on the CPU
(pure-PyTorch answers), and the errors a user sees (exit code 2, one line, no traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kernelwright.cli import main

PROBLEM = '''"""Doubled ReLU (a tiny problem for the generate tests)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


batch_size = 16
dim = 32


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

MODEL_NEW = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {body}
'''

WRONG = f"My first try:\n\n```python\n{MODEL_NEW.format(body='torch.relu(x) * 3.0')}```\n"
# Two code blocks, as in seed 004: the judge takes the last one that defines ModelNew.
FIXED = (
    "Sorry, the factor was wrong. A scratch helper first:\n\n```python\ndef unused():\n    return 1\n```\n\n"
    f"And the fix:\n\n```python\n{MODEL_NEW.format(body='torch.clamp_min(x, 0.0) * 2.0')}```\n"
)


def generate(*args: str, key: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    if key:
        env["OPENAI_API_KEY"] = key
    return subprocess.run([sys.executable, "-m", "kernelwright.cli", "generate", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_generate_runs_judges_feeds_back_and_resumes(replay_server, tmp_path, capsys, monkeypatch):
    problem = tmp_path / "level1" / "1_DoubleReLU.py"
    problem.parent.mkdir()
    problem.write_text(PROBLEM)
    replay_server.answers = {"Doubled ReLU": [WRONG, FIXED, "should not be asked"]}
    out = tmp_path / "run"
    args = [str(problem), "--model", replay_server.model, "--base-url", replay_server.base_url,
            "--device", "cpu", "--turns", "3", "--out", str(out)]

    result = generate(*args, key="sk-cli-secret")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(replay_server.requests) == 2
    feedback = replay_server.requests[1]["messages"][-1]["content"]
    assert "do not match" in feedback
    events = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    turns = [e for e in events if e["event"] == "turn"]
    assert [t["verdict"]["status"] for t in turns] == ["mismatch", "correct"]
    assert turns[0]["feedback"] == feedback and turns[0]["verdict"]["detail"].strip() in feedback
    assert "max abs" in feedback
    candidate = (out / "candidates/level1/1_DoubleReLU.py").read_text()
    assert "clamp_min" in candidate and "def unused" not in candidate
    assert "1/1 problem(s) with a correct candidate" in result.stdout
    assert "tokens: 200 prompt + 20 completion = 220" in result.stdout
    assert replay_server.authorizations[0] == "Bearer sk-cli-secret"
    assert all("sk-cli-secret" not in p.read_text() for p in out.rglob("*") if p.is_file())

    code, _ = generate_in_process(capsys, monkeypatch, *args)
    assert code == 0
    assert len(replay_server.requests) == 2, "a finished run resumes without asking again"


# The other runs call the CLI in-process (`main`, the same code path as the `kernelwright` script): each
# subprocess costs seconds of interpreter start-up in CI.


def generate_in_process(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    code = main(["generate", *args])
    return code, capsys.readouterr().err


def test_unreachable_endpoint_is_one_clear_error(dead_url, tmp_path, capsys, monkeypatch):
    code, err = generate_in_process(capsys, monkeypatch, "level1/01_ReLU", "--model", "m", "--base-url",
                                    dead_url, "--device", "cpu", "--max-retries", "0",
                                    "--out", str(tmp_path / "run"))
    assert code == 2
    assert f"cannot reach {dead_url}" in err and "Traceback" not in err


def test_unknown_model_is_one_clear_error(replay_server, tmp_path, capsys, monkeypatch):
    code, err = generate_in_process(capsys, monkeypatch, "level1/01_ReLU", "--model", "gpt-unknown",
                                    "--base-url", replay_server.base_url, "--device", "cpu",
                                    "--out", str(tmp_path / "run"))
    assert code == 2
    assert "unknown model 'gpt-unknown'" in err and "Traceback" not in err


def test_usage_errors(tmp_path, capsys, monkeypatch):
    code, err = generate_in_process(capsys, monkeypatch, "level1/01_ReLU", "--model", "m", "--device", "cpu",
                                    "--out", str(tmp_path / "run"))
    assert code == 2 and "OPENAI_API_KEY is not set" in err
    assert not (tmp_path / "run").exists(), "nothing is written before the endpoint settings are usable"
    code, err = generate_in_process(capsys, monkeypatch, "level1/01_ReLU", "--model", "m", "--turns", "0")
    assert code == 2 and "--turns must be at least 1" in err
