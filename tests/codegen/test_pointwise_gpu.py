"""Pointwise kernels against PyTorch on the GPU: every op alone (broadcast both ways), views, integer and
double math, rank 0, NaN/inf, non-contiguous and misaligned inputs at run time, a domain over 2^31
elements. All cases share one extension build."""

from __future__ import annotations

import pytest
import torch
from test_pointwise import CASES, Case, plan_of

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.pointwise import render
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import const_node, input_node, make_node
from kernelwright.verify.execute import execute_plan

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda")


@pytest.fixture(scope="module")
def extension():
    plans = {case.name: plan_of(case) for case in CASES}
    kernels = {id(g): render(g) for plan in plans.values() for g in plan.groups}
    built = build_extension(assemble(list(kernels.values())))
    print(f"\nbuilt {len(kernels)} pointwise kernels in {built.seconds:.1f} s")
    return plans, kernels, built.module


def run_with_kernels(plan, kernels, module, args, params):
    def run_group(group, values):
        return getattr(module, kernels[id(group)].name)(list(values))
    outputs, _, _ = execute_plan(plan, args, params, DEVICE, run_group)
    return outputs


def check_close(got, want, case_name):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, case_name
        if w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=2e-6 if w.dtype == torch.float64 else 1e-5, atol=1e-6,
                                       equal_nan=True, msg=case_name)
        else:
            assert torch.equal(g, w), case_name


# range_div has its own test below: kw::divide may give inf for a quotient within 2 ulp of FLT_MAX, which
# the relative comparison here would call wrong
@pytest.mark.parametrize("case", [c for c in CASES if c.name != "range_div"], ids=lambda c: c.name)
def test_kernel_matches_aten(extension, case: Case):
    plans, kernels, module = extension
    torch.manual_seed(0)
    args, params = case.make_inputs(DEVICE)
    want, _, _ = execute_plan(plans[case.name], args, params, DEVICE)
    got = run_with_kernels(plans[case.name], kernels, module, args, params)
    check_close(got, want, case.name)


# ops whose formula does not cancel (the tanh-GELU's 1 + tanh turns one ulp of tanh into many of the result:
# there the comparison with ATen's FP32 above is the check)
RANGE_CASES = [c for c in CASES if c.name in (
    "range_mish_float32", "range_tanh_float32", "range_sigmoid_float32", "range_silu_float32",
    "range_hardswish_float32", "range_hardsigmoid_float32")]


@pytest.mark.parametrize("case", RANGE_CASES, ids=lambda c: c.name)
def test_activation_error_against_float64(extension, case: Case):
    """Activations computed by a formula of our own (kw_common.cuh: mish) against the float64 op: within 4
    ulp of the exact value, or no further from it than twice ATen's FP32 result is."""
    plans, kernels, module = extension
    args, params = case.make_inputs(DEVICE)
    (got,) = run_with_kernels(plans[case.name], kernels, module, args, params)
    (aten,), _, _ = execute_plan(plans[case.name], args, params, DEVICE)
    (exact,), _, _ = execute_plan(plans[case.name], [args[0].double()], params, DEVICE)
    finite = exact.isfinite()
    torch.testing.assert_close(got[~finite], aten[~finite], rtol=0, atol=0, equal_nan=True, msg=case.name)
    exact, got, aten = exact[finite], got[finite].double(), aten[finite].double()
    ulp = torch.finfo(torch.float32).eps * exact.abs().clamp_min(torch.finfo(torch.float32).tiny)
    ours, theirs = (got - exact).abs(), (aten - exact).abs()
    bad = ours > torch.maximum(4 * ulp, 2 * theirs)
    assert not bad.any(), (f"{case.name}: {int(bad.sum())} values off, worst at x = "
                           f"{float(args[0][finite][bad][0]):.7g}: {float((ours / ulp).max()):.1f} ulp")


def test_division_matches_ieee_where_exact(extension):
    """kw::divide: bit for bit IEEE's quotient wherever both operands and the quotient are normal numbers
    inside [2^-100, 2^125] (the fast path's range), within 2 ulp of it elsewhere; zeros (with their signs),
    inf and NaN as IEEE, but a quotient within 2 ulp of FLT_MAX may come out inf."""
    plans, kernels, module = extension
    (case,) = [c for c in CASES if c.name == "range_div"]
    args, params = case.make_inputs(DEVICE)
    (got,) = run_with_kernels(plans[case.name], kernels, module, args, params)
    want = args[0] / args[1]
    a, b, q = args[0].abs(), args[1].abs(), want.abs()
    inside = ((a >= 2.0**-100) & (a <= 2.0**125) & (b >= 2.0**-100) & (b <= 2.0**125) & (q >= 2.0**-100)
              & (q <= 2.0**125))
    assert inside.sum() > len(got) // 4
    assert torch.equal(got[inside], want[inside])
    big = torch.finfo(torch.float32).max * (1 - 2**-22)
    overflowing = want.isfinite() & (want.abs() >= big) & got.isinf()
    assert torch.equal(got[overflowing].sign(), want[overflowing].sign())
    finite = want.isfinite() & ~inside & ~overflowing
    assert torch.equal(got[~want.isfinite()].isnan(), want[~want.isfinite()].isnan())
    assert torch.equal(got[want.isinf()], want[want.isinf()])
    zero = want == 0
    assert torch.equal(got[zero], want[zero]) and torch.equal(got[zero].signbit(), want[zero].signbit())
    tiny = torch.finfo(torch.float32).tiny
    error = (got[finite].double() - want[finite].double()).abs()
    ulp = want[finite].double().abs().clamp_min(tiny) * torch.finfo(torch.float32).eps
    assert (error <= 2 * ulp + 2**-149).all(), float((error / ulp).max())


def odd_layouts(t: torch.Tensor) -> list[torch.Tensor]:
    """The same values as `t` laid out differently: transposed storage, and one element off alignment."""
    layouts = []
    if t.dim() >= 2:
        layouts.append(t.transpose(0, 1).contiguous().transpose(0, 1))
    storage = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    shifted = storage[1:].view(t.shape)
    shifted.copy_(t)
    layouts.append(shifted)
    return layouts


@pytest.mark.parametrize("case", [c for c in CASES if c.name in (
    "unary_gelu", "binary_add", "chain_with_views", "integer_and_bool", "select_expand_reshape")],
    ids=lambda c: c.name)
def test_non_contiguous_and_misaligned_inputs(extension, case: Case):
    plans, kernels, module = extension
    args, params = case.make_inputs(DEVICE)
    want, _, _ = execute_plan(plans[case.name], args, params, DEVICE)
    for position, arg in enumerate(args):
        for layout in odd_layouts(arg):
            moved = list(args)
            moved[position] = layout
            got = run_with_kernels(plans[case.name], kernels, module, moved, params)
            check_close(got, want, f"{case.name} input {position} strides {layout.stride()}")


ODD_SHAPES = [(1,), (2,), (3,), (5,), (31,), (33,), (127,), (1021,), (4099,), (1, 1, 1), (7, 1, 13), (65537,)]


def odd_size_case(shape) -> Case:
    x = input_node("x", 0, shape)
    b = input_node("b", 1, shape[-1:])
    y = make_node("mul", [make_node("silu", [make_node("add", [x, b])]), const_node(1.5)])
    return Case(f"odd_{shape}", Graph((x, b), (), (y,)),
                lambda d: ([torch.randn(*shape, device=d), torch.randn(*shape[-1:], device=d)], {}))


@pytest.fixture(scope="module")
def odd_extension():
    cases = [odd_size_case(shape) for shape in ODD_SHAPES]
    plans = {c.name: plan_of(c) for c in cases}
    kernels = {id(g): render(g) for plan in plans.values() for g in plan.groups}
    return cases, plans, kernels, build_extension(assemble(list(kernels.values()))).module


@pytest.mark.parametrize("index", range(len(ODD_SHAPES)), ids=[str(s) for s in ODD_SHAPES])
def test_odd_sizes_hit_vector_body_and_scalar_tail(odd_extension, index):
    cases, plans, kernels, module = odd_extension
    case = cases[index]
    args, params = case.make_inputs(DEVICE)
    want, _, _ = execute_plan(plans[case.name], args, params, DEVICE)
    check_close(run_with_kernels(plans[case.name], kernels, module, args, params), want, case.name)


def test_wrong_input_shape_is_a_clear_error(extension):
    plans, kernels, module = extension
    group = plans["unary_relu"].groups[0]
    with pytest.raises(RuntimeError, match="must have shape"):
        getattr(module, kernels[id(group)].name)([torch.randn(3, 3, device=DEVICE)])
    with pytest.raises(RuntimeError, match="must be a CUDA tensor"):
        getattr(module, kernels[id(group)].name)([torch.randn(13, 17)])


def test_domain_over_two_billion_elements_uses_64_bit_indexing():
    n = 2**31 + 13
    if torch.cuda.get_device_properties(0).total_memory < 8 * n:
        pytest.skip("needs about 5 GB of GPU memory")
    x = input_node("x", 0, (n,), torch.int8)
    y = make_node("add", [make_node("mul", [x, const_node(3)]), const_node(1)])
    plan = plan_of(Case("huge", Graph((x,), (), (y,)), None))
    kernel = render(plan.groups[0])
    module = build_extension(assemble([kernel])).module
    data = torch.randint(-40, 40, (n,), dtype=torch.int8, device=DEVICE)
    (out,) = getattr(module, kernel.name)([data])
    assert torch.equal(out, data * 3 + 1)
