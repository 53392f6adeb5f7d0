"""Norm statistics apart (`fuse/statistics.py`) on the GPU: whole plans (statistics kernel, then the
reduction normalizing x in its prologue) against the float64 interpreter, on odd sizes, size-1 dims and a
level-2 size; that size is also timed against the plan without the split, printing the bandwidth of each
kernel (bytes: one read of what it reads, one write of what it writes)."""

from __future__ import annotations

import pytest
import torch
from reduction_cases import NORM_SPLIT_CASES, norm_then_reduce, random_inputs

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.interpret import interpret
from kernelwright.verify.execute import execute_plan
from kernelwright.verify.measure import time_ms

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda")


def build_plan(graph, split: bool = True):
    plan = plan_fusion(graph, split_statistics=split)
    kernels = [render_group(g) for g in plan.groups]
    module = build_extension(assemble(kernels)).module
    names = {id(g): k.name for g, k in zip(plan.groups, kernels, strict=True)}

    def run_group(group: FusedGroup, values):
        return getattr(module, names[id(group)])(list(values))

    return plan, run_group


@pytest.mark.parametrize("case", sorted(NORM_SPLIT_CASES))
def test_split_plan_matches_the_interpreter(case):
    graph = NORM_SPLIT_CASES[case]()
    plan, run_group = build_plan(graph)
    assert plan.graph is not graph, "the case should take the split"
    inputs, params = random_inputs(graph, "cuda", seed=3)
    with torch.no_grad():
        ours, buffers, _ = execute_plan(plan, inputs, params, DEVICE, run_group)
    want, want_buffers = interpret(graph, [x.double().cpu() for x in inputs],
                                   {k: v.double().cpu() for k, v in params.items()})
    for got, expected in zip(ours, want, strict=True):
        torch.testing.assert_close(got.double().cpu(), expected, rtol=1e-4, atol=1e-4)
    for fqn, value in want_buffers.items():
        torch.testing.assert_close(buffers[fqn].double().cpu(), value, rtol=1e-4, atol=1e-4)


def test_level2_size_is_faster_split_and_prints_its_bandwidth():
    """Conv2d output of a level-2 problem in channels-last ([64, 126, 126, 128], 0.52 GB), its bias,
    GroupNorm (8 groups), min over channels, clamp: the split reads it twice and writes 4 MB; the unsplit
    plan writes and reads the normalized tensor besides."""
    graph = norm_then_reduce((64, 126, 126, 128), 3, groups=8, chain=())
    inputs, params = random_inputs(graph, "cuda", seed=0)
    times = {}
    for split in (True, False):
        plan, run_group = build_plan(graph, split)
        with torch.no_grad():
            (ours,), _, values = execute_plan(plan, inputs, params, DEVICE, run_group)
            times[split] = time_ms(lambda p=plan, r=run_group: execute_plan(p, inputs, params, DEVICE, r))
            for group in plan.groups:
                args = [values[id(i)] if i.op != "const" else i.attr("value") for i in group.inputs]
                ms = time_ms(lambda g=group, a=args, r=run_group: r(g, a))
                moved = sum(a.numel() * a.element_size() for a in args if torch.is_tensor(a))
                moved += sum(n.numel * 4 for n in group.outputs)
                print(f"\nsplit={split} {' → '.join(n.op for n in group.nodes)}: {ms:.3f} ms, "
                      f"{moved / 1e9:.3f} GB, {moved / ms / 1e6:.0f} GB/s")
        if split:
            want = ours
        else:
            torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)
    print(f"\nwhole plan: split {times[True]:.3f} ms, unsplit {times[False]:.3f} ms")
    assert times[True] < times[False]
