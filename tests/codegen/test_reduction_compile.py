"""Every reduction/softmax/norm/scan case renders, and all of their kernels compile together with nvcc
(compile-only, sm_90a: the cluster variants are real code there), those whose chunk loops the planner unrolled
whole also with the runtime loop, those offered persistent (clusters walking rows) so too, and the
column launches unrolled further."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch
from reduction_cases import CASES, column_unrolled, persistent, rolled, x_in

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import make_node


def rendered_kernels():
    kernels = []
    for name, build in CASES.items():
        plan = plan_fusion(build())
        families = {g.family for g in plan.groups}
        assert families & {"reduction", "scan"}, f"{name}: no reduction/scan group in {families}"
        kernels += [render_group(g) for g in plan.groups if g.family in ("reduction", "scan")]
    return kernels


def rolled_kernels():
    """Every case the planner unrolled whole (`ReductionSpec.full_unroll`) again with the runtime loop."""
    groups = [rolled(g) for build in CASES.values() for g in plan_fusion(build()).groups]
    return [render_group(g) for g in groups if g is not None]


def persistent_kernels():
    """Every case `launch_alternatives` offers persistent (`ReductionSpec.persistent`), so rendered."""
    groups = [persistent(g) for build in CASES.values() for g in plan_fusion(build()).groups]
    return [render_group(g) for g in groups if g is not None]


def column_unrolled_kernels():
    """Every column launch as `launch_alternatives` offers it unrolled by COLUMN_UNROLL."""
    from kernelwright.fuse.reduction import COLUMN_UNROLL

    groups = [column_unrolled(g) for build in CASES.values() for g in plan_fusion(build()).groups]
    groups = [g for g in groups if g is not None]
    assert groups and all(g.config[0].unroll == COLUMN_UNROLL for g in groups)
    kernels = [render_group(g) for g in groups]
    assert all(f"#pragma unroll {COLUMN_UNROLL}\n" in k.cuda for k in kernels)
    return kernels


def test_every_case_renders_an_entry_per_kernel():
    kernels = rendered_kernels() + rolled_kernels() + persistent_kernels() + column_unrolled_kernels()
    names = [k.name for k in kernels]
    assert len(set(names)) == len(names)
    for kernel in kernels:
        assert f"int {kernel.name}_launch(" in kernel.cuda and f"kw_entry_{kernel.name}(" in kernel.cuda
        assert "torch" not in kernel.cuda


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_all_variants_compile_with_nvcc(tmp_path):
    sources = assemble(rendered_kernels() + rolled_kernels() + persistent_kernels()
                       + column_unrolled_kernels())
    cu = tmp_path / "reductions.cu"
    cu.write_text(sources.cuda_text)
    result = subprocess.run(
        ["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-O0", "-c", str(cu), "-o",
         str(tmp_path / "reductions.o")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


def _pass0_fields(graph: Graph) -> tuple[list[str], str]:
    (group,) = [g for g in plan_fusion(graph).groups if g.family == "reduction"]
    cuda = render_group(group).cuda
    struct = cuda[cuda.index("struct Pass0 {"):]
    return re.findall(r"  (kw::\w+) a\d+;", struct[:struct.index("};")]), cuda


def test_members_accumulating_the_same_values_share_one_accumulator():
    # training BatchNorm, its running mean and its unbiased variance: one Welford update per element
    fields, _ = _pass0_fields(CASES["batch_norm_train"]())
    assert fields == ["kw::WelfordAcc"]
    # a mean the group outputs keeps torch.mean's sum (an inf in the row is inf, not the Welford's NaN),
    # shared with a sum of the same values whichever comes first
    x = x_in(64, 1000)
    mean = make_node("mean", [x], dims=(1,))
    var = make_node("var", [x], dims=(1,), correction=1)
    total = make_node("sum", [x], dims=(1,))
    fields, cuda = _pass0_fields(Graph((x,), (), (mean, var, total), output_kind="tuple"))
    assert sorted(fields) == ["kw::SumAcc", "kw::WelfordAcc"]
    assert ".mean;" not in cuda.split("struct Pass0")[1].split("// ---- pass 0")[1]


def test_scans_of_one_extent_but_other_ranks_or_prologues_get_their_own_kernels():
    """A scan kernel's name hashes all it depends on: two scans over [6, 4096, 1] of a rank-2 and a rank-3
    tensor have other specs, two masked scans with a bool and a float mask other loads."""
    from kernelwright.ir.ops import input_node

    a, b = x_in(6, 4096), input_node("b", 1, (2, 3, 4096))
    bool_mask, float_mask = input_node("m", 2, (6, 4096), dtype=torch.bool), input_node("f", 3, (6, 4096))
    outputs = (make_node("cumsum", [a], dim=1), make_node("cumsum", [b], dim=2),
               make_node("cumsum", [make_node("mul", [a, bool_mask])], dim=1),
               make_node("cumsum", [make_node("mul", [a, float_mask])], dim=1))
    groups = [g for g in plan_fusion(Graph((a, b, bool_mask, float_mask), (), outputs)).groups
              if g.family == "scan"]
    kernels = [render_group(g) for g in groups]
    assert len(kernels) == 4 and len({k.name for k in kernels}) == 4
    assemble(kernels)   # raises on two different kernels of one name
