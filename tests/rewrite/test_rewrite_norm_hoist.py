"""BatchNorm folding (eval mode only) and the derived-weight contract (`hoistable_nodes`)."""

from __future__ import annotations

import pytest
from rewrite_checks import KINDS, apply, assert_honest, fired, graph_of, p, x_in

from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import buffer_node, const_node, make_node
from kernelwright.rewrite import hoist_sources, hoistable_nodes, rewrite_graph
from kernelwright.rewrite.rules_norm import fold_batch_norm


def batch_norm(y, channels: int, *, training: bool = False, affine: bool = True):
    stats = [buffer_node("bn.running_mean", (channels,)), buffer_node("bn.running_var", (channels,))]
    params = [p("bn.weight", (channels,)), p("bn.bias", (channels,))] if affine else []
    return make_node("batch_norm", [y, *params, *stats], training=training, momentum=0.1, eps=1e-5,
                     has_weight=affine, has_bias=affine, has_running=True)


def conv(x, bias: bool = True, transposed: bool = False):
    weight = p("conv.weight", (3, 6, 3, 3) if transposed else (6, 3, 3, 3))
    return make_node("conv", [x, weight] + ([p("conv.bias", (6,))] if bias else []), stride=(1, 1),
                     padding=(1, 1), dilation=(1, 1), transposed=transposed, output_padding=(0, 0), groups=1,
                     has_bias=bias)


@pytest.mark.parametrize("producer", ["conv", "conv_no_bias", "linear"])
@pytest.mark.parametrize("affine", [True, False])
def test_eval_batch_norm_folds_into_the_producer(producer, affine):
    if producer == "linear":
        y = make_node("linear", [x_in((8, 5)), p("fc.weight", (6, 5)), p("fc.bias", (6,))], has_bias=True)
    else:
        y = conv(x_in((2, 3, 5, 5)), bias=producer == "conv")
    before = graph_of([make_node("relu", [batch_norm(y, 6, affine=affine)])])
    after, log = apply(before, fold_batch_norm)
    assert fired(log, fold_batch_norm) == 1
    assert not any(n.op == "batch_norm" for n in after.nodes())
    assert after.outputs[0].inputs[0].attr("has_bias")
    assert_honest(before, after, kinds=KINDS, positive=("bn.running_var",))


def test_batch_norm_never_folds_in_training_mode():
    y = conv(x_in((2, 3, 5, 5)))
    out = batch_norm(y, 6, training=True)
    for graph in (graph_of([out]), graph_of([batch_norm(y, 6)], training=True)):
        after, log = apply(graph, fold_batch_norm)
        assert not log.events and after.outputs[0] is graph.outputs[0]


def test_batch_norm_fold_negative():
    y = conv(x_in((2, 3, 5, 5)))
    shared = graph_of([batch_norm(y, 6), y])  # the unnormalized conv output is needed too
    assert not apply(shared, fold_batch_norm)[1].events
    transposed = graph_of([batch_norm(conv(x_in((2, 6, 5, 5)), transposed=True), 3 * 2)])
    assert not apply(transposed, fold_batch_norm)[1].events
    rank3 = make_node("linear", [x_in((2, 6, 5)), p("fc.weight", (6, 5))])  # BN1d channels are dim 1 here
    assert not apply(graph_of([batch_norm(rank3, 6)]), fold_batch_norm)[1].events


def test_hoistable_nodes_are_the_param_only_roots_read_per_call():
    x, w, b = x_in((4, 8)), p("fc.weight", (6, 8)), p("fc.bias", (6,))
    out = make_node("mul", [make_node("mean", [make_node("linear", [x, w, b], has_bias=True)], dims=(1,)),
                            const_node(2.0)])
    graph, _ = rewrite_graph(graph_of([out]))
    roots = hoistable_nodes(graph)
    assert {r.shape for r in roots} == {(1, 8), (1,)}
    gemv = next(n for n in graph.nodes() if n.op == "linear")
    assert gemv.shape == (4, 1) and all(r in gemv.inputs for r in roots)
    assert {hoist_sources(r) for r in roots} == {("fc.weight",), ("fc.bias",)}


def test_hoistable_nodes_exclude_outputs_views_and_mutated_buffers():
    x, w = x_in((4, 8)), p("w", (8, 6))
    stat = buffer_node("running", (6,))
    scaled_stat = make_node("mul", [stat, const_node(0.9)])
    view = make_node("permute", [p("v", (6, 8))], dims=(1, 0))
    graph = Graph(
        inputs=(x,), params=(w, stat, view.inputs[0]),
        outputs=(make_node("mm", [x, make_node("mul", [w, const_node(2.0)])]),  # hoisted: the scaled weight
                 make_node("mm", [x, view]),  # a pure view: nothing to cache
                 make_node("exp", [w])),  # a graph output: never cached
        mutations=(("running", make_node("add", [scaled_stat, make_node("sum", [x], dims=(0, 1))])),),
        output_kind="tuple",
    )
    assert [(r.op, hoist_sources(r)) for r in hoistable_nodes(graph)] == [("mul", ("w",))]


def test_derived_weights_recomputed_from_new_parameters_match_the_model():
    """What the emitter's cache must reproduce: with other parameter values, the hoisted subgraph is
    recomputed and the rewritten graph still equals the original."""
    x, w = x_in((4, 8)), p("w", (6, 8))
    before = graph_of([make_node("sum", [make_node("linear", [x, w])], dims=(1,))])
    after, _ = rewrite_graph(before)
    assert hoistable_nodes(after)
    assert_honest(before, after, seeds=(3, 4, 5), kinds=("normal",))


def test_views_over_a_derived_value_stay_per_call():
    """x @ (w * 2).T: the scaled weight is cached, its transpose stays visible to the planner."""
    x, w = x_in((4, 8)), p("w", (6, 8))
    scaled = make_node("mul", [w, const_node(2.0)])
    transposed = make_node("permute", [scaled], dims=(1, 0))
    graph = Graph(inputs=(x,), params=(w,), outputs=(make_node("mm", [x, transposed]),))
    assert hoistable_nodes(graph) == [scaled]
    # read by another cached value too: the view is cached as well
    summed = make_node("sum", [transposed], dims=(0,))
    out = make_node("add", [make_node("mm", [x, transposed]), summed])
    graph = Graph(inputs=(x,), params=(w,), outputs=(out,))
    assert hoistable_nodes(graph) == [transposed, summed]
