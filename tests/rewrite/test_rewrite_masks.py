"""Masks made of constants or parameters before a reduction (a causal attention's masked softmax): the mask
gets a form the reduction kernel reads (a float 0/1 tensor or the float operand of a comparison, compared
per element), so the scaling, the mask and the softmax are one kernel over the scores."""

from __future__ import annotations

import pytest
import torch
from rewrite_checks import EXACT_KINDS, apply, assert_honest, fired, graph_of, x_in

from kernelwright.fuse import plan_fusion
from kernelwright.ir.ops import buffer_node, const_node, make_node
from kernelwright.rewrite import hoistable_nodes, rewrite_graph
from kernelwright.rewrite.rules_reduce import float_mask


def causal(t: int):
    """`~torch.ones(t, t, dtype=torch.bool).tril()` as captured: constants only."""
    ones = make_node("full", [], shape=(t, t), value=True, dtype=torch.bool)
    return make_node("logical_not", [make_node("tril", [ones], diagonal=0)])


def masked_softmax(scores, mask):
    scaled = make_node("mul", [scores, const_node(0.125)])
    return make_node("softmax", [make_node("where", [mask, const_node(float("-inf")), scaled])], dim=-1)


def test_a_constant_bool_mask_becomes_a_float_one_compared_per_element():
    before = graph_of([masked_softmax(x_in((2, 3, 5, 5)), causal(5))])
    after, log = apply(before, float_mask)
    assert fired(log, float_mask) == 1
    where = next(n for n in after.nodes() if n.op == "where")
    flag = where.inputs[0]
    assert flag.op == "ne" and flag.inputs[0].op == "cast" and flag.inputs[0].dtype == torch.float32
    assert_honest(before, after, kinds=EXACT_KINDS)
    # the cast is the derived weight; the comparison stays per call, inside the softmax's kernel
    graph, _ = rewrite_graph(before)
    roots = hoistable_nodes(graph)
    assert [r.op for r in roots] == ["cast"]
    (group,) = [g for g in plan_fusion(graph, derived=roots).groups]
    assert group.family == "reduction" and {"ne", "mul", "where", "softmax"} <= {n.op for n in group.nodes}


def test_a_buffer_mask_compared_per_call_is_read_by_the_softmax_kernel():
    """MinGPT's `att.masked_fill(self.bias[:, :, :T, :T] == 0, -inf)`: the comparison is not hoisted (its
    float operand is a view of the buffer), so the mask, the scale and the softmax are one kernel."""
    bias = buffer_node("bias", (1, 1, 8, 8))
    window = make_node("slice", [make_node("slice", [bias], dim=2, start=0, end=6, step=1)],
                       dim=3, start=0, end=6, step=1)
    mask = make_node("eq", [window, const_node(0.0)])
    graph, _ = rewrite_graph(graph_of([masked_softmax(x_in((2, 3, 6, 6)), mask)]))
    roots = hoistable_nodes(graph)
    assert not any(r.op == "eq" for r in roots)
    groups = plan_fusion(graph, derived=roots).groups
    assert len(groups) == 1 and {"eq", "where", "softmax"} <= {n.op for n in groups[0].nodes}


@pytest.mark.parametrize("case", ["comparison", "full_size", "per_call", "pointwise_reader"])
def test_masks_left_alone(case):
    x = x_in((2, 5, 5))
    if case == "comparison":       # already a predicate on float values: read as it is
        mask = make_node("gt", [buffer_node("m", (5, 5)), const_node(0.5)])
    elif case == "full_size":      # not broadcast: a bool byte per element beats a float
        mask = make_node("logical_not", [make_node("tril", [make_node(
            "full", [], shape=(2, 5, 5), value=True, dtype=torch.bool)], diagonal=0)])
    elif case == "per_call":       # computed from the input: no derived weight
        mask = make_node("gt", [x_in((5, 5)), const_node(0.0)])
        mask = make_node("logical_not", [mask])
    else:                          # read by a pointwise kernel, which reads a bool mask as it is
        masked = make_node("where", [causal(5), const_node(0.0), x])
        _, log = apply(graph_of([make_node("relu", [masked])]), float_mask)
        assert not fired(log, float_mask)
        return
    _, log = apply(graph_of([masked_softmax(x, mask)]), float_mask)
    assert not fired(log, float_mask)
