"""`--compile-only`: the seed answers 002 and 004 compiled against torch's headers with nvcc, no GPU. These
are the only two compile tests of the CPU suite (each compiles a torch extension TU: about a minute); the
first also proves that the compile steps reach a watching parent (the spinner of `eval`). A candidate that
builds nothing when imported is reported as such."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from kernelwright.cli import main
from kernelwright.environment import nvcc_path
from kernelwright.judge import JudgeOptions, evaluate
from kernelwright.judge.progress import report_step, watch_steps

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc (compile-only builds CUDA sources)")


@needs_nvcc
def test_seed_002_softmax_const_pointer_is_a_build_error(fixtures_dir, build_cache):
    answer = next((fixtures_dir / "seeds").glob("002_*.txt"))
    steps = []
    with watch_steps(steps.append):
        verdict = evaluate(fixtures_dir / "seed_problems" / "softmax.py", answer,
                           JudgeOptions(device="cpu", compile_only=True, build_dir=str(build_cache)))
    # a spinner shows the latest step: "extension NAME: building" may be replaced before a poll sees it
    assert any(step.startswith("extension ") and "nvcc cuda.cu" in step for step in steps), steps
    assert verdict["status"] == "build_error"
    first = verdict["detail"].splitlines()[0]
    assert first.startswith("cuda.cu(") and "const float *" in first  # file/line, then the real message
    assert "float* row = &logits" in verdict["detail"]
    assert verdict["build_seconds"] > 0 and verdict["trials"] == []


@needs_nvcc
def test_seed_004_missing_declaration_via_cli(fixtures_dir, build_cache, monkeypatch, capsys):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(build_cache))
    answer = next((fixtures_dir / "seeds").glob("004_*.txt"))
    code = main(["eval", str(fixtures_dir / "seed_problems" / "leaky_relu.py"), str(answer),
                 "--device", "cpu", "--compile-only", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 1 and verdict["status"] == "build_error"
    assert verdict["detail"].startswith("main.cpp:") and "was not declared in this scope" in verdict["detail"]
    assert verdict["source"] == "last fenced code block defining ModelNew"


def test_a_candidate_that_builds_nothing_says_so(tmp_path, capsys):
    """An emitted-style file builds its extension only when a GPU is present: under --compile-only on a CPU
    machine nothing is compiled, and the verdict says so instead of a bare "0 extension(s) compiled"."""
    problem = tmp_path / "relu.py"
    problem.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                       "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\n"
                       "def get_init_inputs():\n    return []\n")
    candidate = tmp_path / "relu_new.py"
    candidate.write_text(problem.read_text() + "\n_ext = None\nif torch.cuda.is_available():\n"
                         "    from torch.utils.cpp_extension import load_inline\n"
                         "    _ext = load_inline(name='relu', cpp_sources=[''],\n"
                         "                       cuda_sources=['__global__ void k() {}'])\n"
                         "\nclass ModelNew(Model):\n    ...\n")
    assert main(["eval", str(problem), str(candidate), "--device", "cpu", "--compile-only", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "builds" and verdict["detail"].startswith("nothing was compiled: ")


def test_steps_of_a_child_process_reach_the_watcher():
    steps = []

    def seen(step: str) -> bool:
        deadline = time.monotonic() + 10
        while step not in steps and time.monotonic() < deadline:
            time.sleep(0.05)
        return step in steps

    with watch_steps(steps.append):
        subprocess.run([sys.executable, "-c", "from kernelwright.judge.progress import report_step; "
                        "report_step('extension kw_x: nvcc cuda.cu, c++ main.cpp')"], check=True)
        assert seen("extension kw_x: nvcc cuda.cu, c++ main.cpp")
        report_step("extension kw_x: c++ main.cpp")
        assert seen("extension kw_x: c++ main.cpp")
    report_step("nobody watches: nothing is written")
