"""Emitted ModelNew files on the CPU: they import without kernelwright, keep Model's parameters, raise a
clear error in forward without CUDA, and (with each kernel replaced by the ATen execution of its group)
compute exactly what Model computes, buffer updates included."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from update_paths import UPDATES

from kernelwright.capture import capture
from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.registry import render_group
from kernelwright.emit import EmitInfo, emit_fallback, emit_module
from kernelwright.fuse.plan import plan_fusion
from kernelwright.problem import load_problem, load_shrunk
from kernelwright.rewrite import hoistable_nodes, rewrite_graph
from kernelwright.verify.execute import run_group_with_aten

PROBLEMS = ["level1/05_SiLU", "level1/28_BatchNorm2dTrain", "level3/01_MLP",
            "level3/08_SqueezeExcitationBlock"]


def emitted(problem_id: str | Path, rewrite: bool = False, replay: bool = False):
    """The emitted file (a bundled problem shrunk, or a problem file at full size); with `rewrite`, of the
    rewritten graph with its derived weights hoisted (as `optimize` does); with `replay`, its forward replays
    a CUDA graph (emit/replay.py)."""
    problem = load_shrunk(problem_id) if isinstance(problem_id, str) else load_problem(problem_id)
    graph = capture(problem)
    if rewrite:
        graph, _ = rewrite_graph(graph)
    plan = plan_fusion(graph, derived=hoistable_nodes(graph) if rewrite else ())
    kernels = [render_group(g) for g in plan.groups]
    info = EmitInfo(problem.id, verification="test", replay=replay)
    source = emit_module(problem.source, info, plan, assemble(kernels), called=kernels)
    return problem, plan, kernels, source


def load_source(source: str, tmp_path, name="new.py") -> types.ModuleType:
    path = tmp_path / name
    path.write_text(source)
    module = types.ModuleType("emitted")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def load_with_aten_kernels(source: str, plan, kernels, tmp_path) -> types.ModuleType:
    """The emitted module with each kernel replaced by the ATen execution of its group (CPU)."""
    module = load_source(source, tmp_path)
    if not kernels:
        return module
    assert module._kw_ext is None                      # no CUDA here: nothing was built at import
    cpu = torch.device("cpu")
    pairs = zip(plan.groups, kernels, strict=True)
    module._kw_ext = types.SimpleNamespace(**{
        k.name: (lambda inputs, g=g: run_group_with_aten(g, inputs, cpu)) for g, k in pairs})
    return module


@pytest.mark.parametrize("replay", [False, True], ids=["step", "replay"])
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_emitted_forward_computes_what_model_computes(problem_id, replay, tmp_path):
    """On the CPU a replay file runs its forward step by step (graphs need CUDA tensors): the same answer."""
    problem, plan, kernels, source = emitted(problem_id, replay=replay)
    assert ("_kw_replay(self, ModelNew._kw_forward" in source) == replay
    module = load_with_aten_kernels(source, plan, kernels, tmp_path)
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
    # torch and the standard library only (the problem's own imports aside)
    assert all(name == "torch" or name in sys.stdlib_module_names for name in imported), imported
    assert source.startswith("# kernelwright ")
    assert "verification: test" in source and "--allow-tf32 off" in source
    for kernel in kernels:
        assert f"# ---- kernel {kernel.name}, implementing:" in source
    # two builds: the model's kernels (torch's `load` of its units), and the runtime every file shares
    # (`load_inline`: built once, then cached)
    assert source.count("    return load(") == 1 and source.count("load_inline(") == 1
    assert source.count("_kw_build(") == 2
    assert "_KW_RUNTIME = r" in source and all(f"_KW_SPEC_{k.name} = " in source for k in kernels)
    assert "class ModelNew(Model):" in source


def test_repeated_blocks_share_one_kernel(tmp_path):
    """A network's repeated blocks plan identical groups; their kernel is defined once in the extension and
    called by each group (two definitions of one name would not compile)."""
    problem, plan, kernels, source = emitted("level3/15_FireModuleNetBatch1")
    names = [k.name for k in kernels]
    assert len(set(names)) < len(names)
    assert [k.name for k in assemble(kernels).kernels] == list(dict.fromkeys(names))
    for name in set(names):
        assert source.count(f"\n_KW_CUDA_{name} = ") == 1
        assert source.count(f'\n_KW_SPEC_{name} = ') == 1 and source.count(f'"{name}": _KW_SPEC_{name}') == 1
    assert "built but not called" not in source
    module = load_with_aten_kernels(source, plan, kernels, tmp_path)
    model, new = problem.build_model(3), problem.build_model(3, model_class=module.ModelNew)
    with torch.no_grad():
        torch.testing.assert_close(new(*problem.inputs(5)), model(*problem.inputs(5)), rtol=1e-5, atol=1e-5)


def test_two_kernels_with_one_name_and_different_sources_are_refused():
    kernels = emitted("level1/05_SiLU")[2]
    clash = replace(kernels[0], cuda=kernels[0].cuda + "// another kernel\n")
    with pytest.raises(ValueError, match=f"both named {kernels[0].name}"):
        assemble([kernels[0], clash])


@pytest.mark.parametrize("reason", ["capture failed: data-dependent branch",
                                    'the judge found it oom: CUDA error\nSearch for `x\' in "y"\n\nend'])
def test_fallback_keeps_model_forward(tmp_path, reason):
    problem = load_shrunk("level1/05_SiLU")
    source = emit_fallback(problem.source, EmitInfo(problem.id), reason)
    assert reason.splitlines()[0] in source
    module = load_source(source, tmp_path)
    model, new = problem.build_model(1), problem.build_model(1, model_class=module.ModelNew)
    x = torch.randn(3, 4)
    torch.testing.assert_close(new(x), model(x))


# ------------------------------------------------------------------------------------------ derived weights

DERIVED = ["level2/03_GemmDivideSumScale", "level2/11_GemmScaleResidualAdd", "level2/12_LinearMeanScale"]


def derived_setup(problem_id: str, tmp_path):
    """(problem, Model, ModelNew with the same weights) for a problem whose rewrite leaves derived weights."""
    problem, plan, kernels, source = emitted(problem_id, rewrite=True)
    assert plan.derived, "the rewrite left no derived weights: the test problem no longer exercises them"
    module = load_with_aten_kernels(source, plan, kernels, tmp_path)
    model = problem.build_model(3)
    new = problem.build_model(3, model_class=module.ModelNew)
    new.load_state_dict(model.state_dict())
    return problem, model, new


def assert_same(model, new, inputs, msg=""):
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), model(*inputs), rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{msg}: {m}")


@pytest.mark.parametrize("problem_id", DERIVED)
def test_derived_weights_stay_out_of_the_state_dict(problem_id, tmp_path):
    problem, model, new = derived_setup(problem_id, tmp_path)
    assert_same(model, new, problem.inputs(5))
    assert list(new.state_dict()) == list(model.state_dict())
    assert [n for n, _ in new.named_buffers()] == [n for n, _ in model.named_buffers()]
    assert set(new.__dict__) == set(model.__dict__)      # nothing cached beside the module's own state


@pytest.mark.parametrize("problem_id", DERIVED)
def test_derived_weights_follow_every_way_of_changing_a_parameter(problem_id, tmp_path):
    """Including writes through `param.data`, which no version counter sees (issue 18 #6)."""
    problem, model, new = derived_setup(problem_id, tmp_path)
    inputs = problem.inputs(5)
    assert_same(model, new, inputs, "before any update")
    for seed, (how, update) in enumerate(UPDATES.items(), start=1):
        update(model, 100 * seed)
        update(new, 100 * seed)
        assert_same(model, new, inputs, f"after {how}")
        assert_same(model, new, inputs, f"after {how}, second call")


def test_derived_weights_carry_gradients_when_autograd_records(tmp_path):
    problem, model, new = derived_setup("level2/11_GemmScaleResidualAdd", tmp_path)
    inputs = problem.inputs(5)
    for _ in range(2):          # two backward passes: nothing held from the first call is reused
        model.zero_grad()
        new.zero_grad()
        model(*inputs).square().sum().backward()
        new(*inputs).square().sum().backward()
        for (name, want), got in zip(model.named_parameters(), new.parameters(), strict=True):
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4, msg=name)


def test_a_plan_without_kernels_builds_nothing(tmp_path):
    _, plan, kernels, source = emitted("level2/03_GemmDivideSumScale", rewrite=True)
    assert not kernels and plan.derived
    assert "load_inline" not in source and "_kw_ext" not in source
    assert "derived weights: 1 value(s) from weight, computed by ATen on every call" in source


GPU_PROBLEM = Path(__file__).parent / "problems" / "weights_and_streams.py"


def test_the_gpu_problem_covers_every_kind_of_state():
    """What tests/emit/test_weights_and_streams_gpu.py relies on: kept 3xTF32 weight splits, derived weights
    read by a 3xTF32 GEMM, a split-row reduction, a softmax and a pointwise kernel."""
    _, plan, kernels, source = emitted(GPU_PROBLEM, rewrite=True)
    kept = [c for k in kernels for _, _, c in k.spec.operands if c is not None]   # parameter splits kept
    assert len(kept) == 2 and plan.derived
    families = [g.family for g in plan.groups]
    assert families.count("gemm") == 3 and "pointwise" in families
    reductions = [g.config[0] for g in plan.groups if g.family == "reduction"]
    assert sorted(spec.split for spec in reductions) == [False, True]


def test_outputs_are_distinct_tensors_that_alias_no_argument(tmp_path):
    """CSE merges `relu(x) * 2` computed twice into one node, and a model may return its argument: each
    output of the emitted forward is still its own tensor (the caller may write to it), with Model's
    values."""
    problem_file = tmp_path / "dup.py"
    problem_file.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                            "    def forward(self, x):\n"
                            "        return torch.relu(x) * 2, torch.relu(x) * 2, x\n\n\n"
                            "def get_inputs():\n    return [torch.randn(3, 5)]\n\n\n"
                            "def get_init_inputs():\n    return []\n")
    problem, plan, kernels, source = emitted(problem_file, rewrite=True)
    assert len({id(n) for n in plan.graph.outputs}) == 2      # the two products are one node
    module = load_with_aten_kernels(source, plan, kernels, tmp_path)
    model = problem.build_model(0)
    new = module.ModelNew(*problem.init_inputs())
    new.load_state_dict(model.state_dict())
    x = problem.inputs(0)[0]
    outputs = new(x)
    for got, want in zip(outputs, model(x), strict=True):
        torch.testing.assert_close(got, want)
    pointers = [t.data_ptr() for t in outputs] + [x.data_ptr()]
    assert len(set(pointers)) == len(pointers)


def test_buffer_updates_are_one_copy_per_dtype():
    """level3/08's two training BatchNorms update four float32 running statistics and two int64 counters:
    one `torch._foreach_copy_` each (a multi-tensor kernel, not six copies); the values are checked by
    `test_emitted_forward_computes_what_model_computes`."""
    _, _, _, source = emitted("level3/08_SqueezeExcitationBlock")
    assert source.count("torch._foreach_copy_(") == 2
    assert ".copy_(" not in source.replace("_foreach_copy_(", "")


SHIFT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        for name in {names}:
            self.register_buffer(name, torch.zeros(64))

    def forward(self, x):
        self.prev.copy_(self.cur)
        self.cur.copy_(x.mean(0))
        return torch.relu(x) + self.prev


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("names", [("prev", "cur"), ("cur", "prev")])
def test_a_buffer_update_reads_the_value_from_before_the_forward(names, tmp_path):
    """`prev.copy_(cur); cur.copy_(x)`: prev gets cur's old value whatever order the buffers are
    registered in (with `cur` first, the updates ran cur's first and prev read the new value)."""
    path = tmp_path / "shift.py"
    path.write_text(SHIFT.format(names=names))
    problem, plan, kernels, source = emitted(path)
    module = load_with_aten_kernels(source, plan, kernels, tmp_path)
    model, new = problem.build_model(3), problem.build_model(3, model_class=module.ModelNew)
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        for seed in (5, 6):
            torch.testing.assert_close(new(*problem.inputs(seed)), model(*problem.inputs(seed)))
    for name in names:
        torch.testing.assert_close(new.state_dict()[name], model.state_dict()[name], rtol=0, atol=0)
