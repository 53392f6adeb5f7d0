"""The loop with the recorded seed answers replayed by the loopback server and the real judge: seed 000
answers gelu_tanh.py, 002 softmax.py, 004 leaky_relu.py. The whole seed file (prose, several code blocks)
is the model's answer, so the judge's extraction is exercised on real LLM output.

CPU: seed 002 compiled only (one real nvcc build), its compiler error fed back. GPU: 000 accepted as
correct and faster than eager; 002 and 004 rejected with their compiler errors fed back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright.judge import JudgeOptions, extract_code
from kernelwright.llm.client import ChatClient, RetryPolicy
from kernelwright.llm.judging import JudgeSessions
from kernelwright.llm.loop import GenerationLoop, LoopSettings, ProblemTask
from kernelwright.llm.records import RunRecords

GIVE_UP = "I cannot fix this."  # the second answer: no code, so the second turn costs no build

# problem file -> (seed answer, a marker from the problem's docstring that the prompt quotes)
SEEDS = {
    "gelu_tanh": ("000_", "tanh-approximated GELU"),
    "softmax": ("002_", "Softmax over very long rows"),
    "leaky_relu": ("004_", "LeakyReLU with a configurable slope"),
}


def seed_answer(shared: Path, prefix: str) -> str:
    return next((shared / "seeds").glob(f"{prefix}*.txt")).read_text()


def script_seed(server, shared: Path, name: str) -> None:
    prefix, marker = SEEDS[name]
    server.answers = {marker: [seed_answer(shared, prefix), GIVE_UP]}


def test_seed_002_build_error_is_fed_back(replay_server, fixtures_dir, tmp_path):
    script_seed(replay_server, fixtures_dir, "softmax")
    problem = fixtures_dir / "seed_problems" / "softmax.py"
    client = ChatClient(model=replay_server.model, base_url=replay_server.base_url, api_key="unused",
                        retry=RetryPolicy(retries=0))
    with JudgeSessions(JudgeOptions(device="cpu", compile_only=True)) as judge:
        loop = GenerationLoop(client, judge, extract_code, RunRecords(tmp_path),
                              LoopSettings(turns=2, require_speedup=False))
        summary = loop.run([ProblemTask(id="softmax", path=problem, source=problem.read_text())])

    assert len(replay_server.requests) == 2
    first = json.loads((tmp_path / "records.jsonl").read_text().splitlines()[1])
    assert first["verdict"]["status"] == "build_error"
    assert "ModelNew" in (tmp_path / first["code_path"]).read_text()
    feedback = replay_server.requests[1]["messages"][-1]["content"]
    assert feedback.startswith("Your code did not build") and "const float" in feedback
    assert summary["problems"]["softmax"]["best"] is None


# One problem per test: each build of a seed answer (torch headers in the .cu) takes about a minute.
@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SEEDS))
def test_seed_answer_judged_on_the_gpu(name, replay_server, fixtures_dir, tmp_path):
    script_seed(replay_server, fixtures_dir, name)
    out = tmp_path / "run"
    problem = fixtures_dir / "seed_problems" / f"{name}.py"
    command = [sys.executable, "-m", "kernelwright.cli", "generate", str(problem), "--turns", "2",
               "--model", replay_server.model, "--base-url", replay_server.base_url, "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    print(result.stdout[-4000:], result.stderr[-4000:])
    summary = json.loads((out / "summary.json").read_text())["problems"][name]
    requests = replay_server.requests_for(SEEDS[name][1])

    if name == "gelu_tanh":
        assert result.returncode == 0
        assert len(requests) == 1, "000 is correct and faster at once: no second turn"
        assert summary["successful_samples"] == [1] and summary["best"]["speedup_vs_eager"] > 1.0
        assert (out / "candidates" / "gelu_tanh.py").is_file()
        return
    # 002: a const pointer assigned to a non-const one; 004: the C++ declaration of the binding is missing.
    compiler_says = {"softmax": "const float", "leaky_relu": "leaky_relu_cuda"}[name]
    assert result.returncode == 1, "no correct candidate"
    assert len(requests) == 2
    feedback = requests[1]["messages"][-1]["content"]
    assert feedback.startswith("Your code did not build") and compiler_says in feedback, feedback
    assert summary["verdicts"] == {"build_error": 1, "rejected": 1} and summary["best"] is None
