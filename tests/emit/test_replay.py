"""CUDA-graph replay in emitted files (emit/replay.py), the parts a CPU can check: what the file holds, that
KernelBench's static checker still passes it, which forwards the compiler keeps off replay, and that the
runtime's guard sends every call a graph could get wrong down the step-by-step path. The graphs themselves
are tested on the GPU (test_replay_gpu.py)."""

from __future__ import annotations

import ast

import pytest
import torch
from test_emit import emitted

from kernelwright.capture import capture
from kernelwright.compiler import _replay_unsafe
from kernelwright.emit.replay import REPLAY_SOURCE
from kernelwright.judge.kernelbench import kernelbench_static
from kernelwright.problem import load_problem


def test_replay_file_passes_kernelbench_static_checks_and_names_its_state():
    _, plan, _, source = emitted("level3/08_SqueezeExcitationBlock", replay=True)
    ast.parse(source)
    verdict = kernelbench_static(source)
    assert verdict["passes_strict"], verdict["strict"]
    assert "_KW_REPLAY = True" in source and "def _kw_forward(self, x):" in source
    state = source[source.index("def _kw_state(self):"):]
    for param in plan.graph.params:
        assert f"self.{param.name.split('.')[0]}" in state


def test_step_file_has_no_replay_runtime():
    _, _, _, source = emitted("level3/08_SqueezeExcitationBlock")
    assert "_kw_replay" not in source and "_KW_REPLAY" not in source


DROPOUT_PROBLEM = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return torch.relu(self.drop(x))


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
"""


def test_random_ops_keep_replay_off(tmp_path):
    path = tmp_path / "dropout.py"
    path.write_text(DROPOUT_PROBLEM)
    assert "random op" in _replay_unsafe(capture(load_problem(path)))
    assert _replay_unsafe(capture(load_problem("level1/05_SiLU"))) is None


class _Model(torch.nn.Module):
    pass


@pytest.mark.parametrize("args", [
    (torch.zeros(2),),                                   # on the CPU
    (torch.zeros(2, requires_grad=True),),               # gradients wanted
    ([1, 2],),                                           # unhashable
    (3,),                                                # no tensor at all
], ids=["cpu", "requires_grad", "unhashable", "no_tensor"])
def test_calls_a_graph_could_get_wrong_run_step_by_step(args):
    namespace = {"torch": torch}
    exec(REPLAY_SOURCE, namespace)  # noqa: S102
    assert namespace["_kw_replay_key"](_Model(), args) is None
    calls = []
    result = namespace["_kw_replay"](_Model(), lambda model, *a: calls.append(a) or "stepped", None, args)
    assert result == "stepped" and calls == [args]


def test_expanded_views_are_not_dense():
    namespace = {"torch": torch}
    exec(REPLAY_SOURCE, namespace)  # noqa: S102
    assert not namespace["_kw_dense"](torch.zeros(3, 1).expand(3, 4))
    assert namespace["_kw_dense"](torch.zeros(3, 4).t())
    assert namespace["_kw_dense"](torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last))
