"""CLI end to end, through a real subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright.problem_files import bundled_problem_ids, resolve_problem_path

REPO = Path(__file__).resolve().parent.parent


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
    # where the shared runtime extension is, and whether the first build has made it yet
    runtime = json.loads(result.stdout)["runtime_extension"]
    assert runtime["path"].endswith(".so") and "/builds/kw_runtime_" in runtime["path"]
    assert runtime["built"] == Path(runtime["path"]).is_file()


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


# ------------------------------------------------------------------------------ a newcomer's first hour


def test_version_and_help_import_neither_torch_nor_rich():
    """`kernelwright --version` / `--help` answer in a fraction of a second: the parser is built without
    torch (every command imports what it needs inside its `run`)."""
    probe = ("import sys; from kernelwright.cli import main\n"
             "for argv in (['--version'], ['--help']):\n"
             "    try:\n"
             "        main(argv)\n"
             "    except SystemExit:\n"
             "        None\n"
             "print(sorted(m for m in ('torch', 'rich', 'numpy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_problems_and_prompt_do_not_import_torch():
    probe = ("import sys; from kernelwright.cli import main\n"
             "assert main(['problems']) == 0 and main(['problems', '--level', '2']) == 0\n"
             "assert main(['prompt', 'level1/01_ReLU']) == 0\n"
             "print('torch' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "False"


def test_problems_unknown_level_lists_the_levels():
    result = kernelwright("problems", "--level", "9")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --level 9: no such level; the bundled levels are 1, 2, 3"


def test_problems_table_is_readable_at_80_columns():
    result = subprocess.run([sys.executable, "-m", "kernelwright.cli", "problems"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    rows = [line.split() for line in lines if line.strip().startswith("level")]
    assert len(rows) == len(bundled_problem_ids())
    # every id, shape and number whole on its row: id, category, one shape, GFLOP, MB
    shapes = {row[0]: row[2] for row in rows}
    assert shapes["level1/01_ReLU"] == "16384x12288"
    assert all(re.fullmatch(r"(\d+x)*\d+|scalar", row[2]) and len(row) == 5 for row in rows)


def test_prompt_reads_the_problem_without_executing_it(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text(resolve_problem_path("level1/01_ReLU").read_text() + "\nraise SystemExit('ran')\n")
    result = kernelwright("prompt", str(problem))
    assert result.returncode == 0 and "class Model" in result.stdout
    missing = tmp_path / "missing.py"
    missing.write_text("import torch\nclass Model(torch.nn.Module):\n    ...\n")
    result = kernelwright("prompt", str(missing))
    assert result.returncode == 2 and "missing get_inputs, get_init_inputs" in result.stderr


def test_doctor_and_readme_give_the_same_cutlass_command():
    from kernelwright.environment import CUTLASS_INSTALL

    assert CUTLASS_INSTALL == "pip install --no-deps nvidia-cutlass"
    assert CUTLASS_INSTALL in (REPO / "README.md").read_text()
    result = subprocess.run([sys.executable, "-m", "kernelwright.cli", "doctor"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "CUTLASS_PATH": "/nonexistent",
                                                          "COLUMNS": "200"})
    assert result.returncode == 0
    if "not found" in next(line for line in result.stdout.splitlines() if "CUTLASS" in line):
        assert CUTLASS_INSTALL in result.stdout


def test_binary_problem_file_is_a_one_line_error(tmp_path):
    binary = tmp_path / "model.py"
    binary.write_bytes(bytes(range(128, 256)) * 8)
    for command in (["capture", str(binary)], ["eval", str(binary), str(binary), "--device", "cpu"],
                    ["prompt", str(binary)], ["optimize", str(binary), "-o", str(tmp_path / "new.py")]):
        result = kernelwright(*command)
        assert result.returncode == 2, (command, result.stderr)
        expected = f"error: {binary}: not a Python source file (not UTF-8 text: byte 0 is 0x80)"
        assert result.stderr.strip() == expected, command


def test_get_inputs_returning_a_string_names_the_item(tmp_path):
    problem = tmp_path / "hello.py"
    problem.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                       "        return x\n\ndef get_inputs():\n    return ['hello']\n\n"
                       "def get_init_inputs():\n    return []\n")
    for command in (["capture", str(problem)], ["optimize", str(problem), "-o", str(tmp_path / "new.py")]):
        result = kernelwright(*command)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1] == (
            f"error: {problem}: get_inputs() item 0 is a str; expected tensors or numbers")
    assert not (tmp_path / "new.py").exists()


def test_capture_json_into_a_closed_pipe_exits_quietly():
    # `true` has exited long before the capture writes (seconds later): the write meets a closed pipe.
    shell = (f"{sys.executable} -m kernelwright.cli capture level1/23_Softmax --shrink --json | true; "
             "echo \"status=${PIPESTATUS[0]}\"")
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=300)
    assert result.stdout.splitlines() == ["status=141"]
    assert result.stderr == ""


def test_output_dir_check_leaves_nothing_behind(tmp_path):
    """check_output_dir proves a missing folder can be made without making it (a later usage error must not
    leave empty folders, and a concurrent run making the same folder must not see it vanish); one that
    cannot be made is a usage error."""
    from kernelwright.errors import UsageError
    from kernelwright.output_paths import check_output_dir

    target = tmp_path / "a" / "b" / "c"
    assert check_output_dir(target) == target and list(tmp_path.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError):
        check_output_dir(blocker / "sub")


def test_capture_of_a_forward_that_fails_on_its_inputs_is_one_line(tmp_path):
    """An op that fails on the fake tensors (a shape error in forward): torch logs the op's traceback at
    ERROR; the user sees only the one-line error."""
    problem = tmp_path / "shape_bug.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       "    def __init__(self):\n        super().__init__()\n"
                       "        self.fc = nn.Linear(8, 8)\n\n"
                       "    def forward(self, x):\n        return self.fc(x)\n\n\n"
                       "def get_inputs():\n    return [torch.randn(4, 9)]\n\n\n"
                       "def get_init_inputs():\n    return []\n")
    result = kernelwright("capture", str(problem))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "must have same reduction dim" in result.stderr


def test_conv_kernels_are_on_unless_turned_off(monkeypatch):
    from kernelwright.cli import build_parser
    from kernelwright.optimize_options import OptimizeOptions

    assert OptimizeOptions().conv_kernels
    monkeypatch.delenv("KERNELWRIGHT_CONV_KERNELS", raising=False)
    assert build_parser().parse_args(["optimize", "p.py"]).conv_kernels
    assert not build_parser().parse_args(["optimize", "p.py", "--no-conv-kernels"]).conv_kernels
    monkeypatch.setenv("KERNELWRIGHT_CONV_KERNELS", "0")       # e.g. for a bench's optimize subprocesses
    assert not build_parser().parse_args(["optimize", "p.py"]).conv_kernels
    assert build_parser().parse_args(["optimize", "p.py", "--conv-kernels"]).conv_kernels
