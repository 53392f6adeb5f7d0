"""`kernelwright optimize` on the CPU: emits, compile-checks the CUDA part, says verification was skipped;
falls back to Model's forward when capture fails."""

from __future__ import annotations

import types

import torch

from kernelwright.cli import main
from kernelwright.compiler import optimize
from kernelwright.environment import nvcc_path
from kernelwright.problem import load_problem, load_shrunk

UNCAPTURABLE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:          # data-dependent control flow: torch.export cannot trace it
            return torch.relu(x)
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def test_optimize_cli_without_gpu(tmp_path, capsys):
    output = tmp_path / "relu_new.py"
    assert main(["optimize", "level1/01_ReLU", "-o", str(output), "--explain"]) == 0
    captured = capsys.readouterr()
    assert "verification skipped" in captured.err and "no CUDA GPU" in captured.err
    assert ("nvcc check" in captured.err) == (nvcc_path() is not None)
    assert "fusion plan" in captured.out and "kernel[pointwise]" in captured.out
    source = output.read_text()
    assert "NOT verified" in source and "class ModelNew(Model):" in source


def test_capture_failure_gives_the_whole_model_fallback(tmp_path):
    path = tmp_path / "branchy.py"
    path.write_text(UNCAPTURABLE)
    problem = load_problem(path)
    stages = []
    result = optimize(problem, on_stage=lambda stage, event, detail, seconds: stages.append((stage, event)))
    assert result.fallback_reason.startswith("capture failed")
    assert stages == [("capture", "start"), ("capture", "done")]
    module = types.ModuleType("emitted")
    exec(compile(result.source, "branchy_new.py", "exec"), module.__dict__)
    x = torch.randn(4, 8)
    torch.testing.assert_close(module.ModelNew()(x), module.Model()(x))
    assert "fallback: ModelNew keeps Model's forward (capture failed" in result.source


def test_output_may_not_overwrite_the_problem(tmp_path):
    path = tmp_path / "p.py"
    path.write_text(UNCAPTURABLE)
    assert main(["optimize", str(path), "-o", str(path)]) == 2


def test_derived_weights_alone_are_worth_emitting(tmp_path):
    """level2/03 rewrites to a GEMV on a reduced weight: no kernel is left per call, yet the file is
    emitted (the reduced weight is computed once), runs without a GPU and follows weight changes."""
    problem = load_shrunk("level2/03_GemmDivideSumScale")
    result = optimize(problem)
    assert result.fallback_reason is None and not result.plan.groups and result.plan.derived
    assert "derived weights: 1 value(s)" in result.source and "load_inline" not in result.source
    module = types.ModuleType("emitted")
    exec(compile(result.source, str(tmp_path / "new.py"), "exec"), module.__dict__)
    model = problem.build_model(3)
    new = problem.build_model(3, model_class=module.ModelNew)
    inputs = problem.inputs(5)
    for seed in (3, 4):
        state = problem.build_model(seed).state_dict()
        model.load_state_dict(state)
        new.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(new(*inputs), model(*inputs), rtol=1e-4, atol=1e-4)
    assert list(new.state_dict()) == list(model.state_dict())
