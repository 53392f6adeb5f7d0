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

from kernelwright.llm.client import ChatClient, RetryPolicy
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


def script_seeds(server, shared: Path, problems: list[str]) -> None:
    server.answers = {SEEDS[p][1]: [seed_answer(shared, SEEDS[p][0]), GIVE_UP] for p in problems}


def test_seed_002_build_error_is_fed_back(replay_server, shared_dir, tmp_path):
    judge_module = pytest.importorskip("kernelwright.judge")
    if not hasattr(judge_module, "evaluate"):
        pytest.skip("the judge is not built yet")
    options = judge_module.JudgeOptions(device="cpu", compile_only=True)
    script_seeds(replay_server, shared_dir, ["softmax"])
    problem = shared_dir / "seed_problems" / "softmax.py"
    client = ChatClient(model=replay_server.model, base_url=replay_server.base_url, api_key="unused",
                        retry=RetryPolicy(retries=0))
    judge = lambda p, c: judge_module.evaluate(p, c, options)
    loop = GenerationLoop(client, judge, judge_module.extract_code, RunRecords(tmp_path),
                          LoopSettings(turns=2, require_speedup=False))
    summary = loop.run([ProblemTask(id="softmax", path=problem, source=problem.read_text())])

    assert len(replay_server.requests) == 2
    first = json.loads((tmp_path / "records.jsonl").read_text().splitlines()[1])
    assert first["verdict"]["status"] == "build_error"
    assert "ModelNew" in (tmp_path / first["code_path"]).read_text()
    feedback = replay_server.requests[1]["messages"][-1]["content"]
    assert feedback.startswith("Your code did not build") and "const float" in feedback
    assert summary["problems"]["softmax"]["best"] is None


@pytest.mark.gpu
def test_seed_answers_judged_on_the_gpu(replay_server, shared_dir, tmp_path):
    script_seeds(replay_server, shared_dir, list(SEEDS))
    problems = [str(shared_dir / "seed_problems" / f"{name}.py") for name in SEEDS]
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "kernelwright.cli", "generate", *problems, "--model", replay_server.model,
         "--base-url", replay_server.base_url, "--turns", "2", "--parallel", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=1800)
    print(result.stdout[-4000:], result.stderr[-4000:])
    assert result.returncode == 1, "softmax and leaky_relu stay unsolved"  # 0 only if every problem is solved

    summary = json.loads((out / "summary.json").read_text())["problems"]
    assert len(replay_server.requests_for(SEEDS["gelu_tanh"][1])) == 1, "000 succeeds at once: no second turn"
    assert summary["gelu_tanh"]["successful_samples"] == [1]
    assert summary["gelu_tanh"]["best"]["speedup_vs_eager"] > 1.0
    assert (out / "candidates" / "gelu_tanh.py").is_file()

    # 002: a const pointer assigned to a non-const one; 004: the C++ declaration of the binding is missing.
    expected = {"softmax": "const float", "leaky_relu": "leaky_relu_cuda"}
    for name, compiler_says in expected.items():
        requests = replay_server.requests_for(SEEDS[name][1])
        assert len(requests) == 2
        feedback = requests[1]["messages"][-1]["content"]
        assert feedback.startswith("Your code did not build") and compiler_says in feedback, feedback
        assert summary[name]["verdicts"] == {"build_error": 1, "rejected": 1}
        assert summary[name]["best"] is None
