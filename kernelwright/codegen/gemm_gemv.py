"""Matrix-vector products (M == 1 or N == 1): bandwidth-bound, so exact FP32 on CUDA cores.

Each output r (along the non-unit dim of M, N) is the dot product of one line of the matrix operand with
the vector operand. Two access patterns, fixed by the static layout:
- "dot": the matrix line is contiguous along K (A row-major with N == 1, an nn.Linear weight with M == 1):
  one warp per output, 16-byte loads along K when aligned, a warp-shuffle sum;
- "axpy": the matrix is contiguous along the outputs (A column-major with N == 1, B row-major with
  M == 1): a warp reads 32 neighbouring outputs of one K row (coalesced), 32 warps split K, the partial
  sums meet in shared memory.
The epilogue runs on the finished sum, with the same `NAME_epilogue` function as the CUTLASS kernels.
"""

from __future__ import annotations

from string import Template

from kernelwright.codegen.gemm_entry import launcher_params
from kernelwright.codegen.kernel import source_template
from kernelwright.fuse.gemm import GemmConfig, GemmView

_TEMPLATE = source_template("kw_gemm_gemv.cu.in")

_DOT_KERNEL = source_template("kw_gemm_gemv_dot.cu.in", fragment=True)

_AXPY_KERNEL = source_template("kw_gemm_gemv_axpy.cu.in", fragment=True)

_LAUNCH_DOT = r'''
  const dim3 grid((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, batch);
  const bool wide = k % 4 == 0 && mat_ld % 4 == 0 && mat_bs % 4 == 0 && vec_stride == 1 && vec_bs % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(mat) % 16 == 0 && reinterpret_cast<uintptr_t>(vec) % 16 == 0;
  const int threads = kWarpsPerBlock * 32;
  if (wide) {
    dot<4><<<grid, threads, 0, stream>>>(mat, mat_ld, mat_bs, vec, vec_stride, vec_bs, d, rows, k$args);
  } else {
    dot<1><<<grid, threads, 0, stream>>>(mat, mat_ld, mat_bs, vec, vec_stride, vec_bs, d, rows, k$args);
  }'''

_LAUNCH_AXPY = r'''
  const dim3 grid((rows + 31) / 32, batch);
  axpy<<<grid, dim3(32, 32), 0, stream>>>(mat, mat_ld, mat_bs, vec, vec_stride, vec_bs, d, rows, k$args);'''


def render_cuda(name: str, view: GemmView, config: GemmConfig, epilogue_function: str) -> str:
    operands = range(len(view.operands))
    if view.n == 1:
        # out[l, m] = A[l, m, :] . B[l, :, 0]; B[k, 0] sits at k * ldb (row-major [K, 1]) or k ([1, K]).
        form = "axpy" if view.a_col_major else "dot"
        mat, mat_ld, mat_bs, rows = "a", "lda", "batch_stride_a", "m"
        vec, vec_stride, vec_bs = "b", "1" if view.b_col_major else "ldb", "batch_stride_b"
        coords = ("r", "0")
    else:
        # out[l, n] = A[l, 0, :] . B[l, :, n]; the matrix is B, the vector A's single row.
        form = "dot" if view.b_col_major else "axpy"
        mat, mat_ld, mat_bs, rows = "b", "ldb", "batch_stride_b", "n"
        vec, vec_stride, vec_bs = "a", "lda" if view.a_col_major else "1", "batch_stride_a"
        coords = ("0", "r")
    loads = []
    for j, operand in enumerate(view.operands):
        n_term = f" + {coords[1]}" if operand.kind in ("full", "row") else ""
        loads.append(f", __ldg(e{j} + l * e{j}_sl + {coords[0]} * e{j}_sm{n_term})")
    args = "".join(f", e{j}, e{j}_sm, e{j}_sl" for j in operands)
    params = "".join(f", const float* __restrict__ e{j}, long long e{j}_sm, long long e{j}_sl"
                     for j in operands)
    kernel, launch = (_DOT_KERNEL, _LAUNCH_DOT) if form == "dot" else (_AXPY_KERNEL, _LAUNCH_AXPY)
    return _TEMPLATE.substitute(
        name=name, epilogue_function=epilogue_function, params=launcher_params(view), form=form,
        coords=f"(l, {coords[0]}, {coords[1]})", operand_params=params, operand_loads="".join(loads),
        kernel=kernel.substitute(operand_params=params, operand_args=args),
        launch=Template(launch).substitute(args=args),
        mat=mat, mat_ld=mat_ld, mat_bs=mat_bs, vec=vec, vec_stride=vec_stride, vec_bs=vec_bs, rows=rows,
    ).lstrip()
