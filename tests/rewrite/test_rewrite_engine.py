"""The engine: rules to a fixpoint, first match wins, CSE, DCE, the assume_finite gate, the log."""

from __future__ import annotations

import pytest
import torch
from rewrite_checks import apply, assert_honest, fired, graph_of, p, x_in

from kernelwright.ir.ops import aten_source, const_node, make_node
from kernelwright.rewrite import RULES, rewrite_graph, rule
from kernelwright.rewrite.rules_redundancy import neutral_operand, times_zero


def test_rules_are_named_documented_and_unique():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    assert all(r.summary and r.ops for r in RULES)


def test_chains_rewrite_to_a_fixpoint():
    x = x_in((4, 5))
    y = make_node("mul", [make_node("add", [make_node("mul", [x, const_node(1.0)]), const_node(0.0)]),
                          const_node(1.0)])
    out = make_node("relu", [y])
    g, log = apply(graph_of([out]), neutral_operand)
    assert g.outputs[0].inputs[0] is x
    assert fired(log, neutral_operand) == 3


def test_cse_merges_identical_nodes_and_dce_drops_dead_ones():
    x = x_in((3, 4))
    a, b = make_node("exp", [x]), make_node("exp", [x])
    dead = make_node("mul", [x, const_node(0.0)])
    out = make_node("add", [make_node("add", [a, b]), make_node("mul", [dead, const_node(0.0)])])
    g, log = apply(graph_of([out]), times_zero, assume_finite=True)
    ops = [n.op for n in g.nodes() if not n.is_leaf]
    assert ops.count("exp") == 1 and fired(log, "cse") >= 1
    assert "mul" not in ops  # x*0 became a constant; the dead multiply is gone
    assert_honest(graph_of([out]), g, kinds=("normal", "large"))


def test_random_ops_are_never_merged():
    x = x_in((3, 4))

    def rand() -> object:
        return make_node("aten_fallback", [x], target="aten.rand_like.default", args=(("$in", 0),))

    out = make_node("add", [rand(), rand()])
    g, log = apply(graph_of([out]))
    assert fired(log, "cse") == 0
    assert out.inputs[0] is not out.inputs[1] and g.outputs[0] is out


def test_assume_finite_rules_are_off_by_default():
    x = x_in((2, 2))
    out = make_node("mul", [x, const_node(0.0)])
    g, log = rewrite_graph(graph_of([out]))
    assert g.outputs[0] is out and not log.events
    g, log = rewrite_graph(graph_of([out]), assume_finite=True)
    assert g.outputs[0].op == "full" and fired(log, times_zero) == 1
    # the default keeps nan semantics: inf * 0 is nan
    inputs = [torch.tensor([[float("inf"), 1.0], [2.0, float("nan")]])]
    from kernelwright.ir.interpret import interpret

    assert torch.isnan(interpret(graph_of([out]), inputs, {})[0][0]).sum() == 2


def test_an_output_never_becomes_an_alias_of_an_input():
    x = x_in((3,))
    g, log = rewrite_graph(graph_of([make_node("mul", [x, const_node(1.0)])]))
    assert g.outputs[0].op == "copy" and g.outputs[0].inputs[0] is x
    assert fired(log, "fresh_output") == 1


def test_a_rule_changing_the_output_type_is_a_bug_caught_at_once():
    @rule("exp", summary="broken on purpose")
    def broken(n, ctx):
        return make_node("sum", [n.inputs[0]], dims=(0,))

    with pytest.raises(AssertionError, match="shape/dtype must be kept"):
        apply(graph_of([make_node("exp", [x_in((3, 2))])]), broken)


def test_the_log_names_rules_and_places():
    w = p("linear.weight", (6, 8))
    out = make_node("mean", [make_node("linear", [x_in((4, 8)), w])], dims=(1,), keepdim=True)
    _, log = rewrite_graph(graph_of([out]))
    text = str(log)
    assert "reduce_of_matmul" in text and "mean(linear)" in text and "compute nodes" in text


def test_emitted_sources_of_rewritten_nodes_are_valid():
    # rewritten graphs use ordinary ops: each node still renders to an ATen expression
    w = p("w", (6, 8))
    out = make_node("sum", [make_node("linear", [x_in((4, 8)), w])], dims=(1,))
    g, _ = rewrite_graph(graph_of([out]))
    for node in g.nodes():
        if not node.is_leaf:
            assert aten_source(node.op, ["a"] * len(node.inputs), node.attrs)


def test_notes_for_later_stages_leave_the_graph_alone():
    a, b = x_in((6, 6)), x_in((6, 6), 1)
    prod = make_node("mm", [make_node("triu", [a], diagonal=0), make_node("triu", [b], diagonal=0)])
    y = make_node("mm", [a, b])
    outs = [prod, make_node("tril", [y], diagonal=0),
            make_node("sub", [make_node("amax", [a], dims=(1,)), make_node("mean", [a], dims=(1,))])]
    g, log = rewrite_graph(graph_of(outs))
    assert [n.rule for n in log.notes].count("triangular_gemm") == 2
    assert [n.rule for n in log.notes].count("shared_reduction_input") == 1
    assert g.outputs[0] is prod and not log.events
