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

from kernelwright.codegen.gemm_binding import launcher_params
from kernelwright.fuse.gemm import GemmConfig, GemmView

_TEMPLATE = Template(r'''
#include <cuda_runtime.h>
#include <cstdint>
#include "kw_common.cuh"

$epilogue_function

namespace ${name}_gemv {

// Output r of batch l: the epilogue reads its tensors at (l, m, n) = $coords.
__device__ __forceinline__ float finish(float acc, long long l, long long r$operand_params) {
  return ${name}_epilogue(acc$operand_loads);
}

$kernel
}  // namespace ${name}_gemv

size_t ${name}_workspace(int batch, int m, int n, int k, int split_k) { return 0; }

const char* ${name}_launch($params) {
  using namespace ${name}_gemv;
  // The matrix and vector operands of this product ($form form).
  const float* mat = $mat;
  const long long mat_ld = $mat_ld, mat_bs = $mat_bs;
  const float* vec = $vec;
  const long long vec_stride = $vec_stride, vec_bs = $vec_bs;
  const int rows = $rows;
$launch
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}
''')

_DOT_KERNEL = r'''
constexpr int kWarpsPerBlock = 8;

template <int kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) dot(
    const float* __restrict__ mat, long long mat_ld, long long mat_bs, const float* __restrict__ vec,
    long long vec_stride, long long vec_bs, float* __restrict__ d, int rows, int k$operand_params) {
  const int lane = threadIdx.x & 31;
  const long long r = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const long long l = blockIdx.y;
  if (r >= rows) return;
  const float* line = mat + l * mat_bs + r * mat_ld;
  const float* v = vec + l * vec_bs;
  float acc = 0.0f;
  if constexpr (kVec == 4) {
    for (int i = lane * 4; i < k; i += 32 * 4) {
      const kw::Vec<float, 4> x = kw::load_vec<float, 4>(line + i);
      const kw::Vec<float, 4> y = kw::load_vec<float, 4>(v + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) acc = fmaf(x.v[j], y.v[j], acc);
    }
  } else {
    for (int i = lane; i < k; i += 32) acc = fmaf(__ldg(line + i), __ldg(v + i * vec_stride), acc);
  }
  acc = kw::warp_reduce(acc, kw::Sum());
  if (lane == 0) d[l * rows + r] = finish(acc, l, r$operand_args);
}
'''

_AXPY_KERNEL = r'''
__global__ void __launch_bounds__(1024) axpy(
    const float* __restrict__ mat, long long mat_ld, long long mat_bs, const float* __restrict__ vec,
    long long vec_stride, long long vec_bs, float* __restrict__ d, int rows, int k$operand_params) {
  __shared__ float partial[32][33];   // +1 column: no bank conflicts when thread (x, 0) sums column x
  const long long r = static_cast<long long>(blockIdx.x) * 32 + threadIdx.x;
  const long long l = blockIdx.y;
  float acc = 0.0f;
  if (r < rows) {
    const float* column = mat + l * mat_bs + r;
    const float* v = vec + l * vec_bs;
    for (long long i = threadIdx.y; i < k; i += 32) {
      acc = fmaf(__ldg(column + i * mat_ld), __ldg(v + i * vec_stride), acc);
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && r < rows) {
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) total += partial[j][threadIdx.x];
    d[l * rows + r] = finish(total, l, r$operand_args);
  }
}
'''

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
        kernel=Template(kernel.strip("\n")).substitute(operand_params=params, operand_args=args),
        launch=Template(launch).substitute(args=args),
        mat=mat, mat_ld=mat_ld, mat_bs=mat_bs, vec=vec, vec_stride=vec_stride, vec_bs=vec_bs, rows=rows,
    ).lstrip()
