"""Norm statistics apart (`fuse/statistics.py`): a norm read only by reductions over other rows becomes a
statistics kernel and a prologue of those reductions. Every rewrite is proven by the interpreter in
float64 on random values (outputs and buffer updates); the plans are checked for what they write."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "codegen"))
from reduction_cases import NORM_SPLIT_CASES, norm_then_reduce  # noqa: E402

from kernelwright.fuse import plan_fusion  # noqa: E402
from kernelwright.fuse.plan import FusedGroup  # noqa: E402
from kernelwright.fuse.statistics import statistics_apart  # noqa: E402
from kernelwright.ir.graph import Graph, Node  # noqa: E402
from kernelwright.ir.interpret import interpret  # noqa: E402
from kernelwright.ir.ops import const_node, input_node, make_node, param_node  # noqa: E402


def assert_same_values(before: Graph, after: Graph, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(x.shape, generator=gen, dtype=torch.float64) * 3 + 1 for x in before.inputs]
    params = {p.name: torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in before.params}
    want, want_buffers = interpret(before, xs, params)
    got, got_buffers = interpret(after, xs, params)
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    for fqn, value in want_buffers.items():
        torch.testing.assert_close(got_buffers[fqn], value, rtol=1e-12, atol=1e-12)


def full_size_outputs(graph: Graph, split: bool = True) -> list[Node]:
    """Values of the input's size a kernel writes: what the split is there to avoid."""
    numel = graph.inputs[0].numel
    groups = plan_fusion(graph, split_statistics=split).groups
    return [o for g in groups for o in g.outputs if o.numel == numel]


def reduction_groups(graph: Graph) -> list[FusedGroup]:
    return [g for g in plan_fusion(graph).groups if g.family == "reduction"]


@pytest.mark.parametrize("shape, c", [((2, 5, 7, 12), 3), ((2, 12, 5, 7), 1), ((3, 4, 3, 5, 12), 4)])
def test_group_norm_then_min_over_channels_reads_x_twice_and_writes_no_full_size_value(shape, c):
    graph = norm_then_reduce(shape, c, groups=3)
    assert [o.op for o in full_size_outputs(graph, split=False)] == ["group_norm"]
    after = statistics_apart(graph)
    assert after is not graph
    assert_same_values(graph, after)
    stats, consumer = reduction_groups(after)
    stat_ops = {n.op for n in stats.nodes}
    assert {"mean", "var", "rsqrt"} <= stat_ops and "amin" not in stat_ops
    ops = [n.op for n in consumer.nodes]
    assert ops[-2:] == ["amin", "clamp"] and "sub" in ops and "relu" in ops
    assert ops.count("add") >= 2          # the bias add, recomputed in the prologue, and the norm's bias
    assert not full_size_outputs(after)   # plan_fusion splits by itself: the planned graph writes none


def test_the_plan_carries_the_split_graph_and_the_switch_turns_it_off():
    graph = norm_then_reduce((2, 5, 7, 12), 3, groups=4)
    assert plan_fusion(graph).graph is not graph
    assert plan_fusion(graph, split_statistics=False).graph is graph
    assert full_size_outputs(graph) == [] and full_size_outputs(graph, split=False)


def test_batch_norm_before_a_global_average_pool_keeps_its_running_statistics():
    """A ResNet's last block: BatchNorm (batch statistics) -> relu -> mean over the spatial dims. The
    running mean reads the norm's input too; it stays beside the statistics."""
    graph = norm_then_reduce((4, 6, 5, 3), 1, norm="batch_norm", op="mean", dims=(2, 3), keepdim=False,
                             tail=None)
    after = statistics_apart(graph)
    assert after is not graph
    assert_same_values(graph, after)
    assert not full_size_outputs(after)


def test_layer_norm_then_a_sum_over_other_rows_is_split():
    graph = norm_then_reduce((3, 17, 10), 2, norm="layer_norm", op="sum", dims=(1,), keepdim=False,
                             tail=None, chain=("tanh",))
    after = statistics_apart(graph)
    assert after is not graph
    assert_same_values(graph, after)
    assert not full_size_outputs(after)


@pytest.mark.parametrize("case", ["own rows", "output", "two spaces", "pointwise reader", "view input"])
def test_what_stays_one_norm_kernel(case):
    if case == "own rows":        # LayerNorm -> sum over the normalized dim: one kernel already
        graph = norm_then_reduce((3, 17, 10), 2, norm="layer_norm", op="sum", dims=(2,), tail=None)
    elif case == "output":        # the normalized tensor is an output: it is written anyway
        graph = norm_then_reduce((2, 5, 7, 12), 3, groups=3)
        graph = graph.with_(outputs=graph.outputs + (graph.outputs[0].inputs[0].inputs[0].inputs[0],))
    elif case == "two spaces":    # min over channels and a mean over space: the apply would be written out
        graph = norm_then_reduce((2, 5, 7, 12), 3, groups=3, tail=None)
        relu = graph.outputs[0].inputs[0]
        graph = graph.with_(outputs=graph.outputs + (make_node("mean", [relu], dims=(1, 2)),))
    elif case == "pointwise reader":
        graph = norm_then_reduce((2, 5, 7, 12), 3, groups=3, tail=None)
        relu = graph.outputs[0].inputs[0]
        graph = graph.with_(outputs=graph.outputs + (make_node("exp", [relu]),))
    else:                         # GroupNorm's domain view of a permuted tensor would be a copy
        x = input_node("x", 0, (2, 12, 5, 7))
        w, b = param_node("w", (12,)), param_node("b", (12,))
        view = make_node("permute", [x], dims=(0, 2, 3, 1))
        y = make_node("group_norm", [view, w, b], groups=3, eps=1e-5, has_weight=True, has_bias=True,
                      channel_dim=3)
        graph = Graph((x,), (w, b), (make_node("amin", [y], dims=(3,), keepdim=True),))
    assert statistics_apart(graph) is graph


def test_two_norms_into_one_sum_split_once_and_stay_exact():
    """sum(gn1(x) + gn2(x2)): both regions end in the same reduction; one of them is split (the other
    norm stays a kernel whose output the prologue reads), and the values are unchanged."""
    x = input_node("x", 0, (2, 6, 4, 5))
    params, normed = [], []
    for k in range(2):
        w, b = param_node(f"w{k}", (6,)), param_node(f"b{k}", (6,))
        params += [w, b]
        scaled = make_node("mul", [x, const_node(float(k + 1))])
        normed.append(make_node("group_norm", [scaled, w, b], groups=2, eps=1e-5, has_weight=True,
                                has_bias=True, channel_dim=1))
    total = make_node("sum", [make_node("add", normed)], dims=(1,))
    graph = Graph((x,), tuple(params), (total,))
    after = statistics_apart(graph)
    assert after is not graph
    assert_same_values(graph, after)


def test_random_norm_reduction_regions_keep_their_values():
    """Odd sizes, size-1 dims, every norm kind, channel dim anywhere but the batch, any reduced dims."""
    rng = random.Random(20261127)
    split = 0
    for trial in range(60):
        rank = rng.choice((3, 4, 5))
        norm = rng.choice(("group_norm", "batch_norm", "layer_norm"))
        c = rng.randrange(1, rank)
        groups = rng.choice((1, 2, 3))
        shape = [rng.choice((1, 2, 3, 5, 7)) for _ in range(rank)]
        shape[c] = groups * rng.choice((1, 2, 3)) if norm == "group_norm" else shape[c]
        if norm == "batch_norm" and shape[0] == 1:
            shape[0] = 2          # batch statistics need more than one value per channel
        dims = tuple(sorted(rng.sample(range(rank), rng.randrange(1, rank + 1))))
        op = rng.choice(("sum", "mean", "amax", "amin", "var", "logsumexp"))
        kwargs = dict(norm=norm, groups=groups, op=op, dims=dims, keepdim=rng.random() < 0.5,
                      tail=rng.choice((None, "clamp")), bias=rng.random() < 0.7,
                      chain=rng.choice(((), ("relu",), ("tanh", "sigmoid"), ("residual", "relu"))))
        graph = norm_then_reduce(tuple(shape), c, **kwargs)
        after = statistics_apart(graph)
        split += after is not graph
        assert_same_values(graph, after, seed=trial)
        plan_fusion(graph)        # plans without error, split or not
    assert split >= 20


# ---- what a review found (each was a worse plan or a crash; values were always right)

def test_an_epilogue_read_by_reductions_over_two_spaces_stays_in_the_norm_kernel():
    """GN -> relu -> {min over channels, mean over space} is not split, and the relu stays the norm's
    epilogue: written once and read by both (it was left out of every kernel, a fourth one)."""
    graph = norm_then_reduce((2, 5, 7, 12), 3, groups=3, tail=None)
    relu = graph.outputs[0].inputs[0]
    graph = graph.with_(outputs=graph.outputs + (make_node("mean", [relu], dims=(1, 2)),))
    plan = plan_fusion(graph)
    assert len(plan.groups) == 3 and len(full_size_outputs(graph)) == 1


def test_a_region_reading_its_own_reduction_back_is_not_split():
    """A logsumexp over channels written by hand after a GroupNorm reads its maximum back: split, the apply
    would be a kernel's output; unsplit, everything after the norm is one kernel."""
    x = input_node("x", 0, (4, 16, 5, 6))
    w, b = param_node("w", (16,)), param_node("b", (16,))
    y = make_node("group_norm", [x, w, b], groups=4, eps=1e-5, has_weight=True, has_bias=True)
    m = make_node("amax", [y], dims=(1,), keepdim=True)
    s = make_node("sum", [make_node("exp", [make_node("sub", [y, m])])], dims=(1,), keepdim=True)
    graph = Graph((x,), (w, b), (make_node("add", [make_node("log", [s]), m]),))
    assert statistics_apart(graph) is graph


def test_a_view_under_the_private_producers_is_not_reshaped():
    """permute(x) + bias -> GroupNorm over NHWC -> min: the domain view of permute(x) would be a copy."""
    x = input_node("x", 0, (2, 12, 5, 7))
    cb, w, b = param_node("cb", (12,)), param_node("w", (12,)), param_node("b", (12,))
    h = make_node("add", [make_node("permute", [x], dims=(0, 2, 3, 1)), cb])
    y = make_node("group_norm", [h, w, b], groups=3, eps=1e-5, has_weight=True, has_bias=True, channel_dim=3)
    graph = Graph((x,), (cb, w, b), (make_node("amin", [y], dims=(3,), keepdim=True),))
    assert statistics_apart(graph) is graph


def test_derived_values_stay_derived():
    """A norm of parameters only is a derived value (computed once): not split. A derived weight among
    the producers of x stays one value, not recomputed per call by the copies."""
    from kernelwright.rewrite import hoistable_nodes

    x = input_node("x", 0, (2, 1, 4, 4))
    p, w, b = param_node("p", (2, 8, 4, 4)), param_node("w", (8,)), param_node("b", (8,))
    y = make_node("group_norm", [p, w, b], groups=4, eps=1e-5, has_weight=True, has_bias=True)
    t = make_node("clamp", [make_node("amin", [y], dims=(1,), keepdim=True)], min=-0.5, max=0.5)
    graph = Graph((x,), (p, w, b), (make_node("add", [x, t]),))
    derived = hoistable_nodes(graph)
    assert len(plan_fusion(graph, derived=derived).derived_steps) == len(
        plan_fusion(graph, derived=derived, split_statistics=False).derived_steps) > 0

    x = input_node("x", 0, (2, 8, 4, 4))
    q = param_node("q", (8, 1, 1))
    h = make_node("add", [x, make_node("mul", [q, q])])
    y = make_node("group_norm", [h, w, b], groups=4, eps=1e-5, has_weight=True, has_bias=True)
    graph = Graph((x,), (q, w, b), (make_node("amin", [y], dims=(1,), keepdim=True),))
    derived = hoistable_nodes(graph)
    plan = plan_fusion(graph, derived=derived)
    assert plan.graph is not graph and len(plan.derived_steps) == 1
    assert_same_values(graph, plan.graph)


def test_chained_norms_are_split_one_after_the_other():
    """GN -> relu -> min -> clamp -> LayerNorm -> sum: the LayerNorm's split sees the GroupNorm's rewrite,
    so no GroupNorm is left in the plan."""
    graph = norm_then_reduce((2, 12, 5, 7), 1, groups=3, bias=False)
    clamp = graph.outputs[0]
    w2, b2 = param_node("w2", (7,)), param_node("b2", (7,))
    ln = make_node("layer_norm", [clamp, w2, b2], normalized_ndim=1, normalized_shape=(7,), eps=1e-5,
                   has_weight=True, has_bias=True)
    graph = graph.with_(params=graph.params + (w2, b2), outputs=(make_node("sum", [ln], dims=(2,)),))
    plan = plan_fusion(graph)
    assert not any(n.op in ("group_norm", "layer_norm") for n in plan.graph.nodes())
    assert_same_values(graph, plan.graph)


@pytest.mark.parametrize("where", ["before", "after"])
def test_long_pointwise_chains_plan_without_recursion(where):
    x = input_node("x", 0, (2, 8, 3, 3))
    w, b = param_node("w", (8,)), param_node("b", (8,))
    h = x
    for _ in range(600 if where == "before" else 0):
        h = make_node("relu", [h])
    y = make_node("group_norm", [h, w, b], groups=4, eps=1e-5, has_weight=True, has_bias=True)
    for _ in range(600 if where == "after" else 0):
        y = make_node("relu", [y])
    graph = Graph((x,), (w, b), (make_node("amin", [y], dims=(1,)),))
    assert plan_fusion(graph).graph is not graph


def se_block(norm="batch_norm", shape=(4, 6, 5, 3)) -> Graph:
    """A squeeze-and-excitation block's end: y = norm(x); s = sigmoid(linear(mean(y over space)));
    relu(y * s + x). The linear (a GEMM) keeps the gate out of the pooling kernel."""
    from kernelwright.rewrite.match import linear_node

    x = input_node("x", 0, shape)
    n, c = shape[:2]
    w, b, k = param_node("w", (c,)), param_node("b", (c,)), param_node("k", (c, c))
    if norm == "batch_norm":
        y = make_node("batch_norm", [x, w, b], training=True, momentum=0.1, eps=1e-5, has_weight=True,
                      has_bias=True, has_running=False)
    else:
        y = make_node("group_norm", [x, w, b], groups=2, eps=1e-5, has_weight=True, has_bias=True)
    pooled = make_node("mean", [y], dims=(2, 3))
    gate = make_node("reshape", [make_node("sigmoid", [linear_node(pooled, k, None)])], shape=(n, c, 1, 1))
    out = make_node("relu", [make_node("add", [make_node("mul", [y, gate]), x])])
    return Graph((x,), (w, b, k), (out,), training=norm == "batch_norm")


def test_a_gate_reading_the_norm_normalizes_x_itself():
    """The squeeze-and-excitation gate multiplies the norm's output by a value computed from its pooled
    mean: it cannot join the norm's kernel, so it reads x and the statistics and normalizes in its own
    kernel; nothing full-size but the result is written (was: the normalized tensor, read twice)."""
    graph = se_block()
    plan = plan_fusion(graph)
    assert plan.graph is not graph
    assert_same_values(graph, plan.graph)
    assert len(full_size_outputs(graph)) == 1 and len(full_size_outputs(graph, split=False)) == 2
    gate = next(g for g in plan.groups if g.family == "pointwise" and "relu" in [n.op for n in g.nodes])
    assert graph.inputs[0] in gate.inputs and "sub" in [n.op for n in gate.nodes]
    grouped = se_block("group_norm")        # GroupNorm's region is a view: its readers are not rebuilt
    assert statistics_apart(grouped) is grouped


def test_epilogues_that_meet_again_stay_in_the_kernel():
    """exp(y) * tanh(y) after a softmax: both halves can join the softmax's kernel, so neither is left to
    a kernel of its own (the rule above is for readers of values from past the group only)."""
    x = input_node("x", 0, (7, 33))
    y = make_node("softmax", [x], dim=1)
    graph = Graph((x,), (), (make_node("mul", [make_node("exp", [y]), make_node("tanh", [y])]),))
    (group,) = plan_fusion(graph).groups
    assert [n.op for n in group.nodes] == ["softmax", "exp", "tanh", "mul"]


def test_what_a_review_of_the_gate_readers_found():
    """(1) readers of the norm beside upstream values only (not a gate) are no foreign readers: no fresh
    apply for each, written by the statistics kernel; (2) an epilogue whose one later reader is a GEMM's
    epilogue already stays in its kernel (it would be a kernel of its own); (3) a reader of the norm and of
    a deeper chain node is a chain node whatever order the search meets them in."""

    x = input_node("x", 0, (6, 10))
    u = input_node("u", 1, (2, 6, 10))
    w = param_node("w", (10,))
    y = make_node("layer_norm", [x, w], normalized_ndim=1, normalized_shape=(10,), eps=1e-5,
                  has_weight=True, has_bias=False)
    wide = make_node("add", [make_node("add", [y, u]), make_node("mul", [y, u])])
    graph = Graph((x, u), (w,), (make_node("amax", [y], dims=(0,)), wide))
    assert statistics_apart(graph) is graph

    q, k = input_node("q", 0, (8, 256, 64)), input_node("k", 1, (8, 256, 64))
    v = input_node("v", 2, (8, 256, 256))
    s = make_node("softmax", [make_node("bmm", [q, make_node("permute", [k], dims=(0, 2, 1))])], dim=2)
    graph = Graph((q, k, v), (), (make_node("mul", [make_node("exp", [s]), make_node("bmm", [s, v])]),))
    plan = plan_fusion(graph)
    gemm = [g for g in plan.groups if g.family == "gemm" and "mul" in [n.op for n in g.nodes]]
    softmax = next(g for g in plan.groups if any(n.op == "softmax" for n in g.nodes))
    assert gemm and "exp" in [n.op for n in softmax.nodes]
    assert not any(g.family == "pointwise" for g in plan.groups)

    x = input_node("x", 0, (5, 9))
    y = make_node("layer_norm", [x], normalized_ndim=1, normalized_shape=(9,), eps=1e-5,
                  has_weight=False, has_bias=False)
    deep = make_node("exp", [make_node("relu", [y])])
    graph = Graph((x,), (), (make_node("amax", [make_node("add", [y, deep])], dims=(0,)),))
    after = statistics_apart(graph)
    assert after is not graph
    assert_same_values(graph, after)


@pytest.mark.parametrize("case", sorted(NORM_SPLIT_CASES))
def test_every_gpu_case_takes_the_split(case):
    """The GPU test runs these plans against the float64 interpreter: each must still take the split (a
    planner change once refused one, found only on the GPU)."""
    graph = NORM_SPLIT_CASES[case]()
    assert plan_fusion(graph, split_statistics=True).graph is not graph
