"""Emitted ModelNew files on the CPU: they import without kernelwright, keep Model's parameters, raise a
clear error in forward without CUDA, and (with each kernel replaced by the ATen execution of its group)
compute exactly what Model computes, buffer updates included."""

from __future__ import annotations

import ast
import subprocess
import sys
import types

import pytest
import torch

from kernelwright.capture import capture
from kernelwright.codegen.binding import assemble
from kernelwright.codegen.registry import render_group
from kernelwright.emit import EmitInfo, emit_fallback, emit_module
from kernelwright.fuse.plan import plan_fusion, run_group_with_aten
from kernelwright.problem import load_shrunk

PROBLEMS = ["level1/05_SiLU", "level1/28_BatchNorm2dTrain", "level3/01_MLP",
            "level3/08_SqueezeExcitationBlock"]


def emitted(problem_id: str):
    problem = load_shrunk(problem_id)
    plan = plan_fusion(capture(problem))
    kernels = [render_group(g) for g in plan.groups]
    source = emit_module(problem.source, EmitInfo(problem.id, verification="test"), plan, assemble(kernels))
    return problem, plan, kernels, source


def load_source(source: str, tmp_path, name="new.py") -> types.ModuleType:
    path = tmp_path / name
    path.write_text(source)
    module = types.ModuleType("emitted")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_emitted_forward_computes_what_model_computes(problem_id, tmp_path):
    problem, plan, kernels, source = emitted(problem_id)
    module = load_source(source, tmp_path)
    assert module._kw_ext is None                      # no CUDA here: nothing was built at import
    cpu = torch.device("cpu")
    pairs = zip(plan.groups, kernels, strict=True)
    module._kw_ext = types.SimpleNamespace(**{
        k.name: (lambda inputs, g=g: run_group_with_aten(g, inputs, cpu)) for g, k in pairs})
    model = problem.build_model(3)
    new = problem.build_model(3, model_class=module.ModelNew)
    assert [(k, v.shape) for k, v in new.state_dict().items()] == \
        [(k, v.shape) for k, v in model.state_dict().items()]
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        want, got = model(*problem.inputs(5)), new(*problem.inputs(5))
    want, got = (want, got) if isinstance(want, (tuple, list)) else ([want], [got])
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    for (name, w), (_, g) in zip(model.state_dict().items(), new.state_dict().items(), strict=True):
        torch.testing.assert_close(g, w, msg=f"buffer {name} after forward")


def test_file_imports_without_kernelwright_and_forward_needs_a_gpu(tmp_path):
    problem, _, kernels, source = emitted("level1/05_SiLU")
    path = tmp_path / "new.py"
    path.write_text(source)
    script = (
        "import sys\nsys.modules['kernelwright'] = None\n"   # any `import kernelwright` now fails
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('new', {str(path)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "model = m.ModelNew(*m.get_init_inputs())\n"
        "try:\n    model(torch.randn(2, 2))\nexcept RuntimeError as e:\n    print('RAISED', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "RAISED" in done.stdout and "needs a CUDA GPU" in done.stdout


def test_file_is_readable_and_self_describing():
    _, plan, kernels, source = emitted("level3/08_SqueezeExcitationBlock")
    tree = ast.parse(source)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"torch", "importlib", "os", "time"}
    assert source.startswith("# kernelwright ")
    assert "verification: test" in source and "--allow-tf32 off" in source
    for kernel in kernels:
        assert f"# ---- kernel {kernel.name}, implementing:" in source
    assert source.count("load_inline(") == 1
    assert "class ModelNew(Model):" in source


def test_fallback_keeps_model_forward(tmp_path):
    problem = load_shrunk("level1/05_SiLU")
    source = emit_fallback(problem.source, EmitInfo(problem.id), "capture failed: data-dependent branch")
    assert "capture failed: data-dependent branch" in source
    module = load_source(source, tmp_path)
    model, new = problem.build_model(1), problem.build_model(1, model_class=module.ModelNew)
    x = torch.randn(3, 4)
    torch.testing.assert_close(new(x), model(x))
