"""The pointwise flat kernel under non-default knobs (test_pointwise.KNOB_CONFIGS: unroll, block, grid,
cache policy, broadcast operands as bands) against PyTorch on the GPU: structural cases, every band form,
odd sizes (tails of tiles, vectors and elements), non-contiguous and misaligned inputs, and which kernel
(flat or strided) the launcher picked. One extension build (apart from test_pointwise_gpu.py's, which
covers the default config)."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from test_pointwise import BAND_CASES, CASES, KNOB_CONFIGS, Case, plan_of
from test_pointwise_gpu import ODD_SHAPES, check_close, odd_layouts, odd_size_case, run_with_kernels

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.pointwise import PointwiseConfig, render
from kernelwright.verify.execute import execute_plan

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda")
STRUCTURAL = ("binary_add", "binary_pow", "unary_gelu", "chain_with_views", "select_expand_reshape",
              "integer_and_bool", "double_and_casts", "rank_zero", "special_values")
CONFIGS = [PointwiseConfig()] + KNOB_CONFIGS


def knob_cases() -> list[Case]:
    return [c for c in CASES if c.name in STRUCTURAL] + BAND_CASES + [odd_size_case(s) for s in ODD_SHAPES]


@pytest.fixture(scope="module")
def extension():
    """Every knob case under every KNOB_CONFIG; the band cases under the default config too."""
    cases = {c.name: c for c in knob_cases()}
    plans = {name: plan_of(case) for name, case in cases.items()}
    kernels = {}
    for index, config in enumerate(CONFIGS):
        for name, plan in plans.items():
            if index == 0 and not name.startswith("band_"):
                continue
            kernels[index, name] = {id(g): render(dataclasses.replace(g, config=config.as_tuple()))
                                    for g in plan.groups}
    unique = {k.name: k for by_group in kernels.values() for k in by_group.values()}
    built = build_extension(assemble(list(unique.values())))
    print(f"\nbuilt {len(unique)} pointwise kernels in {built.seconds:.1f} s")
    return cases, plans, kernels, built.module


PARAMS = [(index, case.name) for index in range(len(CONFIGS)) for case in knob_cases()
          if index > 0 or case.name.startswith("band_")]


@pytest.mark.parametrize("index, name", PARAMS, ids=[f"config{i}-{n}" for i, n in PARAMS])
def test_kernel_matches_aten(extension, index, name):
    cases, plans, kernels, module = extension
    torch.manual_seed(0)
    args, params = cases[name].make_inputs(DEVICE)
    want, _, _ = execute_plan(plans[name], args, params, DEVICE)
    check_close(run_with_kernels(plans[name], kernels[index, name], module, args, params), want,
                f"{name} {CONFIGS[index]}")


BAND_PARAMS = [(index, case.name) for index in range(len(CONFIGS)) for case in BAND_CASES]


@pytest.mark.parametrize("index, name", BAND_PARAMS, ids=[f"config{i}-{n}" for i, n in BAND_PARAMS])
def test_non_contiguous_and_misaligned_operands(extension, index, name):
    cases, plans, kernels, module = extension
    args, params = cases[name].make_inputs(DEVICE)
    want, _, _ = execute_plan(plans[name], args, params, DEVICE)
    for position, arg in enumerate(args):
        for layout in odd_layouts(arg):
            moved = list(args)
            moved[position] = layout
            got = run_with_kernels(plans[name], kernels[index, name], module, moved, params)
            check_close(got, want, f"{name} config {index} input {position} strides {layout.stride()}")


KERNEL_EVENT = re.compile(r"(pw_\w+)::(flat_kernel|strided_kernel)")


def launched(call) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [m.group(2) for m in map(KERNEL_EVENT.search, (e.name for e in prof.events())) if m]


@pytest.mark.parametrize("name", ["band_rows_big", "band_column_big", "band_channel_big",
                                  "band_int8_rows_big", "band_rows_odd", "band_masked_bias"])
def test_broadcast_operands_take_the_flat_kernel_only_where_configured(extension, name):
    cases, plans, kernels, module = extension
    args, _ = cases[name].make_inputs(DEVICE)
    (group,) = plans[name].groups
    inputs = [args[node.attr("index", 0)] for node in group.inputs]
    for index, config in enumerate(CONFIGS):
        kernel = getattr(module, kernels[index, name][id(group)].name)
        want = ["flat_kernel"] if config.broadcast else ["strided_kernel"]
        assert launched(lambda k=kernel: k(inputs)) == want, (name, config)
    # the full-size operand one element off its vector alignment: strided, whatever the config
    kernel = getattr(module, kernels[1, name][id(group)].name)
    shifted = odd_layouts(inputs[0])[-1]
    assert launched(lambda: kernel([shifted, *inputs[1:]])) == ["strided_kernel"]
