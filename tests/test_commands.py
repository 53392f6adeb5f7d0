"""CLI end to end, through a real subprocess."""

from __future__ import annotations

import subprocess
import sys

from kernelwright.problem import bundled_problem_ids, resolve_problem_path


def kernelwright(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelwright.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_help_lists_commands():
    result = kernelwright("--help")
    assert result.returncode == 0
    for command in ("problems", "prompt", "doctor"):
        assert command in result.stdout


def test_version():
    result = kernelwright("--version")
    assert result.returncode == 0 and "kernelwright" in result.stdout


def test_problems_lists_bundled_suite():
    result = kernelwright("problems", "--level", "1")
    assert result.returncode == 0
    assert bundled_problem_ids(1)[0] in result.stdout


def test_problems_show_prints_file():
    problem_id = bundled_problem_ids(2)[0]
    result = kernelwright("problems", "show", problem_id)
    assert result.returncode == 0
    assert result.stdout == resolve_problem_path(problem_id).read_text()


def test_prompt_contains_architecture_verbatim():
    problem_id = bundled_problem_ids(1)[0]
    result = kernelwright("prompt", problem_id)
    assert result.returncode == 0
    assert resolve_problem_path(problem_id).read_text().rstrip() in result.stdout
    assert "ModelNew" in result.stdout
    no_example = kernelwright("prompt", "--no-example", problem_id)
    assert "fused_fma" not in no_example.stdout and "fused_fma" in result.stdout


def test_doctor_runs_without_gpu():
    result = kernelwright("doctor", "--json")
    assert result.returncode == 0
    assert '"torch"' in result.stdout


def test_bad_problem_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module) pass\n")
    result = kernelwright("prompt", str(bad))
    assert result.returncode == 2
    assert "syntax error" in result.stderr and str(bad) in result.stderr.replace("\n", "")
    assert "Traceback" not in result.stderr
    verbose = kernelwright("--verbose", "prompt", str(bad))
    assert "Traceback" in verbose.stderr


def test_unknown_bundled_id_exits_2():
    result = kernelwright("problems", "show", "level9/99_Nothing")
    assert result.returncode == 2
    assert "no bundled problem" in result.stderr.replace("\n", " ")
