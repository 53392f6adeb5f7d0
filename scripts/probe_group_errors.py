"""Where a compiled plan's error comes from, on the GPU: each layout's plan (with and without norm
statistics apart) run step by step with our kernels, every group's outputs against its float64 ATen
execution on the same arguments, and the plan's output against Model's.

    python scripts/probe_group_errors.py level3/13_ResNetTinyBatch2 [SEED]

A plan whose groups all agree to ~1e-6 but whose output does not points at an ATen step (a cuDNN
convolution's TF32 algorithm in another layout), not at a kernel.
"""

from __future__ import annotations

import sys

import torch

from kernelwright.capture import capture
from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.registry import render_group
from kernelwright.compiler import _rewrite
from kernelwright.fuse.plan import FusedGroup, plan_fusion
from kernelwright.problem import load_problem
from kernelwright.rewrite import hoistable_nodes
from kernelwright.rewrite.layout import channels_last, has_layout_choice
from kernelwright.verify.execute import execute_plan, run_group_with_aten

DEVICE = torch.device("cuda")


def launch_text(group: FusedGroup) -> str:
    spec = group.config[0] if group.config else None
    if not hasattr(spec, "layout"):
        return group.family
    return (f"{spec.layout} threads {spec.threads} cluster {spec.cluster} cache {int(spec.cache)} "
            f"split {int(spec.split)} {spec.space.shape} reduce {spec.space.reduce}")


def probe(problem_id: str, seed: int) -> None:
    problem = load_problem(problem_id)
    graph, _, derived = _rewrite(capture(problem))
    variants = [("nchw", graph, list(derived))]
    if has_layout_choice(graph):
        other, _ = channels_last(graph)
        variants.append(("channels_last", other, list(hoistable_nodes(other))))
    for layout, g, roots in variants:
        for split in (False, True):
            plan = plan_fusion(g, derived=roots, split_statistics=split)
            kernels = [render_group(x) for x in plan.groups]
            module = build_extension(assemble(kernels)).module
            names = {id(x): k.name for x, k in zip(plan.groups, kernels, strict=True)}
            errors = []

            def run_group(group, values, names=names, module=module, errors=errors):
                ours = getattr(module, names[id(group)])(list(values))
                oracle = run_group_with_aten(group, list(values), DEVICE, torch.float64)
                for node, a, b in zip(group.outputs, ours, oracle, strict=True):
                    if torch.is_tensor(a) and a.is_floating_point():
                        err = (a.double() - b).abs().max().item()
                        errors.append((err, node.op, tuple(node.shape), launch_text(group)))
                return ours

            inputs = problem.inputs(seed, DEVICE)
            with torch.no_grad():
                outs, _, _ = execute_plan(plan, inputs, problem.build_model(0, DEVICE), DEVICE, run_group)
                want = problem.build_model(0, DEVICE)(*inputs)
            want = want if isinstance(want, (tuple, list)) else [want]
            worst = max((o.double() - w.double()).abs().max().item() for o, w in zip(outs, want, strict=True))
            print(f"{problem_id} {layout} {'split' if split else 'unsplit'}: output max abs err {worst:.3g}")
            for err, op, shape, launch in sorted(errors, reverse=True)[:4]:
                print(f"    group output {op} {shape}: {err:.3g} ({launch})")


if __name__ == "__main__":
    probe(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 43)
