"""The pointwise family on the CPU: the op → CUDA table, literals, and every kernel variant compiling with
nvcc in one translation unit. `CASES` (hand-built graphs with input makers) is shared with the GPU tests
in test_pointwise_gpu.py."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import nvcc_check
from kernelwright.codegen.pointwise import (
    EXPRESSIONS,
    PointwiseConfig,
    c_literal,
    emit_statements,
    op_expression,
    render,
)
from kernelwright.environment import nvcc_path
from kernelwright.fuse import pointwise
from kernelwright.fuse.plan import FusionPlan, plan_fusion
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import OPS, const_node, input_node, make_node, param_node

POSITIVE_OPS = {"log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal"}
UNARY_ATTRS = {"gelu": {"approximate": "none"}, "softplus": {"beta": 2.0, "threshold": 5.0},
               "elu": {"alpha": 1.5, "scale": 1.0507, "input_scale": 1.0},
               "leaky_relu": {"negative_slope": 0.1},
               "clamp": {"min": -0.5, "max": 0.75}, "cast": {"dtype": torch.float64}}


@dataclass(frozen=True)
class Case:
    name: str
    graph: Graph
    make_inputs: Callable[[torch.device], tuple[list, dict]]   # (forward args, params by FQN)


def _x(shape, name="x", index=0, dtype=torch.float32):
    return input_node(name, index, shape, dtype)


def _randn(*shape, positive=False, scale=3.0):
    def make(device):
        t = torch.randn(*shape, device=device) * scale
        return t.abs() + 0.05 if positive else t
    return make


def unary_case(op: str, shape=(13, 17)) -> Case:
    x = _x(shape)
    y = make_node(op, [x], **UNARY_ATTRS.get(op, {}))
    make = _randn(*shape, positive=op in POSITIVE_OPS)
    return Case(f"unary_{op}", Graph((x,), (), (y,)), lambda d: ([make(d)], {}))


def division_range() -> Case:
    """a / b over the whole float range (kw::divide): random bit patterns of every exponent, the operands
    and quotients where IEEE division's fast path stops being exact, zeros, denormals, inf and NaN."""
    n = 1 << 20
    a, b = _x((n,)), _x((n,), "y", 1)

    def make(device):
        gen = torch.Generator(device="cpu").manual_seed(5)
        bits = torch.randint(-2**31, 2**31, (2, n), generator=gen, dtype=torch.int64).to(torch.int32)
        left, right = bits.view(torch.float32)
        special = torch.tensor([0.0, -0.0, 1e-45, -1e-40, 1.1754944e-38, 2**-100, 2**-101, 2**-125, 2**-126,
                                2**125, 2**126, 2**127, 3.4028235e38, float("inf"), -float("inf"),
                                float("nan"), 1.0, 3.0, 6.0, -7.0])
        grid = torch.cartesian_prod(special, special)
        left[:len(grid)], right[:len(grid)] = grid[:, 0], grid[:, 1]
        # b = 1.11...1: where a reciprocal rounded down would make the Newton step a tie; a quotient just
        # under FLT_MAX (its fallback may give inf, as div.full.f32 does)
        pairs = torch.tensor([[0x3F800000, 0x3FFFFFFF], [-0x40800000, 0x3FFFFFFF], [0x7F47F244, 0x3F47F245]],
                             dtype=torch.int32).view(torch.float32)
        left[len(grid):len(grid) + 3], right[len(grid):len(grid) + 3] = pairs[:, 0], pairs[:, 1]
        return [left.to(device), right.to(device)], {}
    return Case("range_div", Graph((a, b), (), (make_node("div", [a, b]),)), make)


def binary_case(op: str) -> Case:
    # [5, 1, 7] op [3, 1]: broadcast both ways into [5, 3, 7].
    a, b = _x((5, 1, 7)), _x((3, 1), "y", 1)
    y = make_node(op, [a, b])

    def make(device):
        left, right = torch.randn(5, 1, 7, device=device) * 3, torch.randn(3, 1, device=device) * 3
        if op == "pow":
            left = left.abs() + 0.1
        if op in ("div", "fmod", "remainder"):
            right = right.sign() * (right.abs() + 0.5)
        return [left, right], {}
    return Case(f"binary_{op}", Graph((a, b), (), (y,)), make)


def chain_with_views() -> Case:
    """bias add, permute, slice and an expand of a computed value, then a second same-shape output."""
    x, bias = _x((6, 10)), param_node("bias", (10,))
    a = make_node("tanh", [make_node("add", [x, bias])])
    t = make_node("slice", [make_node("permute", [a], dims=(1, 0))], dim=0, start=1, end=9, step=2)   # [4, 6]
    y = _x((4, 6), "y", 1)
    out = make_node("mul", [make_node("sigmoid", [t]), make_node("exp", [y])])
    also = make_node("neg", [y])
    graph = Graph((x, y), (bias,), (out, make_node("amax", [also], dims=(0,)), also), output_kind="tuple")
    return Case("chain_with_views", graph,
                lambda d: ([torch.randn(6, 10, device=d), torch.randn(4, 6, device=d)],
                           {"bias": torch.randn(10, device=d)}))


def select_expand_reshape() -> Case:
    x = _x((3, 4, 5))
    row = make_node("select", [x], dim=1, index=2)                             # [3, 5]
    grid = make_node("expand", [make_node("reshape", [row], shape=(3, 1, 5))], shape=(3, 4, 5))
    out = make_node("sub", [x, make_node("relu", [grid])])
    return Case("select_expand_reshape", Graph((x,), (), (out,)),
                lambda d: ([torch.randn(3, 4, 5, device=d)], {}))


def integer_and_bool() -> Case:
    i, j = _x((9, 11), "i", 0, torch.int64), _x((11,), "j", 1, torch.int64)
    q = make_node("div", [i, j], rounding_mode="floor")
    r = make_node("remainder", [i, j])
    positive, not_three = make_node("gt", [q, const_node(0)]), make_node("ne", [r, const_node(3)])
    mask = make_node("logical_and", [positive, not_three])
    picked = make_node("where", [mask, make_node("abs", [i]), make_node("mul", [r, const_node(-2)])])
    ratio = make_node("div", [picked, const_node(4)])                            # int / int -> float
    graph = Graph((i, j), (), (mask, picked, ratio), output_kind="tuple")

    def make(device):
        numerator = torch.randint(-50, 50, (9, 11), device=device)
        sign = torch.randint(0, 2, (11,), device=device) * 2 - 1
        denominator = torch.randint(1, 7, (11,), device=device) * sign
        return [numerator, denominator], {}
    return Case("integer_and_bool", graph, make)


def double_and_casts() -> Case:
    x = _x((7, 3), dtype=torch.float64)
    y = make_node("cast", [make_node("mul", [make_node("erf", [x]), const_node(0.3)])], dtype=torch.float32)
    z = make_node("cast", [make_node("round", [make_node("mul", [y, const_node(10.0)])])], dtype=torch.int32)
    return Case("double_and_casts", Graph((x,), (), (y, z), output_kind="tuple"),
                lambda d: ([torch.randn(7, 3, dtype=torch.float64, device=d)], {}))


def rank_zero() -> Case:
    s, x = param_node("scale", ()), _x(())
    out = make_node("mul", [make_node("exp", [x]), s])
    return Case("rank_zero", Graph((x,), (s,), (out,)),
                lambda d: ([torch.randn((), device=d)], {"scale": torch.randn((), device=d)}))


def special_values() -> Case:
    x = _x((4, 8))
    out = make_node("mul", [make_node("clamp", [x], min=None, max=1.0), const_node(float("-inf"))])
    nan = make_node("isnan", [make_node("add", [x, const_node(float("nan"))])])
    # predicates on NaN, inf and -inf themselves (converted to bool first, all three become `true`)
    inf, zero = make_node("isinf", [x]), make_node("logical_not", [x])
    return Case("special_values", Graph((x,), (), (out, nan, inf, zero), output_kind="tuple"),
                lambda d: ([torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0] * 8,
                                         device=d).reshape(4, 8)], {}))


def activation_range(op: str, dtype=torch.float32, **attrs) -> Case:
    """`op` over its whole range: a dense sweep of [-100, 100], the points where a formula changes branch
    (mish: 20, where e^x's square overflows: 44.4;
    tanh: 0.55), tiny values and inf, -inf, NaN."""
    points = [float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 0.55, -0.55,
              0.5499999, 0.5500001, 20.0, 20.0001, 19.9999, 44.0, 44.4, 45.0, 88.0, 89.0, -88.0, -104.0,
              700.0, -700.0]
    x = _x((2 * 4001 + len(points),), dtype=dtype)

    def make(device):
        sweeps = [torch.linspace(-100, 100, 4001, dtype=torch.float64),
                  torch.linspace(-2, 2, 4001, dtype=torch.float64)]
        return [torch.cat([*sweeps, torch.tensor(points, dtype=torch.float64)]).to(dtype).to(device)], {}
    name = "_".join([f"range_{op}", *map(str, attrs.values()), str(dtype).removeprefix("torch.")])
    return Case(name, Graph((x,), (), (make_node(op, [x], **attrs),)), make)


def band_case(name: str, x_shape, b_shape, dtype=torch.float32) -> Case:
    """x + b with b broadcast into x's shape: the flat kernel reads b as a band (kw::Band) when the config
    has `broadcast`."""
    x, b = _x(x_shape, dtype=dtype), _x(b_shape, "b", 1, dtype)

    def make(device):
        if dtype.is_floating_point:
            return [torch.randn(*x_shape, dtype=dtype, device=device),
                    torch.randn(*b_shape, dtype=dtype, device=device)], {}
        return [torch.randint(-50, 50, x_shape, dtype=dtype, device=device),
                torch.randint(-50, 50, b_shape, dtype=dtype, device=device)], {}
    return Case(f"band_{name}", Graph((x, b), (), (make_node("add", [x, b]),)), make)


def masked_bias() -> Case:
    """where(mask, x, b): a bool operand (vectors of 1-byte elements) beside float ones, b a row bias."""
    m, x, b = _x((6, 12), "m", 0, torch.bool), _x((6, 12), "x", 1), _x((12,), "b", 2)
    return Case("band_masked_bias", Graph((m, x, b), (), (make_node("where", [m, x, b]),)),
                lambda d: ([torch.rand(6, 12, device=d) > 0.5, torch.randn(6, 12, device=d),
                            torch.randn(12, device=d)], {}))


# (name, x shape, b shape, dtype): every kw::Band load form (vector, one value per vector, element by element)
BAND_SHAPES = [
    ("rows", (37, 24), (24,), torch.float32),               # Band<1, 24>: vectors
    ("rows_odd", (9, 13), (13,), torch.float32),            # Band<1, 13>: element by element
    ("column", (12, 8), (12, 1), torch.float32),            # Band<8, 12>: one value per vector
    ("column_odd", (5, 7), (5, 1), torch.float32),          # Band<7, 5>
    ("channel", (3, 4, 5, 6), (4, 1, 1), torch.float32),    # Band<30, 4>
    ("channel_even", (2, 3, 8, 8), (3, 1, 1), torch.float32),
    ("middle", (4, 6, 5), (6, 1), torch.float32),
    ("int8_rows", (7, 48), (48,), torch.int8),              # 16 elements per vector
    ("int8_rows_odd", (7, 20), (20,), torch.int8),
    ("double_rows", (6, 10), (10,), torch.float64),
    # large enough for whole tiles of every knob setting (up to 512 threads x 4 vectors)
    ("rows_big", (301, 96), (96,), torch.float32),
    ("column_big", (1000, 13), (1000, 1), torch.float32),
    ("channel_big", (5, 7, 33, 35), (7, 1, 1), torch.float32),
    ("int8_rows_big", (513, 80), (80,), torch.int8),
    # two bands (per sample and channel over channels-last data, an SE gate): vectors, element by element
    ("sample_channel", (3, 5, 7, 8), (3, 1, 1, 8), torch.float32),
    ("sample_channel_odd", (3, 5, 7, 6), (3, 1, 1, 6), torch.float32),
    ("two_runs_inner", (4, 6, 5, 3), (4, 1, 5, 1), torch.float32),
    ("sample_channel_big", (9, 17, 19, 64), (9, 1, 1, 64), torch.float32),
]
BAND_CASES = [band_case(*args) for args in BAND_SHAPES] + [masked_bias()]


def transposing_case(name: str, shape, dims, extra=None) -> Case:
    """copy(permute(x)) (a layout change, e.g. NCHW -> NHWC), optionally + `extra` (a contiguous operand
    of the output's shape) and a ReLU: the tiled kernel's shared-memory transpose, edges included."""
    x = _x(shape)
    out = make_node("copy", [make_node("permute", [x], dims=dims)])
    inputs, makers = [x], [_randn(*shape)]
    if extra is not None:
        y = _x(extra, "y", 1)
        out = make_node("relu", [make_node("add", [out, y])])
        inputs.append(y)
        makers.append(_randn(*extra))
    return Case(f"transpose_{name}", Graph(tuple(inputs), (), (out,)),
                lambda d: ([m(d) for m in makers], {}))


def three_transposed() -> Case:
    """copy(permute(x + y + z)), all NCHW: three transposed float operands, of which two get a shared-memory
    tile (three would pass the 48 KB of static shared memory) and the third is read through its strides."""
    shape = (2, 67, 5, 66)
    xs = [_x(shape, name, k) for k, name in enumerate("xyz")]
    total = make_node("add", [make_node("add", xs[:2]), xs[2]])
    out = make_node("copy", [make_node("permute", [total], dims=(0, 2, 3, 1))])
    return Case("transpose_three_operands", Graph(tuple(xs), (), (out,)),
                lambda d: ([_randn(*shape)(d) for _ in xs], {}))


TRANSPOSE_CASES = [
    three_transposed(),
    transposing_case("nchw_nhwc_odd", (3, 5, 7, 9), (0, 2, 3, 1)),
    transposing_case("nchw_nhwc_big", (2, 37, 33, 65), (0, 2, 3, 1), extra=(33, 65, 37)),
    transposing_case("ncdhw_ndhwc", (2, 3, 4, 5, 33), (0, 2, 3, 4, 1)),
    transposing_case("nhwc_nchw", (2, 9, 11, 70), (0, 3, 1, 2), extra=(2, 70, 9, 11)),
    transposing_case("one_channel", (4, 1, 8, 8), (0, 2, 3, 1)),
    transposing_case("matrix", (100, 65), (1, 0)),
]


def pointwise_ops() -> list[str]:
    return sorted(name for name, op in OPS.items() if op.category == "pointwise")


UNARY = sorted(pointwise.UNARY_OPS - {"logical_not", "isnan", "isinf"})
BINARY = sorted(pointwise.BINARY_OPS - {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"})
CASES = ([unary_case(op) for op in UNARY] + [binary_case(op) for op in BINARY]
         + [chain_with_views(), select_expand_reshape(), integer_and_bool(), double_and_casts(), rank_zero(),
            special_values(), activation_range("mish"), activation_range("mish", torch.float64),
            activation_range("tanh"), activation_range("tanh", torch.float64),
            activation_range("gelu", approximate="tanh"), activation_range("sigmoid"),
            activation_range("silu"), activation_range("hardswish"), activation_range("hardsigmoid"),
            division_range()]
         + TRANSPOSE_CASES)


def plan_of(case: Case) -> FusionPlan:
    return plan_fusion(case.graph, [pointwise.match])


# ------------------------------------------------------------------------------------------- tests


def test_every_pointwise_ir_op_has_a_cuda_expression():
    # copy is a view-category op in the IR (rules must not move permutes through it: it is the layout
    # change), but the pointwise family computes it, as the identity over its domain
    assert set(pointwise_ops()) | {"copy"} == pointwise.POINTWISE_OPS
    for op in pointwise.POINTWISE_OPS - {"gelu"}:
        assert op in EXPRESSIONS


@pytest.mark.parametrize("value, dtype, text", [
    (0.1, torch.float32, "0.1f"), (3, torch.float32, "3.0f"), (-2.5, torch.float32, "(-2.5f)"),
    (1e-5, torch.float32, "1e-05f"), (0.1, torch.float64, "0.1"), (7, torch.int64, "7LL"),
    (-7, torch.int32, "(-7)"), (True, torch.bool, "true"),
    (float("inf"), torch.float32, "__int_as_float(0x7f800000)"),
    (float("-inf"), torch.float32, "(-__int_as_float(0x7f800000))"),
])
def test_literals(value, dtype, text):
    assert c_literal(value, dtype) == text


def test_expressions_follow_aten_semantics():
    x = _x((4,))
    assert op_expression(make_node("pow", [x, const_node(2)]), ["a", None]) == "(a * a)"
    assert op_expression(make_node("pow", [x, const_node(0.5)]), ["a", None]) == "sqrt(a)"
    assert op_expression(make_node("clamp", [x], min=0.0, max=None), ["a"]) == "kw::clamp_min(a, 0.0f)"
    assert op_expression(make_node("gelu", [x], approximate="tanh"), ["a"]) == "kw::gelu_tanh(a)"
    i = _x((4,), "i", 0, torch.int64)
    # by a scalar: times its reciprocal in the compute type, as ATen's CUDA kernel (true division of ints
    # computes in float); by a tensor: kw::divide
    assert op_expression(make_node("div", [i, const_node(2)]), ["a", None]) == \
        "(static_cast<float>(a) * 0.5f)"
    assert op_expression(make_node("div", [i, const_node(3)]), ["a", None]) == \
        "(static_cast<float>(a) * 0.33333334f)"
    assert op_expression(make_node("div", [x, const_node(-0.25)]), ["a", None]) == "(a * (-4.0f))"
    assert op_expression(make_node("div", [x, const_node(0.0)]), ["a", None]) == \
        "(a * __int_as_float(0x7f800000))"
    d = _x((4,), "d", 0, torch.float64)
    assert op_expression(make_node("div", [d, const_node(3.0)]), ["a", None]) == "(a * 0.3333333333333333)"
    assert op_expression(make_node("div", [x, x]), ["a", "b"]) == "kw::divide(a, b)"
    assert op_expression(make_node("div", [const_node(3.0), x]), [None, "b"]) == "kw::divide(3.0f, b)"
    assert op_expression(make_node("remainder", [i, const_node(3)]), ["a", None]) == "kw::iremainder(a, 3LL)"
    assert op_expression(make_node("cast", [x], dtype=torch.bool), ["a"]) == "(a != 0)"
    # Comparisons compute in the promoted type: int tensor vs float scalar compares as float.
    assert op_expression(make_node("lt", [i, const_node(0.5)]), ["a", None]) == \
        "(static_cast<float>(a) < 0.5f)"


def test_predicates_test_their_operand_in_its_own_type():
    x, i, b = _x((4,)), _x((4,), "i", 0, torch.int64), _x((4,), "b", 0, torch.bool)
    assert op_expression(make_node("isnan", [x]), ["a"]) == "kw::is_nan(a)"
    assert op_expression(make_node("isinf", [x]), ["a"]) == "isinf(a)"
    assert op_expression(make_node("isnan", [i]), ["a"]) == "false"
    assert op_expression(make_node("isinf", [b]), ["a"]) == "false"
    # only the logical ops read a float operand as bool (ATen: logical_not(nan) is False)
    for op in sorted(pointwise.UNARY_OPS - {"cast"}):
        text = op_expression(make_node(op, [x], **UNARY_ATTRS.get(op, {})), ["a"])
        assert ("static_cast<bool>(a)" in text) == (op == "logical_not"), (op, text)


def test_emit_statements_names_values_and_inlines_consts():
    x = _x((4,))
    a = make_node("add", [x, const_node(1.0)])
    b = make_node("mul", [a, x])
    env = {id(x): "in"}
    lines = emit_statements([a, b], env, prefix="e")
    assert lines == ["const float e1 = (in + 1.0f);", "const float e2 = (e1 * in);"]
    assert env[id(b)] == "e2"


def test_each_case_is_one_group_and_renders():
    for case in CASES:
        plan = plan_of(case)
        assert plan.groups, case.name
        for group in plan.groups:
            source = render(group)
            assert f"kw_entry_{source.name}(" in source.cuda and f"{source.name}_launch" in source.cuda
            assert "#include <torch" not in source.cuda


def test_huge_domains_use_64_bit_flat_indexing():
    x = _x((2**31 + 13,), dtype=torch.int8)
    group = plan_of(Case("huge", Graph((x,), (), (make_node("add", [x, const_node(1)]),)), None)).groups[0]
    cuda = render(group).cuda
    assert "using FlatIndex = long long;" in cuda and "kInt32Domain = false" in cuda
    small = plan_of(CASES[0]).groups[0]
    assert "using FlatIndex = int;" in render(small).cuda


def every_op_in_one_kernel() -> Case:
    """Sum of every unary and binary op of two inputs: one kernel covering the whole table (the GPU
    tests check each op alone)."""
    x, y = _x((5, 7)), _x((7,), "y", 1)
    terms = [make_node(op, [x], **UNARY_ATTRS.get(op, {})) for op in UNARY]
    terms += [make_node(op, [x, y]) for op in BINARY]
    total = terms[0]
    for term in terms[1:]:
        total = make_node("add", [total, term])
    return Case("every_op", Graph((x, y), (), (total,)), lambda d: ([], {}))


def all_case_sources():
    structural = [c for c in CASES if not c.name.startswith(("unary_", "binary_"))]
    kernels = []
    for case in [every_op_in_one_kernel(), *structural]:
        kernels += [render(g) for g in plan_of(case).groups]
    x = _x((2**31 + 13,), dtype=torch.int8)
    kernels.append(render(plan_of(Case("huge", Graph((x,), (), (make_node("add", [x, const_node(1)]),)),
                                       None)).groups[0]))
    return assemble(kernels)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_all_pointwise_variants_compile_with_nvcc():
    # Many kernels in one unit; ptxas -O0 because only front-end errors matter here.
    check = nvcc_check(all_case_sources().cuda_text, ptxas_level=0)
    assert check.ok, check.log


def test_bands_follow_the_views_of_a_contiguous_input():
    def bands(case, broadcast=True):
        (group,) = plan_of(case).groups
        cuda = render(dataclasses.replace(group, config=PointwiseConfig(broadcast=broadcast).as_tuple())).cuda
        return re.findall(r"kw::Band<(\d+)LL, (\d+)LL, kNumel>", cuda)

    by_name = {c.name: c for c in BAND_CASES}
    assert bands(by_name["band_rows"]) == [("1", "888"), ("1", "24")]
    assert bands(by_name["band_column"]) == [("1", "96"), ("8", "12")]
    assert bands(by_name["band_channel"]) == [("1", "360"), ("30", "4")]
    assert bands(by_name["band_middle"]) == [("1", "120"), ("5", "6")]
    # without `broadcast` a bias operand gets the contiguous band (the strided kernel runs); one value stays
    assert bands(by_name["band_rows"], broadcast=False) == [("1", "888"), ("1", "888")]
    assert bands(rank_zero()) == [("1", "1"), ("1", "1")]
    # a permute or a strided slice makes no band: the contiguous one is expected, so the flat kernel runs
    # only if the operand is contiguous at run time (a transposed input, transposed back)
    for view in (make_node("permute", [_x((4, 6))], dims=(1, 0)),
                 make_node("slice", [_x((12, 4))], dim=0, start=0, end=12, step=2)):
        y = _x(view.shape, "y", 1)
        case = Case("view", Graph((view.inputs[0], y), (), (make_node("mul", [view, y]),)), None)
        assert bands(case) == [("1", "24"), ("1", "24")]
        assert "kFlatStrides[kOperands][kRank] = {{4, 1}, {4, 1}};" in render(plan_of(case).groups[0]).cuda


def test_default_config_keeps_kernel_names_and_others_change_them():
    (group,) = plan_of(BAND_CASES[0]).groups
    default = render(group).name
    assert render(dataclasses.replace(group, config=PointwiseConfig().as_tuple())).name == default
    assert render(dataclasses.replace(group, config=PointwiseConfig(unroll=2).as_tuple())).name != default
    with pytest.raises(ValueError):
        PointwiseConfig(grid="sometimes")


def test_large_groups_are_also_measured_with_more_vectors_a_thread():
    """fuse.launch_alternatives of a large flat group: unroll 2 and 4, each rendering its own kernel (the
    codegen's PointwiseConfig takes the knob as given); a small group, or one already configured, gets
    none."""
    from kernelwright.fuse import launch_alternatives, launch_label

    def tanh_of(x):
        return Graph((x,), (), (make_node("tanh", [x]),))

    (group,) = plan_fusion(tanh_of(_x((2048, 4096)))).groups
    others = launch_alternatives(group)
    assert [PointwiseConfig.from_tuple(o.config).unroll for o in others] == [2, 4]
    assert [launch_label(o) for o in others] == ["unroll 2", "unroll 4"] and launch_label(group) == ""
    assert len({render(g).cuda for g in (group, *others)}) == 3
    assert launch_alternatives(others[0]) == []
    assert launch_alternatives(plan_fusion(tanh_of(_x((64, 4096)))).groups[0]) == []


# Non-default knobs: odd unroll and block, both grids, every cache policy, broadcast operands flat.
KNOB_CONFIGS = [PointwiseConfig(block=128, unroll=3, grid="one_pass", cache="streaming", broadcast=True),
                PointwiseConfig(block=512, unroll=2, grid="persistent", cache="no_allocate", broadcast=True),
                PointwiseConfig(block=256, unroll=4, grid="one_pass", cache="read_only", broadcast=True)]


def knob_case_sources():
    structural = [c for c in CASES if not c.name.startswith(("unary_", "binary_"))]
    kernels = []
    for config in KNOB_CONFIGS:
        for case in [every_op_in_one_kernel(), *structural, *BAND_CASES]:
            kernels += [render(dataclasses.replace(g, config=config.as_tuple()))
                        for g in plan_of(case).groups]
    return assemble(kernels)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_every_knob_setting_compiles_with_nvcc():
    check = nvcc_check(knob_case_sources().cuda_text, ptxas_level=0)
    assert check.ok, check.log


def test_views_become_operand_steps_in_the_spec():
    steps = [s for _, s, _ in render(plan_of(chain_with_views()).groups[0]).spec.operands]
    assert (("permute", 1, 0), ("slice", 0, 1, 9, 2)) in steps
    assert any(("expand", 6, 10) in s for s in steps)


@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=lambda c: c.name)
def test_tiled_kernel_only_for_transposing_operands(case: Case):
    """The tiled kernel is generated exactly where an operand is unit-stride along a dim other than the
    innermost live one (a one-channel layout change is no transpose)."""
    cuda = render(plan_of(case).groups[0]).cuda
    assert ("constexpr bool kTiled = true;" in cuda) == (case.name != "transpose_one_channel")


def test_tiles_stay_within_static_shared_memory():
    """Two float tiles (33,280 bytes) of three transposed operands; the third is read through its strides."""
    cuda = render(plan_of(three_transposed()).groups[0]).cuda
    assert "constexpr bool kTiled = true;" in cuda
    assert cuda.count("__shared__ float tile") == 2


def test_no_tiled_kernel_for_bands():
    for case in BAND_CASES[:4]:
        assert "constexpr bool kTiled = false;" in render(plan_of(case).groups[0]).cuda


TWO_BAND = re.compile(r"kw::Band<(\d+)LL, (\d+)LL, kNumel(?:, (\d+)LL, (\d+)LL)?>")


@pytest.mark.parametrize("x_shape, b_shape, bands", [
    ((3, 5, 7, 8), (3, 1, 1, 8), 2), ((4, 6, 5, 3), (4, 1, 5, 1), 2), ((2, 3, 4, 5), (1, 3, 1, 5), 2),
    ((2, 3, 4, 5), (2, 3, 1, 1), 1), ((6, 1, 4, 5), (6, 1, 1, 5), 2), ((2, 3, 4, 3, 5), (2, 1, 4, 1, 5), 0),
    ((2, 3, 4, 8), (2, 1, 4, 1), 2),

])
def test_band_offsets_are_the_broadcast_offsets(x_shape, b_shape, bands):
    """Every element's offset by kw::Band's formula (one band, or two with broadcast dims between) equals
    the broadcast operand's strided offset; three runs get the contiguous band (the strided kernel)."""
    (group,) = plan_of(band_case("t", x_shape, b_shape)).groups
    found = TWO_BAND.findall(render(group).cuda)[1]
    inner, extent, inner2, extent2 = (int(v) if v else 1 for v in found)
    numel = math.prod(x_shape)
    if bands == 0:
        assert (inner, extent, extent2) == (1, numel, 1)
        return
    assert (extent2 > 1) == (bands == 2)
    strides = torch.empty(b_shape).expand(x_shape).stride()
    for i in range(numel):
        coords, rest = [], i
        for size in reversed(x_shape):
            coords.append(rest % size)
            rest //= size
        want = sum(c * st for c, st in zip(reversed(coords), strides, strict=True))
        got = (i // inner) % extent + ((i // inner2) % extent2) * extent
        assert got == want, (i, got, want)
    # kw::Band::load_vec's forms, for every vector width: one value repeated (Inner % V == 0) or one
    # aligned vector (vector_loads) must be what the element-by-element offsets say
    offsets = [(i // inner) % extent + ((i // inner2) % extent2) * extent for i in range(numel)]
    for v in (2, 4, 8, 16):
        splat = extent == 1 or inner % v == 0
        vector = inner == 1 and extent != 1 and (extent == numel or extent % v == 0)
        for i in range(0, numel - numel % v, v):
            if splat:
                assert all(offsets[i + j] == offsets[i] for j in range(v)), (v, i)
            elif vector:
                assert offsets[i] % v == 0 and all(offsets[i + j] == offsets[i] + j for j in range(v)), (v, i)
