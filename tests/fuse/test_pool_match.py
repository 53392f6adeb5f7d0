"""The pool matcher: what each group claims (the pool, its prologue and epilogue), what stays out
(indices, other dtypes, values read elsewhere), and the launch shape it plans."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "codegen"))
from pool_cases import CASES, max_pool, random_inputs  # noqa: E402

from kernelwright.capture import capture  # noqa: E402
from kernelwright.fuse import plan_fusion  # noqa: E402
from kernelwright.fuse.plan import AtenStep  # noqa: E402
from kernelwright.fuse.pool import plan_pool  # noqa: E402
from kernelwright.ir.graph import Graph  # noqa: E402
from kernelwright.ir.interpret import interpret  # noqa: E402
from kernelwright.ir.ops import const_node, input_node, make_node  # noqa: E402
from kernelwright.problem import load_problem, load_shrunk  # noqa: E402
from kernelwright.verify.execute import execute_plan  # noqa: E402

RETURN_INDICES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(3, 2, 1, return_indices=True)

    def forward(self, x):
        values, indices = self.pool(torch.relu(x))
        return values * 2, indices


def get_inputs():
    return [torch.randn(2, 3, 9, 9)]


def get_init_inputs():
    return []
'''


def pool_groups(graph: Graph):
    return [g for g in plan_fusion(graph).groups if g.family == "pool"]


def ops(group) -> list[str]:
    return [n.op for n in group.nodes]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_is_one_pool_group_and_the_plan_computes_the_graph(name):
    graph = CASES[name]()
    plan = plan_fusion(graph)
    (group,) = pool_groups(graph)
    assert len(group.outputs) == 1 and group.outputs[0] is group.nodes[-1]
    inputs, params = random_inputs(graph)
    got, _, _ = execute_plan(plan, inputs, params)
    want, _ = interpret(graph, inputs, params)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize(("problem_id", "expected"), [
    ("level1/60_MaxPool2d", ["max_pool"]),
    ("level1/61_AvgPool2d", ["avg_pool"]),
    ("level1/62_AdaptiveAvgPool2d", ["adaptive_avg_pool"]),
    ("level1/63_MaxPool1d", ["max_pool"]),
    ("level2/14_Conv3dReLUAvgPool", ["relu", "avg_pool"]),
    ("level2/17_Conv1dGeluMaxPool", ["gelu", "reshape", "max_pool"]),
])
def test_bundled_pools_become_kernels_with_their_prologue(problem_id, expected):
    (group,) = pool_groups(capture(load_shrunk(problem_id)))
    assert ops(group) == expected


def test_prologue_and_epilogue_membership():
    prologue = ["add", "mul", "mul", "relu", "max_pool"]
    assert ops(pool_groups(CASES["bias_scale_relu_max_pool"]())[0]) == prologue
    assert ops(pool_groups(CASES["avg_pool_epilogue"]())[0]) == ["avg_pool", "mul", "add", "sigmoid"]
    assert ops(pool_groups(CASES["max_pool1d_squeezed_epilogue"]())[0]) == ["max_pool", "reshape", "tanh"]
    (group,) = pool_groups(CASES["two_inputs_avg_pool"]())
    assert [n.name for n in group.inputs] == ["x", "y"]


def test_values_read_outside_the_group_stay_out():
    x = input_node("x", 0, (2, 3, 8, 8))
    relu = make_node("relu", [x])
    pooled = max_pool(relu, 2, 2)
    scaled = make_node("mul", [pooled, const_node(2.0)])
    # relu is also a graph output, the pooled value is read twice: neither side joins
    graph = Graph((x,), (), (make_node("add", [scaled, pooled]), relu), output_kind="tuple")
    (group,) = pool_groups(graph)
    assert ops(group) == ["max_pool"]
    # the pool's value is itself a graph output: no epilogue after it
    graph = Graph((x,), (), (pooled, scaled), output_kind="tuple")
    assert ops(pool_groups(graph)[0]) == ["relu", "max_pool"]


def test_epilogue_that_broadcasts_the_output_up_is_not_absorbed():
    x, wide = input_node("x", 0, (2, 3, 8, 8)), input_node("w", 1, (5, 2, 3, 4, 4))
    graph = Graph((x, wide), (), (make_node("add", [max_pool(x, 2, 2), wide]),))
    (group,) = pool_groups(graph)
    assert ops(group) == ["max_pool"]


def test_scalar_forward_arguments_stay_out_of_the_prologue():
    x = input_node("x", 0, (2, 3, 8, 8))
    scale = input_node("scale", 1, (), kind="scalar", value=2.0)
    graph = Graph((x, scale), (), (max_pool(make_node("mul", [x, scale]), 2, 2),))
    (group,) = pool_groups(graph)
    assert ops(group) == ["max_pool"]


def test_other_dtypes_are_left_to_aten():
    x = input_node("x", 0, (2, 3, 8, 8), dtype=torch.float64)
    graph = Graph((x,), (), (max_pool(x, 2, 2),))
    assert not pool_groups(graph)
    assert all(isinstance(s, AtenStep) for s in plan_fusion(graph).steps)


def test_pools_whose_indices_are_used_stay_aten(tmp_path):
    path = tmp_path / "indices.py"
    path.write_text(RETURN_INDICES)
    graph = capture(load_problem(path))
    assert any(n.op == "max_pool" for n in graph.nodes())
    assert not pool_groups(graph)


def test_launch_shapes_of_the_bundled_sizes():
    level1_60 = plan_pool(max_pool(input_node("x", 0, (32, 128, 224, 224)), 2, 3, 2, 1))
    assert (level1_60.layout, level1_60.vec, level1_60.out_size) == ("thread", 4, (1, 112, 112))
    adaptive = make_node("adaptive_avg_pool", [input_node("x", 0, (64, 128, 223, 223))], output_size=(7, 7))
    assert plan_pool(adaptive).layout == "warp"
    unsqueezed = max_pool(input_node("x", 0, (64, 128, 1, 24576)), 2, (1, 5), (1, 2), (0, 2))
    spec = plan_pool(unsqueezed)
    assert spec.slots == (None, None, 3) and spec.kernel == (1, 1, 5) and spec.vec == 4
    dilated = plan_pool(max_pool(input_node("x", 0, (2, 3, 16, 16)), 2, 3, 1, 1, dilation=2))
    assert dilated.vec == 1       # dilated windows leave gaps: no shared row span
