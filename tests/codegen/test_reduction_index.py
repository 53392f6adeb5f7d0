"""The row kernel's index arithmetic on the CPU: for every reduction case, the offset statements of the
rendered CUDA source (kept coordinates of a row, coordinates along the row, each load's and store's
address, the row cache's fill) are evaluated in Python over every (row, position) pair and compared with
the element the IR semantics name: the tensor permuted to (kept dims, reduced dims) and flattened to
[rows, row length]."""

from __future__ import annotations

import re

import pytest
import torch
from reduction_cases import CASES

from kernelwright.codegen.reduction import _RowKernel
from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion

STATEMENT = re.compile(r"const idx_t (\w+) = ([^;]+);")
VECTOR_LOAD = re.compile(r"kw::load_(?:vec|each)<float, VEC>\(in(\d+) \+ kb(\d+) \+ ([^)]+)\)")
SPLAT_LOAD = re.compile(r"kw::splat<float, VEC>\(kw::load\(in(\d+) \+ kb(\d+) \+ ([^)]+)\)\)")
ROW_LOAD = re.compile(r"kw::load\(in(\d+) \+ kb(\d+)\)")
STORE = re.compile(r"kw::store_vec<float, VEC>\(out(\d+) \+ kb(\d+) \+ ([^,]+),")
CACHE_FILL = re.compile(r"kw::copy_async<VEC>\([^,]+, in(\d+) \+ kb(\d+) \+ ([^)]+)\);")

REDUCTION_CASES = sorted(name for name, make in CASES.items()
                         if any(g.family == "reduction" for g in plan_fusion(make()).groups))


def logical_offsets(space, view: tuple[int, ...], context: str) -> torch.Tensor:
    """[rows, row length]: the offset, in a contiguous tensor of shape `view`, of the element that
    (row, position) reads once `view` is broadcast as the access's context says."""
    t = torch.arange(max(1, torch.Size(view).numel())).reshape(view)
    if context == "rowsq":      # a squeezed row value: broadcast against the kept dims, then re-expanded
        kept = [s for d, s in enumerate(space.shape) if d not in space.ir_reduced]
        keepdim = [1 if d in space.ir_reduced else s for d, s in enumerate(space.shape)]
        t = t.broadcast_to(kept).reshape(keepdim)
    t = t.broadcast_to(space.shape).reshape(space.domain)
    kept_dims = [d for d in range(len(space.domain)) if d not in space.reduce]
    return t.permute(*kept_dims, *space.reduce).reshape(space.rows, space.row_length)


def evaluate(statements: list[tuple[str, str]], env: dict) -> None:
    for name, expr in statements:
        env[name] = eval(expr.replace("/", "//"), {}, env)  # noqa: S307 (index arithmetic we generated)


def section(cuda: str, start: str, end: str) -> str:
    return cuda[cuda.index(start):cuda.index(end)]


@pytest.mark.parametrize("case", REDUCTION_CASES)
def test_rendered_offsets_address_the_logical_elements(case):
    (group,) = [g for g in plan_fusion(CASES[case]()).groups if g.family == "reduction"]
    spec, space = group.config[0], group.config[0].space
    kernel = _RowKernel(group, spec)
    cuda = render_group(group).cuda
    vec = int(re.search(r"constexpr int VEC_MAX = (\d+);", cuda).group(1))
    int32 = "int" in re.search(r"using idx_t = ([\w ]+);", cuda).group(1).split()

    env = {"krow": torch.arange(space.rows)[:, None], "p0": torch.arange(space.row_length)[None, :]}
    # (the per-row chunk start of SHIFTED kernels depends on pointer values: checked on the GPU)
    offsets = [(n, e) for n, e in STATEMENT.findall(section(cuda, "// kept coordinates", "// ---- pass 0"))
               if n not in ("ROW_CHUNKS", "c_end")]
    evaluate(offsets, env)
    along = dict(STATEMENT.findall(section(cuda, "// ---- pass 0", "template <int VEC, int CL, bool CACHE>\n"
                                                                     "static cudaError_t launch")))
    evaluate([(n, e) for n, e in along.items() if n.startswith("rd")], env)

    def check(tensor: int, access: int, expr: str, splat: bool) -> None:
        position, view, context = kernel.access_keys[access]
        assert position == tensor, f"kb{access} belongs to input {position}, used for {tensor}"
        want = logical_offsets(space, view, context)
        got = torch.broadcast_to(torch.as_tensor(eval(f"kb{access} + {expr}", {}, env)), want.shape)  # noqa: S307
        assert torch.equal(got, want), f"{case}: access {access} {kernel.access_keys[access]}"
        if int32 and got.numel():
            assert int(got.max()) < 2**31 - 1, f"{case}: access {access} overflows 32-bit indexing"
        if vec > 1:
            # a VEC-wide chunk starting at p0 reads p0 + j from address(p0) + j (or splats address(p0))
            j = torch.arange(space.row_length) % vec
            start = got[:, torch.arange(space.row_length) - j]
            assert torch.equal(start if splat else start + j, want), f"{case}: access {access} with VEC={vec}"

    loads = [(int(k), int(a), e, False) for k, a, e in VECTOR_LOAD.findall(cuda)]
    loads += [(int(k), int(a), e, True) for k, a, e in SPLAT_LOAD.findall(cuda)]
    loads += [(int(k), int(a), "0", True) for k, a in ROW_LOAD.findall(cuda)]   # one value per row
    loads += [(int(k), int(a), e, False) for k, a, e in CACHE_FILL.findall(cuda)]
    assert loads, case
    for tensor, access, expr, splat in loads:
        check(tensor, access, expr, splat)
    for out, access, expr in STORE.findall(cuda):
        check(-1, int(access), expr, False)
        assert group.outputs[int(out)].shape == space.shape
    for k, out in enumerate(group.outputs):
        if f"out{k}[row]" in cuda:      # row values are written at the row's index
            assert out.numel == space.rows, f"{case}: output {k} {out.shape} for {space.rows} rows"
