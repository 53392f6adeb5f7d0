"""`kernelwright optimize` on the CPU for the bundled pooling problems (level1/60-63): each pool becomes a
pool-family kernel, the CUDA part passes the nvcc check, and the emitted file imports and (each kernel
replaced by the ATen execution of its group) computes what Model computes."""

from __future__ import annotations

import types

import pytest
import torch

from kernelwright.compiler import optimize
from kernelwright.environment import nvcc_path
from kernelwright.problem import load_shrunk
from kernelwright.verify.execute import run_group_with_aten

POOL_PROBLEMS = ["level1/60_MaxPool2d", "level1/61_AvgPool2d", "level1/62_AdaptiveAvgPool2d",
                 "level1/63_MaxPool1d"]


@pytest.mark.parametrize("problem_id", POOL_PROBLEMS)
def test_optimize_emits_a_pool_kernel(problem_id, tmp_path):
    problem = load_shrunk(problem_id)
    result = optimize(problem)
    assert result.fallback_reason is None, result.fallback_reason
    assert [g.family for g in result.plan.groups] == ["pool"]
    assert not result.dropped
    if nvcc_path() is not None:
        assert result.compile_check is not None and result.compile_check.ok
    path = tmp_path / "new.py"
    path.write_text(result.source)
    module = types.ModuleType("emitted")
    module.__file__ = str(path)
    exec(compile(result.source, str(path), "exec"), module.__dict__)
    assert module._kw_ext is None          # no CUDA here: nothing was built at import
    (group,) = result.plan.groups
    (name,) = [line.split("# ---- kernel ")[1].split(",")[0] for line in result.source.splitlines()
               if line.startswith("# ---- kernel ")]
    cpu = torch.device("cpu")
    module._kw_ext = types.SimpleNamespace(**{name: lambda inputs: run_group_with_aten(group, inputs, cpu)})
    model = problem.build_model(3)
    new = problem.build_model(3, model_class=module.ModelNew)
    inputs = problem.inputs(5)
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), model(*inputs))
