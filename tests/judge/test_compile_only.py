"""`--compile-only`: the seed answers 002 and 004 compiled against torch's headers with nvcc, no GPU. These
are the only two compile tests of the CPU suite (each compiles a torch extension TU: about a minute)."""

from __future__ import annotations

import json

import pytest

from kernelwright.cli import main
from kernelwright.environment import nvcc_path
from kernelwright.judge import JudgeOptions, evaluate

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc (compile-only builds CUDA sources)")


@needs_nvcc
def test_seed_002_softmax_const_pointer_is_a_build_error(shared_dir, build_cache):
    answer = next((shared_dir / "seeds").glob("002_*.txt"))
    verdict = evaluate(shared_dir / "seed_problems" / "softmax.py", answer,
                       JudgeOptions(device="cpu", compile_only=True, build_dir=str(build_cache)))
    assert verdict["status"] == "build_error"
    first = verdict["detail"].splitlines()[0]
    assert first.startswith("cuda.cu(") and "const float *" in first  # file/line, then the real message
    assert "float* row = &logits" in verdict["detail"]
    assert verdict["build_seconds"] > 0 and verdict["trials"] == []


@needs_nvcc
def test_seed_004_missing_declaration_via_cli(shared_dir, build_cache, monkeypatch, capsys):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(build_cache))
    answer = next((shared_dir / "seeds").glob("004_*.txt"))
    code = main(["eval", str(shared_dir / "seed_problems" / "leaky_relu.py"), str(answer),
                 "--device", "cpu", "--compile-only", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 1 and verdict["status"] == "build_error"
    assert verdict["detail"].startswith("main.cpp:") and "was not declared in this scope" in verdict["detail"]
    assert verdict["source"] == "last fenced code block defining ModelNew"
