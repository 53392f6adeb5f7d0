// An operand of the SM90 3xTF32 GEMM (codegen/gemm_sm90x3.py) made K-major: src [batch, R, K] read at
// (l, r, k) -> src[l * s_b + r * s_r + k * s_k] (s_r or s_k is 1), copied to dst [batch, R, ldk] dense, ldk =
// K rounded up to 4, the pad zero (TMA wants 16-byte aligned rows, and CUTLASS a depth that is a multiple
// of 4: the GEMM runs over ldk, the zeros adding nothing). 32x32
// tiles through shared memory, so that a source contiguous along R (B stored [K, N], a column-major A) is
// read and written coalesced.
#pragma once
#include <cuda_runtime.h>

// In an anonymous namespace: a model's kernel library is several translation units, each with the headers
// (codegen/build.py `_kw_units`), and a plain __global__ function would be defined in each.
namespace kw_kmajor {
namespace {

__global__ void __launch_bounds__(256) kmajor_kernel(const float* __restrict__ src, long long s_b,
                                                     long long s_r, long long s_k, int batch, int rows, int k,
                                                     long long ldk, float* __restrict__ dst) {
  __shared__ float tile[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;      // 32 x 8
  const int k0 = blockIdx.x * 32;
  for (long long l = blockIdx.z; l < batch; l += gridDim.z) {
    const float* s = src + l * s_b;
    float* d = dst + l * rows * ldk;
    for (int r0 = blockIdx.y * 32; r0 < rows; r0 += gridDim.y * 32) {
      if (s_k == 1) {
#pragma unroll
        for (int j = 0; j < 32; j += 8) {
          const int r = r0 + ty + j, kk = k0 + tx;
          if (r < rows && kk < k) tile[ty + j][tx] = s[r * s_r + kk];
        }
      } else {
#pragma unroll
        for (int j = 0; j < 32; j += 8) {
          const int r = r0 + tx, kk = k0 + ty + j;
          if (r < rows && kk < k) tile[tx][ty + j] = s[r * s_r + kk * s_k];
        }
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 32; j += 8) {
        const int r = r0 + ty + j, kk = k0 + tx;
        if (r < rows && kk < ldk) d[r * ldk + kk] = kk < k ? tile[ty + j][tx] : 0.f;
      }
      __syncthreads();
    }
  }
}

// nullptr, or CUDA's error
inline const char* kmajor(const float* src, long long s_b, long long s_r, long long s_k, int batch, int rows,
                          int k, float* dst, cudaStream_t stream) {
  const long long ldk = (k + 3) / 4 * 4;
  const int row_tiles = (rows + 31) / 32;
  const dim3 grid((k + 31) / 32, row_tiles < 65535 ? row_tiles : 65535, batch < 65535 ? batch : 65535);
  kmajor_kernel<<<grid, dim3(32, 8), 0, stream>>>(src, s_b, s_r, s_k, batch, rows, k, ldk, dst);
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

}  // namespace
}  // namespace kw_kmajor
