"""Emitted files and KernelBench's static checker (reimplemented in judge/kernelbench.py): every emitted file
of the bundled suite that has kernels passes its strict checks, a file without one says so in its first
lines, and the copied problem is rewritten for the checker without changing the Model it defines."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import kernelwright.compiler as compiler
from kernelwright.cli import main
from kernelwright.emit.kernelbench import checker_safe_source
from kernelwright.judge.kernelbench import FORBIDDEN, kernelbench_static, strip_comments
from kernelwright.problem import load_problem
from kernelwright.problem_files import bundled_problem_ids, resolve_problem_path

BUNDLED = bundled_problem_ids()


def test_published_rules_read_the_file_as_the_checker_does():
    assert strip_comments("x = 1  # pass\n#include <a>\nint y; // try: it\n") == "x = 1  \n\nint y; "
    source = "def f():\n    try:\n        g()\n    except ValueError:\n        pass\n"
    assert {f["check"] for f in kernelbench_static(source)["strict"]} == {
        "try", "except", "pass", "global_kernel", "extension"}
    assert {f["check"] for f in kernelbench_static("except:\n")["strict"]} >= {"bare_except"}
    cuda = ('src = r"""\n__global__ void k() {}\nvoid f() { try { g(); } catch (...) {} }\n"""\n'
            "m = load_inline(name='x')\n")
    assert kernelbench_static(cuda)["passes_strict"]
    for hack in ("import threading\n", "time.perf_counter = lambda: 0\n",
                 "class Lazy(torch.Tensor):\n    ...\n"):
        assert not kernelbench_static(cuda + hack)["passes_strict"], hack


def test_docstrings_and_pass_statements_are_rewritten_nothing_else():
    source = ('"""Module: a single pass, except the last."""\n'
              "class Model:\n"
              '    """Try: the forward pass."""\n'
              "    def forward(self, x):  # pass through\n"
              '        """Forward pass of the model."""\n'
              "        if x is None:\n"
              "            pass\n"
              '        return x, "pass"\n'
              "class Empty: pass\n")
    safe = checker_safe_source(source)
    assert safe == ('"""Module: a single run, but the last."""\n'
                    "class Model:\n"
                    '    """Try: the forward run."""\n'
                    "    def forward(self, x):  # pass through\n"
                    '        """Forward run of the model."""\n'
                    "        if x is None:\n"
                    "            ...\n"
                    '        return x, "pass"\n'
                    "class Empty: ...\n")


KERNELBENCH_STYLE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs a matrix multiplication, a pass of GELU and a residual add.
    """
    def __init__(self, in_features, out_features):
        """
        Initializes the model. Every argument is used, except none.
        """
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        if out_features < 0:
            pass  # never
        self.register_buffer("shift", torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Forward pass of the model.

        Args:
            x (torch.Tensor): input of shape (batch_size, in_features); try: any values.
        """
        return torch.nn.functional.gelu(self.linear(x)) + self.shift


batch_size = 16
in_features = 32
out_features = 24


def get_inputs():
    """Inputs for a forward pass."""
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


def test_rewritten_problem_defines_the_same_model(tmp_path):
    """A problem in KernelBench's own style (docstrings that say "pass", a `pass` statement): the copy is
    accepted by the strict rules and defines the same Model: same parameters and buffers (names, values),
    same outputs on random inputs."""
    original, copy = tmp_path / "original.py", tmp_path / "copy.py"
    original.write_text(KERNELBENCH_STYLE)
    copy.write_text(checker_safe_source(KERNELBENCH_STYLE))
    forbidden = {rule.check for rule in FORBIDDEN}
    assert {f["check"] for f in kernelbench_static(original.read_text())["strict"]} & forbidden == {
        "pass", "try", "except"}
    assert not {f["check"] for f in kernelbench_static(copy.read_text())["strict"]} & forbidden
    before, after = load_problem(original), load_problem(copy)
    model, rewritten = before.build_model(3), after.build_model(3)
    expected, got = model.state_dict(), rewritten.state_dict()
    assert list(got) == list(expected)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)
    for seed in (0, 1):
        with torch.no_grad():
            torch.testing.assert_close(rewritten(*after.inputs(seed)), model(*before.inputs(seed)),
                                       rtol=0, atol=0)


def test_bundled_problems_are_copied_unchanged_or_checker_safe():
    for problem_id in BUNDLED:
        source = resolve_problem_path(problem_id).read_text()
        safe = checker_safe_source(source)
        assert safe == source or not {f["check"] for f in kernelbench_static(safe)["strict"]} & {
            rule.check for rule in FORBIDDEN}, problem_id


@pytest.fixture(scope="module")
def emitted_suite(tmp_path_factory) -> dict:
    """{problem id: emitted file} for the whole bundled suite, as `optimize` writes it on a CPU machine
    (nvcc's compile check left out: it decides which kernels stay, not what the text looks like)."""
    folder = tmp_path_factory.mktemp("emitted")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(compiler, "nvcc_path", lambda: None)
    files = {}
    try:
        for problem_id in BUNDLED:
            path = folder / f"{problem_id.replace('/', '__')}_new.py"
            path.write_text(compiler.optimize(load_problem(problem_id)).source)
            files[problem_id] = path
    finally:
        monkeypatch.undo()
    yield files
    shutil.rmtree(folder, ignore_errors=True)


def test_every_emitted_file_passes_kernelbench_static_or_says_it_has_no_kernel(emitted_suite, capsys):
    with_kernels = 0
    for problem_id, path in emitted_suite.items():
        source = path.read_text()
        code = main(["eval", problem_id, str(path), "--kernelbench-static", "--json"])
        report = json.loads(capsys.readouterr().out)
        assert report["kernelbench"] == kernelbench_static(source)
        if "load_inline" in strip_comments(source):
            with_kernels += 1
            assert code == 0 and report["kernelbench"]["passes_strict"], (problem_id, report["kernelbench"])
        else:
            assert code == 1
            assert source.splitlines()[1].startswith("# no custom kernel in this file"), problem_id
    assert with_kernels > len(BUNDLED) // 2


def test_kernelbench_static_table_names_each_finding(emitted_suite, capsys):
    fallback = next(path for path in emitted_suite.values() if "load_inline" not in path.read_text())
    assert main(["eval", "level1/01_ReLU", str(fallback), "--kernelbench-static"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "rejected" in out and "global_kernel" in out and "extension" in out
