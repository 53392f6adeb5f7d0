"""View-chain and reduction rules: positive, negative, property checks."""

from __future__ import annotations

import pytest
import torch
from rewrite_checks import EXACT_KINDS, KINDS, apply, assert_honest, fired, graph_of, values, x_in

from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import const_node, input_node, make_node
from kernelwright.rewrite.rules_reduce import (
    minmax_of_monotone,
    pick_of_log_softmax,
    reduce_of_expand,
    reduce_of_scaled,
    split_reduction_by_rows,
)
from kernelwright.rewrite.rules_views import (
    cancel_flips,
    full_slice,
    merge_permutes,
    merge_shape_views,
    same_dtype_cast,
)


def check(out, rule, *, fires: bool, kinds=EXACT_KINDS, extra=()):
    before = graph_of([out, *extra])
    after, log = apply(before, rule)
    if not fires:
        assert fired(log, rule) == 0 and after.outputs[0] is out
        return after
    assert fired(log, rule) >= 1
    assert_honest(before, after, kinds=kinds)
    return after


def test_permute_chains_compose_and_identities_vanish():
    x = x_in((2, 3, 4))
    twice = make_node("permute", [make_node("permute", [x], dims=(2, 0, 1))], dims=(1, 0, 2))
    after = check(twice, merge_permutes, fires=True)
    assert after.outputs[0].op == "permute" and after.outputs[0].inputs[0] is x
    back = make_node("permute", [make_node("permute", [x], dims=(2, 0, 1))], dims=(1, 2, 0))
    assert check(back, merge_permutes, fires=True).outputs[0] is x
    check(make_node("permute", [make_node("exp", [x])], dims=(1, 0, 2)), merge_permutes, fires=False)


def test_reshape_expand_flip_cast_slice_chains():
    x = x_in((4, 6))
    r = make_node("reshape", [make_node("reshape", [x], shape=(2, 12))], shape=(8, 3))
    assert check(r, merge_shape_views, fires=True).outputs[0].inputs[0] is x
    assert check(make_node("reshape", [x], shape=(4, 6)), merge_shape_views, fires=True).outputs[0] is x
    v = x_in((1, 6), 1)
    e = make_node("expand", [make_node("expand", [v], shape=(3, 6))], shape=(2, 3, 6))
    assert check(e, merge_shape_views, fires=True).outputs[0].inputs[0] is v
    f = make_node("flip", [make_node("flip", [x], dims=(1,))], dims=(1,))
    assert check(f, cancel_flips, fires=True).outputs[0] is x
    check(make_node("flip", [make_node("flip", [x], dims=(0,))], dims=(1,)), cancel_flips, fires=False)
    assert check(make_node("cast", [x], dtype=torch.float32), same_dtype_cast, fires=True).outputs[0] is x
    check(make_node("cast", [x], dtype=torch.float64), same_dtype_cast, fires=False)
    whole = make_node("slice", [x], dim=1, start=0, end=6, step=1)
    assert check(whole, full_slice, fires=True).outputs[0] is x
    check(make_node("slice", [x], dim=1, start=1, end=6, step=1), full_slice, fires=False)


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("scale_kind", ["const", "div", "neg", "per_row"])
def test_reduce_of_scaled(op, scale_kind):
    x = x_in((5, 7))
    if scale_kind == "const":
        inner = make_node("mul", [const_node(3.5), x])
    elif scale_kind == "div":
        inner = make_node("div", [x, const_node(7.0)])
    elif scale_kind == "neg":
        inner = make_node("neg", [x])
    else:
        inner = make_node("mul", [x, x_in((5, 1), 1)])  # one value per row: constant along dim 1
    after = check(make_node(op, [inner], dims=(1,), keepdim=True), reduce_of_scaled, fires=True, kinds=KINDS)
    assert after.outputs[0].op == inner.op


def test_reduce_of_scaled_negative():
    x = x_in((5, 7))
    varying = make_node("mul", [x, x_in((1, 7), 1)])  # varies along the reduced dim
    check(make_node("sum", [varying], dims=(1,)), reduce_of_scaled, fires=False)
    shared = make_node("mul", [x, const_node(2.0)])  # the scaled tensor is needed anyway
    check(make_node("sum", [shared], dims=(1,)), reduce_of_scaled, fires=False, extra=[shared])
    reciprocal = make_node("div", [const_node(1.0), x])
    check(make_node("sum", [reciprocal], dims=(1,)), reduce_of_scaled, fires=False)


@pytest.mark.parametrize("keepdim", [True, False])
def test_reduce_of_scaled_takes_a_factor_out_of_a_product(keepdim):
    """Cosine similarity: sum((x / |x|) * (y / |y|)) -> sum(x * y) / |x| / |y|, the per-row factors met in
    keepdim form (one shape for the sibling sums of one kernel), then viewed as the caller's shape."""
    x, y = x_in((5, 7)), x_in((5, 7), 1)

    def unit(v):
        norm = make_node("sqrt", [make_node("sum", [make_node("mul", [v, v])], dims=(1,), keepdim=True)])
        return make_node("div", [v, make_node("clamp", [norm], min=1e-8, max=None)])

    dot = make_node("sum", [make_node("mul", [unit(x), unit(y)])], dims=(1,), keepdim=keepdim)
    after = check(dot, reduce_of_scaled, fires=True, kinds=KINDS)
    sums = [n for n in after.nodes() if n.op == "sum"]
    assert len(sums) == 3 and all(n.attr("keepdim") for n in sums)
    assert {n.inputs[0].op for n in sums} == {"mul"} and all(n.inputs[0].inputs[0].is_leaf for n in sums)
    assert after.outputs[0].shape == dot.shape


def test_reduce_of_scaled_keeps_a_factor_that_varies_or_is_shared():
    x, y = x_in((5, 7)), x_in((5, 7), 1)
    varying = make_node("div", [x, x_in((1, 7), 2)])
    check(make_node("sum", [make_node("mul", [varying, y])], dims=(1,)), reduce_of_scaled, fires=False)
    shared = make_node("div", [x, x_in((5, 1), 2)])
    product = make_node("mul", [shared, y])
    check(make_node("sum", [product], dims=(1,)), reduce_of_scaled, fires=False, extra=[shared])


def _log_softmax_divergence(shape):
    s, t = x_in(shape), x_in(shape, 1)
    ls = make_node("log_softmax", [make_node("div", [s, const_node(2.0)])], dim=len(shape) - 1)
    lt = make_node("log_softmax", [make_node("div", [t, const_node(2.0)])], dim=len(shape) - 1)
    return make_node("mul", [make_node("exp", [lt]), make_node("sub", [lt, ls])])


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_split_reduction_by_rows(op, keepdim):
    """A full reduction of row-wise work (a distillation loss over log_softmax rows) becomes per-row
    reductions and a reduction of the rows: the row kernel reduces as it goes."""
    out = make_node(op, [_log_softmax_divergence((3, 5, 9))], dims=(0, 1, 2), keepdim=keepdim)
    after = check(out, split_reduction_by_rows, fires=True, kinds=KINDS)
    outer = after.outputs[0]
    inner = outer.inputs[0]
    assert outer.op == inner.op == op and tuple(inner.attr("dims")) == (2,)
    assert tuple(outer.attr("dims")) == (0, 1) and outer.shape == out.shape


@pytest.mark.parametrize("build", [
    # layer_norm over the last two dims, squared: rows are (sample) slices of two dims
    lambda x: make_node("mul", [make_node("layer_norm", [x], normalized_ndim=2, normalized_shape=(3, 6),
                                                      eps=1e-5, has_weight=False, has_bias=False)] * 2),
    # x minus its row mean (a keepdim reduction broadcast back), squared
    lambda x: make_node("pow", [make_node("sub", [x, make_node("mean", [x], dims=(2,), keepdim=True)]),
                                const_node(2.0)]),
])
def test_split_reduction_by_rows_finds_norms_and_broadcast_row_statistics(build):
    out = make_node("sum", [build(x_in((4, 3, 6)))], dims=(0, 1, 2), keepdim=False)
    after = check(out, split_reduction_by_rows, fires=True, kinds=KINDS)
    assert after.outputs[0].inputs[0].op == "sum"


@pytest.mark.parametrize("build, dims", [
    (lambda x: make_node("mul", [x, x]), (0, 1)),                                   # nothing row-wise
    (lambda x: make_node("exp", [make_node("softmax", [x], dim=1)]), (1,)),        # already per row
    # a matmul between the row-wise op and the reduction
    (lambda x: make_node("mm", [make_node("softmax", [x], dim=1), x_in((6, 6), 1)]), (0, 1)),
])
def test_split_reduction_by_rows_negative(build, dims):
    check(make_node("sum", [build(x_in((4, 6)))], dims=dims), split_reduction_by_rows, fires=False)


def _gather(x, index, dim):
    return make_node("aten_fallback", [x, index], target="aten.gather.default",
                     args=(("$in", 0), dim, ("$in", 1)), kwargs=())


@pytest.mark.parametrize("shape, dim, picks", [((37, 1001), 1, 1), ((37, 1001), -1, 3), ((5, 9, 4), 1, 2)])
def test_pick_of_log_softmax(shape, dim, picks):
    """Cross entropy's pick: gather(log_softmax(x), d, i) -> gather(x, d, i) - logsumexp(x, d): the same
    values (float64 oracle, on ordinary, large and spread logits), and no log_softmax left to write out."""
    x = x_in(shape)
    index_shape = tuple(picks if k == dim % len(shape) else size for k, size in enumerate(shape))
    index = input_node("i", 1, index_shape, dtype=torch.int64)
    out = _gather(make_node("log_softmax", [x], dim=dim), index, dim)
    before = graph_of([out])
    after, log = apply(before, pick_of_log_softmax)
    assert fired(log, pick_of_log_softmax) == 1
    assert not any(n.op == "log_softmax" for n in after.nodes())
    assert any(n.op == "logsumexp" for n in after.nodes())
    gen = torch.Generator().manual_seed(0)
    for kind in ("normal", "large", "spread"):
        logits = values(shape, kind, gen)
        picked = torch.randint(0, shape[dim], index_shape, generator=gen)
        oracle = interpret(before, [logits.double(), picked], {}, dtype=torch.float64)[0][0]
        got = interpret(after, [logits, picked], {})[0][0]
        assert got.dtype == torch.float32 and got.shape == oracle.shape
        torch.testing.assert_close(got.double(), oracle, rtol=1e-5, atol=1e-5 * float(oracle.abs().max()))


def test_pick_of_log_softmax_negative():
    x = x_in((6, 10))
    index = input_node("i", 1, (6, 1), dtype=torch.int64)
    other_dim = make_node("log_softmax", [x], dim=0)          # normalized over the other dim
    check(_gather(other_dim, index, 1), pick_of_log_softmax, fires=False)
    shared = make_node("log_softmax", [x], dim=1)             # the log-probabilities are an output too
    check(_gather(shared, index, 1), pick_of_log_softmax, fires=False, extra=[shared])
    fewer_rows = input_node("i", 1, (3, 1), dtype=torch.int64)  # picks from a part of the rows
    check(_gather(make_node("log_softmax", [x], dim=1), fewer_rows, 1), pick_of_log_softmax, fires=False)


@pytest.mark.parametrize("build, reduced_op", [
    (lambda x: make_node("sigmoid", [x]), "amax"),
    (lambda x: make_node("clamp", [x], min=-0.5, max=0.5), "amax"),
    (lambda x: make_node("leaky_relu", [x], negative_slope=0.1), "amax"),
    (lambda x: make_node("neg", [x]), "amin"),
    (lambda x: make_node("mul", [x, const_node(-2.0)]), "amin"),
    (lambda x: make_node("add", [x, const_node(3.0)]), "amax"),
])
def test_minmax_of_monotone(build, reduced_op):
    f = build(x_in((4, 9)))
    after = check(make_node("amax", [f], dims=(1,)), minmax_of_monotone, fires=True)
    out = after.outputs[0]
    assert out.op == f.op and out.inputs[0].op == reduced_op and out.shape == (4,)


@pytest.mark.parametrize("build", [
    lambda x: make_node("gelu", [x], approximate="none"),  # not monotone
    lambda x: make_node("log", [x]),  # nan for negative elements
    lambda x: make_node("mul", [x, x]),
])
def test_minmax_of_monotone_negative(build):
    check(make_node("amin", [build(x_in((4, 9)))], dims=(1,)), minmax_of_monotone, fires=False)
    shared = make_node("tanh", [x_in((4, 9))])
    check(make_node("amin", [shared], dims=(1,)), minmax_of_monotone, fires=False, extra=[shared])


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dims, keepdim", [((0,), False), ((0, 2), True), ((1,), False), ((0, 1), False)])
def test_reduce_of_expand(op, dims, keepdim):
    x = x_in((5, 1))
    out = make_node(op, [make_node("expand", [x], shape=(3, 5, 4))], dims=dims, keepdim=keepdim)
    repeated = any(d in (0, 2) for d in dims)
    after = check(out, reduce_of_expand, fires=repeated, kinds=KINDS)
    if repeated:
        assert not any(n.op == op and n.inputs[0].op == "expand" for n in after.nodes())
