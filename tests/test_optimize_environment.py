"""`optimize` and the machine: an environment failure is retried once, then reported (exit code 4, no file
written), never baked into a fallback file; an identical run's result is reused from the result cache."""

from __future__ import annotations

import pytest

import kernelwright.compiler as compiler
from kernelwright import result_cache
from kernelwright.cli import main
from kernelwright.compiler import OptimizeOptions, OptimizeResult, optimize
from kernelwright.errors import EnvironmentFailure
from kernelwright.problem import load_shrunk


@pytest.fixture
def flaky(monkeypatch):
    """_Pipeline.run failing with an environment failure the first `failures` times."""
    calls = []

    def install(failures: int):
        def run(self):
            calls.append(self.unverified_ok)
            if len(calls) <= failures:
                raise EnvironmentFailure("out of GPU memory while other processes held 70 GiB", cause="oom")
            return OptimizeResult(source="# emitted\n", verification="test")
        monkeypatch.setattr(compiler._Pipeline, "run", run)
        monkeypatch.setattr(compiler, "RETRY_PAUSE_S", 0.0)
        return calls
    return install


def test_an_environment_failure_is_retried_once(flaky):
    calls = flaky(1)
    result = optimize(load_shrunk("level1/01_ReLU"), OptimizeOptions(allow_unverified=True))
    assert result.source == "# emitted\n"
    assert calls == [False, True]  # only the last try may emit an unverified file


def test_a_persistent_environment_failure_exits_4_and_writes_nothing(flaky, tmp_path, capsys):
    flaky(2)
    output = tmp_path / "new.py"
    assert main(["optimize", "level1/01_ReLU", "-o", str(output), "--fresh"]) == 4
    assert not output.exists()
    assert "out of GPU memory" in capsys.readouterr().err


def test_an_identical_run_is_served_from_the_result_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(compiler, "nvcc_path", lambda: None)  # the plan, not nvcc, is under test
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    assert main(["optimize", "level1/01_ReLU", "-o", str(first)]) == 0
    assert "capture" in capsys.readouterr().err
    assert main(["optimize", "level1/01_ReLU", "-o", str(second)]) == 0
    err = capsys.readouterr().err
    assert "result of an identical run" in err and "capture" not in err
    assert first.read_text() == second.read_text()
    assert main(["optimize", "level1/01_ReLU", "-o", str(tmp_path / "c.py"), "--fresh"]) == 0
    assert "capture" in capsys.readouterr().err


def test_the_cache_key_covers_source_options_device_and_code(monkeypatch):
    base = dict(source="x", constants={}, options={"layout": "auto"}, torch_version="2.11",
                device="cuda:H100")
    key = result_cache.cache_key(**base)
    for name, other in (("source", "y"), ("constants", {"n": 4}), ("options", {"layout": "nchw"}),
                        ("torch_version", "2.12"), ("device", "cpu")):
        assert result_cache.cache_key(**{**base, name: other}) != key, name
    monkeypatch.setattr(result_cache, "code_fingerprint", lambda: "another kernelwright")
    assert result_cache.cache_key(**base) != key


WARM = """
import sys
from kernelwright.cli import main
code = main(["optimize", "level1/01_ReLU", "-o", sys.argv[1]])
assert code == 0 and "torch" not in sys.modules, (code, "torch" in sys.modules)
print("WARM-OK")
"""


def test_the_warm_path_needs_neither_torch_nor_the_problem(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "KERNELWRIGHT_CACHE": str(tmp_path / "cache")}
    first = subprocess.run([sys.executable, "-m", "kernelwright.cli", "optimize", "level1/01_ReLU", "-o",
                            str(tmp_path / "a.py")], capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    warm = subprocess.run([sys.executable, "-c", WARM, str(tmp_path / "b.py")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert "WARM-OK" in warm.stdout, warm.stderr
    assert (tmp_path / "a.py").read_text() == (tmp_path / "b.py").read_text()


def test_the_warm_path_names_torch_as_the_compiler_does(tmp_path, monkeypatch):
    """The torch-free warm path reads torch/version.py: the package metadata may lack the local part
    ("2.11.0" for torch.__version__ "2.11.0+cu130" on an H100 machine), and every warm run then missed."""
    import importlib.metadata

    import torch

    assert result_cache.torch_version_without_import() == torch.__version__
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.0")   # metadata without "+..."
    assert result_cache.torch_version_without_import() == torch.__version__
