"""Linearity and structured-matrix rules: positive, negative, property checks on adversarial values."""

from __future__ import annotations

import random

import pytest
import torch
from rewrite_checks import KINDS, apply, assert_honest, fired, graph_of, p, x_in

from kernelwright.ir.ops import const_node, make_node
from kernelwright.rewrite.rules_linear import (
    compose_linear_maps,
    fold_scale_after_matmul,
    fold_scale_before_matmul,
    fold_shift_into_bias,
    linear_of_every_select,
    reduce_of_matmul,
    reduce_rows_of_matmul,
)
from kernelwright.rewrite.rules_structured import diagonal_matmul, zero_matmul


def check(out, *rules, fires: bool, kinds=KINDS, extra=(), assume_finite=False, reassociate=False):
    before = graph_of([out, *extra])
    after, log = apply(before, *rules, assume_finite=assume_finite, allow_reassociation=reassociate)
    if not fires:
        assert not log.events and after.outputs[0] is out
        return after
    assert sum(fired(log, r) for r in rules) >= 1
    assert_honest(before, after, kinds=kinds)
    return after


def matmul(kind: str, rows: int, k: int, n: int, bias: bool = True, x=None):
    if kind == "bmm":
        x = make_node("reshape", [x_in((rows, k))], shape=(2, rows // 2, k)) if x is None else x
        return make_node("bmm", [x, p("w", (2, k, n))])
    x = x_in((rows, k)) if x is None else x
    if kind == "linear":
        return make_node("linear", [x, p("w", (n, k))] + ([p("b", (n,))] if bias else []), has_bias=bias)
    return make_node("mm", [x, p("w", (k, n))])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["linear", "mm", "bmm"])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reduce_of_matmul_becomes_gemv(seed, kind, op):
    rng = random.Random(seed)
    rows, k, n = 2 * rng.randint(1, 6), rng.randint(1, 12), rng.randint(2, 12)
    y = matmul(kind, rows, k, n, bias=bool(seed % 2))
    out = make_node(op, [y], dims=(len(y.shape) - 1,), keepdim=bool(seed % 2))
    after = check(out, reduce_of_matmul, fires=True)
    products = [node for node in after.nodes() if node.op == kind]
    assert len(products) == 1 and products[0].shape[-1] == 1  # a GEMV: one output feature


def test_reduce_of_matmul_negative():
    y = matmul("linear", 4, 5, 6)
    check(make_node("sum", [y], dims=(0,)), reduce_of_matmul, fires=False)  # rows, and linear has a bias
    check(make_node("sum", [y], dims=(0, 1)), reduce_of_matmul, fires=False)
    check(make_node("sum", [y], dims=(1,)), reduce_of_matmul, fires=False, extra=[y])  # GEMM needed anyway


@pytest.mark.parametrize("kind", ["mm", "bmm"])
def test_reduce_rows_of_matmul(kind):
    y = matmul(kind, 6, 5, 7)
    after = check(make_node("mean", [y], dims=(len(y.shape) - 2,)), reduce_rows_of_matmul, fires=True)
    assert [n for n in after.nodes() if n.op == kind][0].shape[-2] == 1


@pytest.mark.parametrize("kind", ["linear", "mm", "bmm"])
@pytest.mark.parametrize("scale", ["const", "int_const", "vector", "div"])
def test_fold_scale_after_matmul(kind, scale):
    y = matmul(kind, 4, 5, 6)
    if scale == "const":
        out = make_node("mul", [const_node(0.5), y])
    elif scale == "int_const":
        out = make_node("mul", [y, const_node(3)])
    elif scale == "vector":
        out = make_node("mul", [y, p("s", (6,))])
    else:
        out = make_node("div", [y, const_node(3.0)])
    after = check(out, fold_scale_after_matmul, fires=True)
    assert after.outputs[0].op == kind


def test_fold_scale_after_matmul_negative():
    y = matmul("linear", 4, 5, 6)
    per_row_input = make_node("mul", [y, x_in((4, 1), 1)])
    check(per_row_input, fold_scale_after_matmul, fires=False)
    check(make_node("mul", [y, p("s", (4, 1))]), fold_scale_after_matmul, fires=False)  # per row
    check(make_node("mul", [y, const_node(2.0)]), fold_scale_after_matmul, fires=False, extra=[y])
    activation_weight = make_node("mm", [x_in((4, 5)), x_in((5, 6), 1)])
    check(make_node("mul", [activation_weight, const_node(2.0)]), fold_scale_after_matmul, fires=False)
    check(make_node("div", [y, const_node(2.0)], rounding_mode="floor"), fold_scale_after_matmul, fires=False)


@pytest.mark.parametrize("kind", ["linear", "mm", "bmm"])
@pytest.mark.parametrize("scale", ["const", "vector"])
def test_fold_scale_before_matmul(kind, scale):
    x = x_in((2, 2, 5) if kind == "bmm" else (4, 5))
    s = const_node(0.25) if scale == "const" else p("s", (5,))
    after = check(matmul(kind, 4, 5, 6, x=make_node("mul", [x, s])), fold_scale_before_matmul, fires=True)
    assert not any(n.op == "mul" and n.inputs[0] is x for n in after.nodes())


def test_fold_scale_before_matmul_negative():
    x = x_in((4, 5))
    check(matmul("linear", 4, 5, 6, x=make_node("mul", [x, x_in((4, 1), 1)])), fold_scale_before_matmul,
          fires=False)
    scaled = make_node("mul", [x, const_node(2.0)])
    check(matmul("linear", 4, 5, 6, x=scaled), fold_scale_before_matmul, fires=False, extra=[scaled])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("shift", ["const", "vector"])
def test_fold_shift_into_bias(bias, op, shift):
    y = matmul("linear", 4, 5, 6, bias=bias)
    t = const_node(1.5) if shift == "const" else p("t", (1, 6))
    after = check(make_node(op, [y, t]), fold_shift_into_bias, fires=True)
    assert after.outputs[0].op == "linear" and len(after.outputs[0].inputs) == 3
    assert after.outputs[0].attr("has_bias")


def test_fold_shift_into_bias_negative():
    y = matmul("linear", 4, 5, 6)
    check(make_node("sub", [p("t", (6,)), y]), fold_shift_into_bias, fires=False)  # t - y negates y
    check(make_node("add", [y, x_in((4, 6), 1)]), fold_shift_into_bias, fires=False)  # a residual, not a bias
    check(make_node("add", [y, p("t", (4, 6))]), fold_shift_into_bias, fires=False)  # not per feature


@pytest.mark.parametrize("bias1, bias2", [(True, True), (False, True), (True, False), (False, False)])
def test_compose_linear_maps_when_it_saves_flops(bias1, bias2):
    x = x_in((3, 4))
    inner = make_node("linear", [x, p("w1", (32, 4))] + ([p("b1", (32,))] if bias1 else []), has_bias=bias1)
    out = make_node("linear", [inner, p("w2", (5, 32))] + ([p("b2", (5,))] if bias2 else []), has_bias=bias2)
    check(out, compose_linear_maps, fires=False)  # opt-in only
    after = check(out, compose_linear_maps, fires=True, reassociate=True, kinds=("normal", "large", "spread"))
    assert [n.op for n in after.nodes() if n.op == "linear" and n.inputs[0] is x] == ["linear"]
    mm = make_node("mm", [make_node("mm", [x, p("w1", (4, 32))]), p("w2", (32, 5))])
    check(mm, compose_linear_maps, fires=True, reassociate=True, kinds=("normal", "large", "spread"))


def test_compose_linear_maps_leaves_the_tolerance_under_cancellation():
    """Why the rule is opt-in: alternating +-1000 weights cancel in x W1^T, and W2 W1 rounded first loses
    the small remainder."""
    out = make_node("mm", [make_node("mm", [x_in((3, 4)), p("w1", (4, 32))]), p("w2", (32, 5))])
    after, _ = apply(graph_of([out]), compose_linear_maps, allow_reassociation=True)
    with pytest.raises(AssertionError, match="rewritten error"):
        assert_honest(graph_of([out]), after, kinds=("cancel",))


def test_compose_linear_maps_negative():
    x = x_in((3, 16))
    bottleneck = make_node("linear", [make_node("linear", [x, p("w1", (2, 16))]), p("w2", (16, 2))])
    # 16*16 > 16*2 + 2*16: composing costs more
    check(bottleneck, compose_linear_maps, fires=False, reassociate=True)
    hidden = make_node("linear", [x, p("w1", (32, 16))])
    nonlinear = make_node("linear", [make_node("relu", [hidden]), p("w2", (4, 32))])
    check(nonlinear, compose_linear_maps, fires=False, reassociate=True)


def diag_matrix(v, n: int, identity: bool = False):
    """torch.diag(v) / torch.eye(n) as torch.export decomposes them."""
    rows = make_node("arange", [], start=0, end=n, step=1, dtype=torch.int64)
    mask = make_node("eq", [rows, make_node("reshape", [rows], shape=(n, 1))])
    if identity:
        return make_node("cast", [mask], dtype=torch.float32)
    zero = make_node("full", [], shape=(), value=0.0, dtype=torch.float32)
    return make_node("where", [mask, make_node("reshape", [v], shape=(1, n)), zero])


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("identity", [False, True])
def test_diagonal_matmul_assuming_finite(side, identity):
    v, m = x_in((6,)), x_in((6, 6), 1)
    d = diag_matrix(v, 6, identity)
    out = make_node("mm", [d, m] if side == "left" else [m, d])
    check(out, diagonal_matmul, fires=False)  # inf in m would make a nan column in the real GEMM
    after = check(out, diagonal_matmul, fires=True, assume_finite=True)
    assert not any(n.op == "mm" for n in after.nodes())


def test_zero_matmul_assuming_finite():
    zeros = make_node("full", [], shape=(5, 3), value=0.0, dtype=torch.float32)
    out = make_node("mm", [x_in((4, 5)), zeros])
    check(out, zero_matmul, fires=False)
    assert check(out, zero_matmul, fires=True, assume_finite=True).outputs[0].op == "full"
    lin = make_node("linear", [make_node("full", [], shape=(4, 5), value=0.0, dtype=torch.float32),
                               p("w", (3, 5)), p("b", (3,))], has_bias=True)
    assert check(lin, zero_matmul, fires=True, assume_finite=True).outputs[0].op == "expand"


def _steps(x, dim: int, weights, indices=None):
    """One linear per select of `x` along `dim` (an unrolled RNN's input projection), stacked."""
    indices = range(x.shape[dim]) if indices is None else indices
    steps = [make_node("linear", [make_node("select", [x], dim=dim, index=i), *weights],
                       has_bias=len(weights) == 2) for i in indices]
    return make_node("cat", steps, dim=0) if len(steps) > 1 else steps[0]


@pytest.mark.parametrize("shape,dim,bias",
                         [((3, 4, 5), 1, True), ((4, 5), 0, False), ((2, 3, 2, 6), 0, True)])
def test_linear_of_every_select_becomes_one_linear(shape, dim, bias):
    weights = [p("w", (7, shape[-1]))] + ([p("b", (7,))] if bias else [])
    after = check(_steps(x_in(shape), dim, weights), linear_of_every_select, fires=True)
    linears = [n for n in after.nodes() if n.op == "linear"]
    assert len(linears) == 1 and linears[0].inputs[0].op == "input"  # one GEMM over all of x


def test_linear_of_every_select_negative():
    x, w, b = x_in((3, 4, 5)), p("w", (7, 5)), p("b", (7,))
    check(_steps(x, 1, [w, b], indices=[0, 1, 3]), linear_of_every_select, fires=False)  # index 2 unused
    # Every index, but one step with another weight: hoisting would compute that step twice.
    mixed = make_node("cat", [_steps(x, 1, [w, b], indices=[0, 1, 2]),
                                _steps(x, 1, [p("w2", (7, 5)), b], indices=[3])], dim=0)
    check(mixed, linear_of_every_select, fires=False)
    single = x_in((1, 4, 5))  # a dim of one: nothing to batch
    check(_steps(single, 0, [w, b]), linear_of_every_select, fires=False)
