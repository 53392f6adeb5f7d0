"""The fusion planner on hand-built graphs: grouping, convexity, step order, and a CPU emulation of plans
(ATen steps + groups run node by node) against the interpreter on bundled problems."""

from __future__ import annotations

import pytest
import torch

from kernelwright.fuse import pointwise
from kernelwright.fuse.plan import (
    AtenStep,
    FusedGroup,
    FusionPlan,
    Partition,
    make_group,
    plan_fusion,
)
from kernelwright.ir.graph import Graph
from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import const_node, input_node, make_node, param_node
from kernelwright.verify.execute import execute_plan


def x_input(shape=(4, 8), name="x", index=0):
    return input_node(name, index, shape)


def pointwise_only(graph: Graph) -> FusionPlan:
    return plan_fusion(graph, [pointwise.match])


def test_chain_becomes_one_group_with_consts_baked_in():
    x, b = x_input(), param_node("bias", (8,))
    y = make_node("relu", [make_node("mul", [make_node("add", [x, b]), const_node(2.0)])])
    plan = pointwise_only(Graph((x,), (b,), (y,)))
    (group,) = plan.steps
    assert isinstance(group, FusedGroup) and group.family == "pointwise"
    assert [n.op for n in group.nodes] == ["add", "mul", "relu"]
    assert group.inputs == (x, b) and group.outputs == (y,)


def test_reduction_between_two_pointwise_ops_splits_them():
    # a -> sum -> (a + sum): one group {a, add} would leave through sum and come back.
    x = x_input()
    a = make_node("exp", [x])
    s = make_node("sum", [a], dims=(1,), keepdim=True)
    out = make_node("add", [a, s])
    plan = pointwise_only(Graph((x,), (), (out,)))
    kinds = [type(step).__name__ for step in plan.steps]
    assert kinds == ["FusedGroup", "AtenStep", "FusedGroup"]
    first, _, last = plan.steps
    assert first.outputs == (a,) and last.inputs == (a, s)


def test_same_shape_producer_used_outside_becomes_a_second_output():
    x = x_input()
    a = make_node("tanh", [x])
    s = make_node("sum", [a], dims=(0,))
    b = make_node("mul", [a, a])
    plan = pointwise_only(Graph((x,), (), (b, s), output_kind="tuple"))
    group = plan.groups[0]
    assert set(map(id, group.nodes)) == {id(a), id(b)}
    assert group.outputs == (a, b)


def test_views_and_broadcast_producers_are_inlined_never_outputs():
    x, w = x_input((4, 8)), param_node("w", (8,))
    small = make_node("sigmoid", [w])               # [8], recomputed per element of the [8, 4] domain
    t = make_node("permute", [make_node("add", [x, small])], dims=(1, 0))
    y = make_node("gelu", [t], approximate="none")
    plan = pointwise_only(Graph((x,), (w,), (y,)))
    (group,) = plan.groups
    assert {n.op for n in group.nodes} == {"sigmoid", "add", "permute", "gelu"}
    assert group.outputs == (y,) and set(group.inputs) == {x, w}


def test_scalar_forward_arguments_stay_aten():
    x = x_input()
    s = input_node("scale", 1, (), torch.float64, kind="scalar", value=2.0)
    y = make_node("mul", [x, s])
    plan = pointwise_only(Graph((x, s), (), (y,)))
    assert plan.groups == [] and isinstance(plan.steps[0], AtenStep)


def test_planner_rejects_non_convex_and_cyclic_groups():
    x = x_input()
    a = make_node("exp", [x])
    s = make_node("sum", [a], dims=(1,), keepdim=True)
    out = make_node("add", [a, s])
    graph = Graph((x,), (), (out,))

    def greedy(g: Graph, claimed: frozenset[int]) -> list[FusedGroup]:
        return [make_group(g, "pointwise", [a, out])]

    plan = plan_fusion(graph, [greedy])
    assert plan.groups == [] and len(plan.steps) == 3


def test_partition_sees_cycles_through_accepted_groups():
    # Groups {p, a} and {q, m}: each convex alone, but p -> m and q -> a make the two steps a cycle.
    x = x_input()
    p, q = make_node("exp", [x]), make_node("sin", [x])
    m = make_node("add", [p, q])
    a = make_node("mul", [p, q])
    graph = Graph((x,), (), (m, a), output_kind="tuple")
    assert Partition(graph).is_convex([q, m])
    partition = Partition(graph)
    partition.add([p, a])
    assert not partition.is_convex([q, m])
    assert partition.is_convex([m]) and partition.is_convex([q])
    assert not partition.is_convex([p])          # already claimed


def test_steps_are_in_dependency_order():
    x = x_input()
    a = make_node("exp", [x])
    s1 = make_node("sum", [a], dims=(1,), keepdim=True)
    b = make_node("sub", [a, s1])
    s2 = make_node("amax", [b], dims=(0,), keepdim=True)
    c = make_node("div", [b, s2])
    plan = pointwise_only(Graph((x,), (), (c,)))
    seen = {id(x)}
    for step in plan.steps:
        nodes = step.nodes if isinstance(step, FusedGroup) else (step.node,)
        inputs = step.inputs if isinstance(step, FusedGroup) else step.node.inputs
        assert all(id(i) in seen or i.op == "const" for i in inputs)
        seen.update(id(n) for n in nodes)


def test_without_dissolves_a_group_into_aten_steps():
    x = x_input()
    y = make_node("relu", [make_node("exp", [x])])
    plan = pointwise_only(Graph((x,), (), (y,)))
    aten = plan.without(plan.groups[0])
    assert [s.node.op for s in aten.steps] == ["exp", "relu"]


def test_execute_plan_hides_group_internals():
    x = x_input()
    a = make_node("exp", [x])
    y = make_node("relu", [a])
    graph = Graph((x,), (), (y,))
    bad_group = FusedGroup("pointwise", (a, y), (x,), (y,))
    bad = FusionPlan((bad_group, AtenStep(make_node("neg", [a]))), graph)
    with pytest.raises(KeyError):
        execute_plan(bad, [torch.randn(4, 8)], {})


EMULATED = ["level1/28_BatchNorm2dTrain",
            "level1/36_CrossEntropyLoss", "level2/16_LinearSwishScaleClamp", "level2/18_LinearBatchNormReLU",
            "level3/02_ResidualConvBlock", "level3/08_SqueezeExcitationBlock",
            "level3/11_CausalSelfAttention", "level3/13_ResNetTinyBatch2",
            "level3/14_InvertedResidualNetBatch1"]


@pytest.mark.parametrize("problem_id", EMULATED)
def test_plan_emulation_matches_the_model(problem_id):
    from kernelwright.capture import capture
    from kernelwright.problem import load_shrunk

    problem = load_shrunk(problem_id)
    graph = capture(problem)
    plan = plan_fusion(graph)
    model = problem.build_model(0)
    inputs = problem.inputs(1)
    expected, expected_buffers = interpret(graph, inputs, model)
    outputs, buffers, _ = execute_plan(plan, inputs, model)
    for want, got in zip(expected, outputs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for fqn, value in expected_buffers.items():
        torch.testing.assert_close(buffers[fqn], value)
    with torch.no_grad():
        direct = problem.build_model(0)(*problem.inputs(1))
    direct = direct if isinstance(direct, (tuple, list)) else [direct]
    for want, got in zip(direct, outputs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def linear_sum_graph():
    """sum over the features of x @ W.T + b, rewritten to a GEMV: the reduced weights are derived values."""
    from kernelwright.rewrite import hoistable_nodes, rewrite_graph

    x, w, b = x_input(), param_node("fc.weight", (6, 8)), param_node("fc.bias", (6,))
    out = make_node("relu", [make_node("sum", [make_node("linear", [x, w, b], has_bias=True)], dims=(1,))])
    graph, _ = rewrite_graph(Graph((x,), (w, b), (out,)))
    return graph, hoistable_nodes(graph)


def test_derived_subgraphs_leave_the_per_call_steps():
    graph, roots = linear_sum_graph()
    plan = plan_fusion(graph, derived=roots)
    assert plan.derived == tuple(roots) and plan.derived_steps
    once = {id(s.node) for s in plan.derived_steps}
    assert {id(r) for r in roots} <= once
    for step in plan.steps:
        nodes = step.nodes if isinstance(step, FusedGroup) else (step.node,)
        assert not once & {id(n) for n in nodes}
    # the per-call steps read only the roots of the derived subgraphs
    read = {id(i) for s in plan.steps for n in (s.nodes if isinstance(s, FusedGroup) else (s.node,))
            for i in n.inputs}
    assert read & once == {id(r) for r in roots}
    weights = {"fc.weight": torch.randn(6, 8), "fc.bias": torch.randn(6)}
    x = torch.randn(4, 8)
    (got,), _, _ = execute_plan(plan, [x], weights)
    torch.testing.assert_close(got, torch.relu((x @ weights["fc.weight"].T + weights["fc.bias"]).sum(1)))
    assert plan.without(plan.groups[0]).derived_steps == plan.derived_steps


def test_derived_roots_must_keep_the_hoisting_contract():
    x, w = x_input(), param_node("w", (8, 8))
    scaled = make_node("mul", [w, const_node(2.0)])
    doubled = make_node("add", [scaled, scaled])
    x_scaled = make_node("mm", [x, scaled])          # reads `scaled` per call
    out = make_node("add", [make_node("mm", [x, doubled]), x_scaled])
    graph = Graph((x,), (w,), (out,))
    with pytest.raises(ValueError, match="read per call"):
        plan_fusion(graph, derived=[doubled])           # `scaled` is read per call too
    with pytest.raises(ValueError, match="forward input"):
        plan_fusion(graph, derived=[x_scaled])
    with pytest.raises(ValueError, match="graph output"):
        plan_fusion(graph, derived=[out])
    assert plan_fusion(graph, derived=[scaled, doubled]).derived_steps


def test_tiny_groups_reading_only_leaves_are_one_kernel():
    """A training-mode BatchNorm's batch count (`num_batches_tracked + 1`) in each of three BatchNorms: one
    pointwise group for the three, its own outputs the three counts; a large group that reads only leaves
    stays apart; at most MERGED_AT_MOST are joined in one."""
    counts = [param_node(f"bn{i}.num_batches_tracked", (), dtype=torch.int64) for i in range(3)]
    x = x_input()
    adds = [make_node("add", [c, const_node(1)]) for c in counts]
    large = make_node("relu", [x])
    graph = Graph((x,), tuple(counts), (*adds, large))
    plan = plan_fusion(graph)
    merged = [g for g in plan.groups if g.family == "pointwise" and len(g.outputs) == 3]
    assert len(merged) == 1 and set(map(id, merged[0].outputs)) == set(map(id, adds))
    assert set(map(id, merged[0].inputs)) == set(map(id, counts))
    others = [g for g in plan.groups if g.family == "pointwise" and g is not merged[0]]
    assert [g.outputs[0].op for g in others] == ["relu"]
    many = [param_node(f"bn{i}.num_batches_tracked", (), dtype=torch.int64)
            for i in range(pointwise.MERGED_AT_MOST + 1)]
    graph = Graph((), tuple(many), tuple(make_node("add", [c, const_node(1)]) for c in many))
    assert sorted(len(g.outputs) for g in plan_fusion(graph).groups) == [1, pointwise.MERGED_AT_MOST]
