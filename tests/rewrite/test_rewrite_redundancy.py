"""Redundancy rules: positive cases, negative cases (precondition false -> untouched), property checks."""

from __future__ import annotations

import pytest
import torch
from rewrite_checks import EXACT_KINDS, apply, assert_honest, fired, graph_of, x_in

from kernelwright.ir.ops import const_node, make_node
from kernelwright.rewrite.rules_redundancy import (
    arg_reduce_over_unit_dim,
    clamp_to_point,
    idempotent,
    involution,
    merge_clamps,
    min_max_constant_to_clamp,
    neutral_operand,
    reduce_over_unit_dims,
    self_difference,
    softmax_over_unit_dim,
    times_zero,
)


def check(out, rule, *, fires: bool, assume_finite: bool = False, kinds=EXACT_KINDS):
    before = graph_of([out])
    after, log = apply(before, rule, assume_finite=assume_finite)
    if not fires:
        assert fired(log, rule) == 0 and after.outputs[0] is out
        return after
    assert fired(log, rule) >= 1
    assert_honest(before, after, kinds=kinds)
    return after


@pytest.mark.parametrize("op, value, const_first", [
    ("mul", 1.0, False), ("mul", 1, True), ("add", 0.0, True), ("add", 0, False), ("sub", 0.0, False),
    ("div", 1.0, False), ("pow", 1.0, False),
])
def test_neutral_operand_fires(op, value, const_first):
    x = x_in((3, 5))
    args = [const_node(value), x] if const_first else [x, const_node(value)]
    after = check(make_node(op, args), neutral_operand, fires=True)
    assert after.outputs[0] is x


def test_neutral_operand_broadcasts_when_the_constant_is_bigger():
    x = x_in((5,))
    ones = make_node("full", [], shape=(3, 5), value=1.0, dtype=torch.float32)
    after = check(make_node("mul", [x, ones]), neutral_operand, fires=True)
    assert after.outputs[0].op == "expand"


@pytest.mark.parametrize("build", [
    lambda x: make_node("mul", [x, const_node(2.0)]),
    lambda x: make_node("sub", [const_node(0.0), x]),  # 0 - x is -x, not x
    lambda x: make_node("div", [x, const_node(1.0)], rounding_mode="floor"),  # floor(x / 1) is not x
    lambda x: make_node("div", [const_node(1.0), x]),
    lambda x: make_node("mul", [make_node("cast", [x], dtype=torch.int64), const_node(1.0)]),  # promotes
])
def test_neutral_operand_negative(build):
    out = build(x_in((3, 5)))
    check(out, neutral_operand, fires=False)


def test_times_zero_and_self_difference_only_assuming_finite():
    x = x_in((4, 3))
    cases = ((make_node("mul", [const_node(0.0), x]), times_zero),
             (make_node("sub", [x, x]), self_difference))
    for out, r in cases:
        check(out, r, fires=False)
        after = check(out, r, fires=True, assume_finite=True, kinds=("normal", "large", "cancel"))
        assert after.outputs[0].op == "full"
    check(make_node("sub", [x, x_in((4, 3), 1)]), self_difference, fires=False, assume_finite=True)


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod", "logsumexp"])
@pytest.mark.parametrize("dims, keepdim", [((1,), False), ((1,), True), ((1, 3), True), ((3, 1), False)])
def test_reduce_over_unit_dims(op, dims, keepdim):
    out = make_node(op, [x_in((3, 1, 4, 1))], dims=dims, keepdim=keepdim)
    after = check(out, reduce_over_unit_dims, fires=True)
    assert not any(n.op == op for n in after.nodes())


def test_reduce_over_unit_dims_negative():
    check(make_node("sum", [x_in((3, 2, 4))], dims=(1,)), reduce_over_unit_dims, fires=False)
    # size-1 dims among others are left alone: the reduction stays one with its siblings over the same
    # elements (a batch-1 BatchNorm's running mean beside its statistics)
    check(make_node("mean", [x_in((1, 3, 4))], dims=(0, 2)), reduce_over_unit_dims, fires=False)
    # var over one element is nan (correction 1): not in the rule's op list at all
    check(make_node("var", [x_in((3, 1))], dims=(1,), correction=1), reduce_over_unit_dims, fires=False)


def test_arg_reduce_over_unit_dim():
    after = check(make_node("argmax", [x_in((3, 1))], dim=1), arg_reduce_over_unit_dim, fires=True)
    assert after.outputs[0].op == "full"
    check(make_node("argmin", [x_in((3, 2))], dim=1), arg_reduce_over_unit_dim, fires=False)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_unit_dim_assumes_finite(op):
    out = make_node(op, [x_in((4, 1))], dim=1)
    check(out, softmax_over_unit_dim, fires=False)
    check(out, softmax_over_unit_dim, fires=True, assume_finite=True, kinds=("normal", "large"))
    check(make_node(op, [x_in((4, 2))], dim=1), softmax_over_unit_dim, fires=False, assume_finite=True)


@pytest.mark.parametrize("op", ["relu", "abs", "floor", "ceil", "round", "trunc", "sign"])
def test_idempotent(op):
    x = x_in((6, 2))
    inner = make_node(op, [x])
    after = check(make_node(op, [inner]), idempotent, fires=True)
    assert after.outputs[0] is inner


def test_idempotent_and_involution_negative():
    x = x_in((6, 2))
    check(make_node("relu", [make_node("abs", [x])]), idempotent, fires=False)
    check(make_node("neg", [make_node("abs", [x])]), involution, fires=False)
    after = check(make_node("neg", [make_node("neg", [x])]), involution, fires=True)
    assert after.outputs[0] is x


@pytest.mark.parametrize("op, bound", [("maximum", "min"), ("minimum", "max")])
def test_min_max_constant_to_clamp(op, bound):
    x = x_in((5, 3))
    quarter = make_node("full", [], shape=(), value=0.25, dtype=torch.float32)
    after = check(make_node(op, [quarter, x]), min_max_constant_to_clamp, fires=True)
    assert after.outputs[0].op == "clamp" and after.outputs[0].attr(bound) == 0.25
    check(make_node(op, [x, x_in((5, 3), 1)]), min_max_constant_to_clamp, fires=False)
    nan = make_node("full", [], shape=(), value=float("nan"), dtype=torch.float32)
    check(make_node(op, [x, nan]), min_max_constant_to_clamp, fires=False)


@pytest.mark.parametrize("inner_bounds, outer_bounds, merged", [
    ((-1.0, 1.0), (0.0, 2.0), (0.0, 1.0)),
    ((None, 0.5), (-0.5, None), (-0.5, 0.5)),
    ("relu", (-1.0, 0.3), (0.0, 0.3)),
    ((0.2, None), "relu", (0.2, None)),
])
def test_merge_clamps(inner_bounds, outer_bounds, merged):
    def clamp(x, bounds):
        if bounds == "relu":
            return make_node("relu", [x])
        return make_node("clamp", [x], min=bounds[0], max=bounds[1])

    x = x_in((7, 3))
    after = check(clamp(clamp(x, inner_bounds), outer_bounds), merge_clamps, fires=True)
    out = after.outputs[0]
    assert out.op == "clamp" and (out.attr("min"), out.attr("max")) == merged and out.inputs[0] is x


def test_disjoint_clamps_become_a_constant_only_assuming_finite():
    x = x_in((7, 3))
    out = make_node("clamp", [make_node("clamp", [x], min=None, max=-1.0)], min=0.0, max=2.0)
    check(out, merge_clamps, fires=False)
    after = check(out, merge_clamps, fires=True, assume_finite=True, kinds=("normal", "large"))
    assert after.outputs[0].op == "full" and after.outputs[0].attr("value") == 0.0
    point = make_node("clamp", [x], min=0.5, max=0.5)
    check(point, clamp_to_point, fires=False)
    after = check(point, clamp_to_point, fires=True, assume_finite=True, kinds=("normal",))
    assert after.outputs[0].op == "full"
