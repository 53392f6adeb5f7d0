"""3xTF32 GEMMs on cuBLAS's TF32 tensor-core kernels: FP32 accuracy at tensor-core speed.

Each FP32 operand is split exactly into x = big + small, `big` being x rounded to TF32 (10 mantissa bits)
and `small` the remainder. The product A·B is then A_small·B_big + A_big·B_small + A_big·B_big (the
small·small term, 2^-22 of the product, is dropped as CUTLASS's `OpMultiplyAddFastF32` drops it), and the
three products are ONE TF32 GEMM of depth 3K over the operands concatenated along K:

    [A_small | A_big | A_big] · [B_big ; B_small ; B_big]

The tensor cores accumulate all 3K terms in FP32, so the result matches an FP32 GEMM's accuracy (better
than cuBLAS's FP32 SIMT kernels at large K, measured in `bench/kernels/bench_gemm.py`) while running on the
TF32 units: about 3x their FP32 rate / 3. The split is a bandwidth-bound kernel of ours (reads an operand
once, writes it three times). A parameter's split (an `nn.Linear` weight) is kept by the binding, with a
64-bit fingerprint per 4096-element tile of the values it was made from; every call's split kernel reads
the parameter, and re-splits only the tiles whose fingerprint changed. So no write goes unseen (writes
through `param.data` move no version counter), with no host sync, for one read of the weight per call
(an 8192x8192 weight: 0.27 GB against the split's 1.07 GB). The GEMM
epilogue (bias, activations, residuals) runs as one elementwise pass over the product, with the same
`NAME_epilogue` function as the CUTLASS kernels.

cuBLAS is reached without its headers or a link-time dependency (neither exists on a CPU-only build
machine): the launcher looks its three entry points up in the libcublas that torch has already loaded, and
reports an error, which verification (`verify/measure.py`) treats as "keep ATen", where there is none.
"""

from __future__ import annotations

from string import Template

from kernelwright.codegen.gemm_binding import binding_plumbing, input_index, stored_matrices
from kernelwright.fuse.gemm import GemmConfig, GemmView

# Which of the three K blocks carry the small part: A = [small, big, big], B = [big, small, big].
SMALLS_A = 0b001
SMALLS_B = 0b010

_CUDA = Template(r'''
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cstdint>
#include <mutex>
#include "kw_common.cuh"

$epilogue_function

namespace ${name}_x3 {

// x == big + small exactly: big is x rounded to the nearest TF32 value, small the (FP32-exact) rest.
__device__ __forceinline__ void split(float x, float& big, float& small) {
  const unsigned bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) { big = x; small = 0.f; return; }   // inf and NaN pass as is
  float b = __uint_as_float((bits + 0x1000u) & 0xffffe000u);
  if (isinf(b)) b = __uint_as_float(bits & 0xffffe000u);   // rounding past FLT_MAX: truncate instead
  big = b;
  small = x - b;       // exact (Sterbenz: b is within a factor 2 of x)
}

constexpr int kThreads = 256;
constexpr int kTile = 4096;    // elements: one block's step, and the unit of a cached split's fingerprints

// One element's part of its tile's fingerprint (`j`: its position in the tile): a 32-bit bijective mix of
// its bits (multiply-xorshift: every input bit reaches every output bit) times an odd key per position,
// summed over the tile mod 2^64. One changed element always changes the sum (a nonzero difference below
// 2^32 times an odd key below 2^32 is not 0 mod 2^64); several collide with a chance near 2^-64.
__device__ __forceinline__ unsigned long long fingerprint_term(unsigned bits, unsigned j) {
  unsigned a = (bits ^ (j * 0x9E3779B9u)) * 0x85EBCA6Bu;
  a ^= a >> 15;
  a *= 0xC2B2AE35u;
  a ^= a >> 13;
  return static_cast<unsigned long long>(a) * ((j * 0x632BE5ABu) | 1u);
}

// Whether this tile's stored fingerprint equals the block's sum of `term` plus `salt`; `print` gets that
// fingerprint. The salt is the cached split's own (unique per cache entry), so words left in reused memory
// by another entry, or never written, match no tile: no zeroing, so no ordering with the stream that made
// the entry. Block-uniform: thread 0 reads the stored word once (another stream's launch may store it
// meanwhile) and shares its answer.
__device__ __forceinline__ bool tile_unchanged(unsigned long long term, unsigned long long salt,
                                               const unsigned long long* stored, unsigned long long& print) {
  __shared__ unsigned long long warps[kThreads / 32];
  __shared__ unsigned long long shared_print;
  __shared__ bool same;
  for (int m = 16; m > 0; m >>= 1) term += __shfl_xor_sync(0xffffffffu, term, m);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = term;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long sum = 0;
    for (int w = 0; w < kThreads / 32; ++w) sum += warps[w];
    shared_print = sum + salt;
    same = *reinterpret_cast<const volatile unsigned long long*>(stored) == shared_print;
  }
  __syncthreads();      // the next tile's writes to the shared words wait for every thread's reads here
  print = shared_print;
  return same;
}

// r, l and c (in elements) of vector i of a [batch, rows, cols] matrix; 32-bit division where it fits.
template <typename Index>
__device__ __forceinline__ void coordinates(long long i, long long per_row, int rows, int vec, long long& l,
                                            long long& r, long long& c) {
  const Index rest = static_cast<Index>(i) / static_cast<Index>(per_row);
  c = static_cast<long long>(static_cast<Index>(i) - rest * static_cast<Index>(per_row)) * vec;
  l = static_cast<long long>(rest / static_cast<Index>(rows));
  r = static_cast<long long>(rest) - l * rows;
}

// src [batch, rows, cols] (unit column stride) -> dst, dense: [batch, rows, 3 * cols] when K runs along the
// columns, else [batch, 3 * rows, cols]. Block `part` holds the small halves when bit `part` of `smalls`
// is set. The source is walked in tiles of kTile consecutive elements (row-major), one per block step.
// With FINGERPRINTS (a parameter's split, kept across calls), a tile is split only when its fingerprint
// differs from the one stored for it, which is stored once the tile's writes are visible device-wide: one
// read of the parameter per call decides, whatever wrote it (writes through `param.data` move no version
// counter). Two streams refreshing one split at once: a tile either looks changed to both (both write the
// same values) or is complete when it looks unchanged, so the worst case is a redundant split.
template <int VEC, bool FINGERPRINTS, typename Index>
__global__ void __launch_bounds__(kThreads) split_kernel(const float* __restrict__ src, long long ld,
                                                        long long bs, int rows, int cols, long long elements,
                                                        int along_cols, int smalls, float* __restrict__ dst,
                                                        unsigned long long* fingerprints,
                                                        unsigned long long salt) {
  constexpr int ITEMS = kTile / (kThreads * VEC);
  const long long per_row = cols / VEC;
  const long long tiles = (elements + kTile - 1) / kTile;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    kw::Vec<float, VEC> x[ITEMS];
    [[maybe_unused]] unsigned long long term = 0;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int j = (k * kThreads + static_cast<int>(threadIdx.x)) * VEC;
      const long long e = tile * kTile + j;
      if (e >= elements) continue;
      long long l, r, c;
      coordinates<Index>(e / VEC, per_row, rows, VEC, l, r, c);
      x[k] = kw::load_vec<float, VEC>(src + l * bs + r * ld + c);
      if constexpr (FINGERPRINTS) {
#pragma unroll
        for (int v = 0; v < VEC; ++v) term += fingerprint_term(__float_as_uint(x[k].v[v]), j + v);
      }
    }
    [[maybe_unused]] unsigned long long print = 0;
    if constexpr (FINGERPRINTS) {
      if (tile_unchanged(term, salt, fingerprints + tile, print)) continue;
    }
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int j = (k * kThreads + static_cast<int>(threadIdx.x)) * VEC;
      const long long e = tile * kTile + j;
      if (e >= elements) continue;
      long long l, r, c;
      coordinates<Index>(e / VEC, per_row, rows, VEC, l, r, c);
      kw::Vec<float, VEC> big, small;
#pragma unroll
      for (int v = 0; v < VEC; ++v) split(x[k].v[v], big.v[v], small.v[v]);
#pragma unroll
      for (int part = 0; part < 3; ++part) {
        const long long o = along_cols ? (l * rows + r) * 3 * cols + part * cols + c
                                       : ((l * 3 + part) * rows + r) * cols + c;
        kw::store_vec<float, VEC>(dst + o, (smalls >> part) & 1 ? small : big);
      }
    }
    if constexpr (FINGERPRINTS) {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) *reinterpret_cast<volatile unsigned long long*>(fingerprints + tile) = print;
    }
  }
}

template <int VEC, bool FINGERPRINTS>
void launch_split(const float* src, long long ld, long long bs, int rows, int cols, long long elements,
                  int along_cols, int smalls, float* dst, unsigned long long* fingerprints,
                  unsigned long long salt, cudaStream_t stream) {
  const long long tiles = (elements + kTile - 1) / kTile;
  const unsigned grid = static_cast<unsigned>(kw::grid_size(tiles * kThreads, kThreads, 8));
  if (elements / VEC < (1ll << 32)) {
    split_kernel<VEC, FINGERPRINTS, unsigned><<<grid, kThreads, 0, stream>>>(
        src, ld, bs, rows, cols, elements, along_cols, smalls, dst, fingerprints, salt);
  } else {
    split_kernel<VEC, FINGERPRINTS, unsigned long long><<<grid, kThreads, 0, stream>>>(
        src, ld, bs, rows, cols, elements, along_cols, smalls, dst, fingerprints, salt);
  }
}

// d [batch, m, n] in place: d = NAME_epilogue(d, e0[l, m, n], ...).
template <int VEC>
__global__ void __launch_bounds__(256) epilogue_kernel(float* __restrict__ d, int m, int n,
                                                       long long vectors$operand_params) {
  const long long per_row = n / VEC;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long c = (i % per_row) * VEC, rest = i / per_row;
    const long long r = rest % m, l = rest / m;
    float* at = d + (l * m + r) * n + c;
    kw::Vec<float, VEC> y = kw::load_vec<float, VEC>(at);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const long long col = c + j;
      (void)col;
      y.v[j] = ${name}_epilogue(y.v[j]$operand_loads);
    }
    kw::store_vec<float, VEC>(at, y);
  }
}

inline unsigned grid_for(long long vectors) {
  const long long blocks = (vectors + 255) / 256;
  return static_cast<unsigned>(blocks < 132 * 16 ? (blocks > 0 ? blocks : 1) : 132 * 16);
}

inline const char* last_error() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

// cuBLAS entry points, found in the library torch loaded (no cuBLAS headers or link flags needed).
using CreateFn = int (*)(void**);
using SetStreamFn = int (*)(void*, cudaStream_t);
using GemmFn = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int, long long,
                       const void*, int, int, long long, const void*, void*, int, int, long long, int, int,
                       int);
constexpr int kOpN = 0, kOpT = 1, kR32F = 0, kCompute32FFastTF32 = 77, kGemmDefault = -1;

inline void* cublas_symbol(const char* symbol) {
  void* found = dlsym(RTLD_DEFAULT, symbol);
  for (const char* library : {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}) {
    if (found != nullptr) break;
    void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen(library, RTLD_NOW);
    if (handle != nullptr) found = dlsym(handle, symbol);
  }
  return found;
}

struct Cublas {
  CreateFn create = nullptr;
  SetStreamFn set_stream = nullptr;
  GemmFn gemm = nullptr;
  void* handles[64] = {};        // one per device, created on first use
  std::mutex lock;
};

inline Cublas& cublas() {
  static Cublas* api = [] {
    Cublas* c = new Cublas();
    c->create = reinterpret_cast<CreateFn>(cublas_symbol("cublasCreate_v2"));
    c->set_stream = reinterpret_cast<SetStreamFn>(cublas_symbol("cublasSetStream_v2"));
    c->gemm = reinterpret_cast<GemmFn>(cublas_symbol("cublasGemmStridedBatchedEx"));
    return c;
  }();
  return *api;
}

}  // namespace ${name}_x3

// `fingerprints`: nullptr for a split made anew (an activation, every call); else a parameter's kept split,
// one word per tile of the source, salted by `salt`, and only the tiles that changed are split again.
const char* ${name}_split(const float* src, long long ld, long long bs, int batch, int rows, int cols,
                          int along_cols, int smalls, float* dst, unsigned long long* fingerprints,
                          unsigned long long salt, cudaStream_t stream) {
  using namespace ${name}_x3;
  const bool wide = cols % 4 == 0 && ld % 4 == 0 && bs % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const long long elements = static_cast<long long>(batch) * rows * cols;
  if (wide && fingerprints != nullptr) {
    launch_split<4, true>(src, ld, bs, rows, cols, elements, along_cols, smalls, dst, fingerprints, salt,
                          stream);
  } else if (wide) {
    launch_split<4, false>(src, ld, bs, rows, cols, elements, along_cols, smalls, dst, nullptr, 0, stream);
  } else if (fingerprints != nullptr) {
    launch_split<1, true>(src, ld, bs, rows, cols, elements, along_cols, smalls, dst, fingerprints, salt,
                          stream);
  } else {
    launch_split<1, false>(src, ld, bs, rows, cols, elements, along_cols, smalls, dst, nullptr, 0, stream);
  }
  return last_error();
}

// d[l] (row-major m x n) = x[l] . y[l] over depth k3 = 3k, both split operands in the layouts the split
// wrote: x is A's, "[m, k3]" (x_t 0) or "[k3, m]" (x_t 1); y is B's, "[k3, n]" (y_t 0) or "[n, k3]" (y_t 1).
// cuBLAS is column-major, so it computes d^T = y^T . x^T. With `chunks` > 1 the big x big block (the last k
// of the depth) is cut into that many consecutive GEMMs, each adding its part to d (beta = 1) with an FP32
// add, after one GEMM over the two correction blocks: the tensor cores' accumulator rounds less exactly than
// FP32 FMAs (measured: 3-9x cuBLAS FP32's error over one 3K-deep pass), so the accumulation of the large
// terms is kept short; the corrections are 2^-11 of the product and need no such care.
const char* ${name}_gemm(const float* x, int x_t, long long x_bs, const float* y, int y_t, long long y_bs,
                         float* d, int batch, int m, int n, int k3, int chunks, cudaStream_t stream) {
  using namespace ${name}_x3;
  Cublas& api = cublas();
  if (api.create == nullptr || api.set_stream == nullptr || api.gemm == nullptr)
    return "cuBLAS is not loaded in this process (cublasGemmStridedBatchedEx not found)";
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return "no usable CUDA device";
  std::lock_guard<std::mutex> hold(api.lock);
  if (api.handles[device] == nullptr && api.create(&api.handles[device]) != 0) {
    api.handles[device] = nullptr;
    return "cublasCreate failed";
  }
  void* handle = api.handles[device];
  if (api.set_stream(handle, stream) != 0) return "cublasSetStream failed";
  const float one = 1.f, zero = 0.f;
  const int op_y = y_t ? kOpT : kOpN, ld_y = y_t ? k3 : n;
  const int op_x = x_t ? kOpT : kOpN, ld_x = x_t ? m : k3;
  const int k = k3 / 3;
  chunks = chunks < 1 ? 1 : (chunks > k / 4 ? (k / 4 > 1 ? k / 4 : 1) : chunks);
  bool first = true;
  for (int c = chunks == 1 ? -1 : 0; c <= (chunks == 1 ? -1 : chunks); ++c) {
    // c == -1: the whole depth at once; c == 0: the two correction blocks; c >= 1: chunk c of the big block,
    // its boundaries on multiples of 4 (16-byte aligned operand addresses)
    int k0 = 0, k1 = k3;
    if (c == 0) {
      k1 = 2 * k;
    } else if (c > 0) {
      k0 = 2 * k + static_cast<int>(static_cast<long long>(k) * (c - 1) / chunks) / 4 * 4;
      k1 = c == chunks ? k3 : 2 * k + static_cast<int>(static_cast<long long>(k) * c / chunks) / 4 * 4;
    }
    if (k1 <= k0) continue;
    const float* xc = x + (x_t ? static_cast<long long>(k0) * m : k0);
    const float* yc = y + (y_t ? k0 : static_cast<long long>(k0) * n);
    const int status = api.gemm(handle, op_y, op_x, n, m, k1 - k0, &one, yc, kR32F, ld_y, y_bs, xc, kR32F,
                                ld_x, x_bs, first ? &zero : &one, d, kR32F, n, static_cast<long long>(m) * n,
                                batch, kCompute32FFastTF32, kGemmDefault);
    if (status != 0) return "cublasGemmStridedBatchedEx failed";
    first = false;
  }
  return last_error();
}

const char* ${name}_finish(float* d, $operand_decls int batch, int m, int n, cudaStream_t stream) {
  using namespace ${name}_x3;
  const long long elements = static_cast<long long>(batch) * m * n;
  if (n % 4 == 0) {
    epilogue_kernel<4><<<grid_for(elements / 4), 256, 0, stream>>>(d, m, n, elements / 4$operand_args);
  } else {
    epilogue_kernel<1><<<grid_for(elements), 256, 0, stream>>>(d, m, n, elements$operand_args);
  }
  return last_error();
}
''')


def render_cuda(name: str, view: GemmView, config: GemmConfig, epilogue_function: str) -> str:
    del config      # one instantiation serves every shape: sizes are arguments
    operands = range(len(view.operands))
    loads = []
    for j, operand in enumerate(view.operands):
        n_term = " + col" if operand.kind in ("full", "row") else ""
        loads.append(f", __ldg(e{j} + l * e{j}_sl + r * e{j}_sm{n_term})")
    return _CUDA.substitute(
        name=name, epilogue_function=epilogue_function,
        operand_params="".join(f", const float* __restrict__ e{j}, long long e{j}_sm, long long e{j}_sl"
                               for j in operands),
        operand_decls="".join(f"const float* e{j}, long long e{j}_sm, long long e{j}_sl, " for j in operands),
        operand_args="".join(f", e{j}, e{j}_sm, e{j}_sl" for j in operands),
        operand_loads="".join(loads),
    ).lstrip()


def finish_params(view: GemmView) -> str:
    operands = "".join(
        f"const float* e{j}, long long e{j}_sm, long long e{j}_sl, " for j in range(len(view.operands))
    )
    return f"float* d, {operands}int batch, int m, int n, cudaStream_t stream"


def has_epilogue(view: GemmView) -> bool:
    """Whether anything runs after the product (a bias, addmm's scaling, pointwise ops)."""
    if view.operands or view.epilogue:
        return True
    return view.anchor.op == "addmm" and float(view.anchor.attr("alpha", 1)) != 1


_BINDING = Template(r'''
const char* ${launcher}_split(const float* src, long long ld, long long bs, int batch, int rows, int cols,
                              int along_cols, int smalls, float* dst, unsigned long long* fingerprints,
                              unsigned long long salt, cudaStream_t stream);
const char* ${launcher}_gemm(const float* x, int x_t, long long x_bs, const float* y, int y_t, long long y_bs,
                             float* d, int batch, int m, int n, int k3, int chunks, cudaStream_t stream);
const char* ${launcher}_finish(${finish_params});

#ifndef KW_TF32X3_DETAIL
#define KW_TF32X3_DETAIL
#include <c10/cuda/CUDACachingAllocator.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
namespace kw_tf32x3 {
// An epilogue tensor collapsed to its (L, M, N) extents, dense (copied when it is not).
inline at::Tensor dense(const at::Tensor& t, int64_t l, int64_t m, int64_t n) {
  at::Tensor v = t.reshape({l, m, n});
  return v.is_contiguous() ? v : v.clone(at::MemoryFormat::Contiguous);
}

using split_fn = const char* (*)(const float*, long long, long long, int, int, int, int, int, float*,
                                 unsigned long long*, unsigned long long, cudaStream_t);

// `source` [batch, rows, cols] split into `out`, dense [batch, rows, 3 cols] (along_cols) or
// [batch, 3 rows, cols]; with `fingerprints`, only the tiles whose values changed (see NAME_split).
inline void split_into(split_fn launch, const at::Tensor& source, int64_t batch, int64_t rows, int64_t cols,
                       bool along_cols, int smalls, at::Tensor& out, unsigned long long* fingerprints,
                       unsigned long long salt, cudaStream_t stream, const char* kernel) {
  at::Tensor v = source.stride(2) == 1 ? source : source.contiguous();
  const char* error = launch(v.data_ptr<float>(), rows == 1 ? cols : v.stride(1),
                             batch == 1 ? 0 : v.stride(0),
                             static_cast<int>(batch), static_cast<int>(rows), static_cast<int>(cols),
                             along_cols ? 1 : 0, smalls, out.data_ptr<float>(), fingerprints, salt, stream);
  KW_CHECK(error == nullptr, kernel, ": ", error == nullptr ? "" : error);
}

inline at::Tensor empty_split(const at::Tensor& source, int64_t batch, int64_t rows, int64_t cols,
                              bool along_cols) {
  return along_cols ? at::empty({batch, rows, 3 * cols}, source.options())
                    : at::empty({batch, 3 * rows, cols}, source.options());
}

// An operand that changes every call (an activation): split anew.
inline at::Tensor split(split_fn launch, const at::Tensor& source, int64_t batch, int64_t rows, int64_t cols,
                        bool along_cols, int smalls, const char* kernel) {
  at::Tensor out = empty_split(source, batch, rows, cols, along_cols);
  split_into(launch, source, batch, rows, cols, along_cols, smalls, out, nullptr, 0,
             c10::cuda::getCurrentCUDAStream().stream(), kernel);
  return out;
}

// A parameter's split, kept while the parameter lives, with a fingerprint per tile of the values it was
// made from. No version counter or pointer decides whether it is current: every call's split kernel reads
// the parameter and re-splits the tiles whose fingerprint moved, so every write is seen, `param.data.copy_`
// and slice assignment included, for one read of the weight (no host sync). Shared by all streams: a tile
// is complete whenever its stored fingerprint matches (see NAME_split).
struct CacheEntry {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> source;
  const c10::TensorImpl* impl;
  int64_t key[6];                // device, batch, rows, cols, along_cols, smalls (a parameter split 2 ways)
  at::Tensor split;
  at::Tensor fingerprints;       // one word per tile of 4096 elements (kTile), never initialized
  unsigned long long salt;       // this entry's own, mixed into its fingerprints
  cudaStream_t made_on;          // the stream the two tensors were allocated on
};

// splitmix64: distinct, well-mixed salts from a counter.
inline unsigned long long next_salt() {
  static std::atomic<unsigned long long> counter{0};
  unsigned long long z = (counter.fetch_add(1) + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline at::Tensor cached_split(split_fn launch, const at::Tensor& param, const at::Tensor& source,
                               int64_t batch, int64_t rows, int64_t cols, bool along_cols, int smalls,
                               const char* kernel) {
  static std::mutex lock;
  static auto* entries = new std::vector<CacheEntry>();     // never destroyed: no CUDA frees at exit
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  const int64_t key[6] = {param.get_device(), batch, rows, cols, along_cols ? 1 : 0, smalls};
  std::lock_guard<std::mutex> hold(lock);
  size_t found = SIZE_MAX;
  for (size_t i = 0; i < entries->size();) {
    CacheEntry& e = (*entries)[i];
    if (e.source.expired()) {          // the parameter is gone: drop its split
      entries->erase(entries->begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (e.impl == param.unsafeGetTensorImpl() && std::equal(key, key + 6, e.key)) found = i;
    ++i;
  }
  if (found == SIZE_MAX) {
    using weak_impl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
    const int64_t tiles = (batch * rows * cols + 4095) / 4096;
    found = entries->size();
    entries->push_back({weak_impl(param.getIntrusivePtr()), param.unsafeGetTensorImpl(),
                        {key[0], key[1], key[2], key[3], key[4], key[5]},
                        empty_split(source, batch, rows, cols, along_cols),
                        at::empty({tiles}, source.options().dtype(at::kLong)), next_salt(), stream.stream()});
  }
  CacheEntry& entry = (*entries)[found];
  if (entry.made_on != stream.stream()) {
    // Read here too: the allocator must not hand the memory out again (once the parameter is gone) before
    // this stream's work on it is done.
    c10::cuda::CUDACachingAllocator::recordStream(entry.split.storage().data_ptr(), stream);
    c10::cuda::CUDACachingAllocator::recordStream(entry.fingerprints.storage().data_ptr(), stream);
  }
  split_into(launch, source, batch, rows, cols, along_cols, smalls, entry.split,
             reinterpret_cast<unsigned long long*>(entry.fingerprints.data_ptr<int64_t>()), entry.salt,
             stream.stream(), kernel);
  return entry.split;
}
}  // namespace kw_tf32x3
#endif  // KW_TF32X3_DETAIL

std::vector<at::Tensor> ${name}(std::vector<at::Tensor> inputs) {
${checks}
  const int64_t batch = ${batch}, m = ${m}, n = ${n}, k = ${k};
  at::Tensor x = ${a_split};
  at::Tensor y = ${b_split};
${operand_lines}
  at::Tensor out = at::empty({${out_shape}}, inputs[0].options());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const char* error = ${launcher}_gemm(x.data_ptr<float>(), ${a_t}, ${a_batch} == 1 ? 0 : 3 * m * k,
                                       y.data_ptr<float>(), ${b_t}, ${b_batch} == 1 ? 0 : 3 * k * n,
                                       out.data_ptr<float>(), batch, m, n, 3 * k, ${chunks}, stream);
  KW_CHECK(error == nullptr, "${name}: ", error == nullptr ? "" : error);
${finish}
  return {out};
}
''')

_FINISH = ('  error = ${launcher}_finish(out.data_ptr<float>(), ${operand_args} batch, m, n, stream);\n'
           '  KW_CHECK(error == nullptr, "${name}: ", error == nullptr ? "" : error);')


def render_binding(name: str, launcher: str, group, view: GemmView, config: GemmConfig) -> str:
    """The C++ binding: split A (and B, cached when it is a parameter), one cuBLAS call, the epilogue."""
    checks, operand_lines, operand_args = binding_plumbing(name, group, view, "kw_tf32x3::dense")
    (a_batch, a_rows, a_cols), (b_batch, b_rows, b_cols) = stored_matrices(view)

    def split_expr(node, batch, rows, cols, k_along_cols: bool, smalls: int) -> str:
        index = input_index(group, node)
        source = f"inputs[{index}].reshape({{{batch}, {rows}, {cols}}})"
        along = "true" if k_along_cols else "false"
        if node.op == "param":
            return (f"kw_tf32x3::cached_split({launcher}_split, inputs[{index}], {source}, {batch}, "
                    f"{rows}, {cols}, {along}, {smalls}, \"{name}\")")
        return (f"kw_tf32x3::split({launcher}_split, {source}, {batch}, {rows}, {cols}, {along}, {smalls}, "
                f"\"{name}\")")

    finish = ""
    if has_epilogue(view):
        finish = Template(_FINISH).substitute(launcher=launcher, name=name, operand_args=operand_args)
    return _BINDING.substitute(
        name=name, launcher=launcher, finish_params=finish_params(view),
        checks=checks, chunks=config.split_k, batch=view.batch, m=view.m, n=view.n, k=view.k,
        # A row-major [M, K]: K along its columns; column-major (stored [K, M]): along its rows.
        # B the opposite.
        a_split=split_expr(view.a, a_batch, a_rows, a_cols, not view.a_col_major, SMALLS_A),
        b_split=split_expr(view.b, b_batch, b_rows, b_cols, view.b_col_major, SMALLS_B),
        a_t=1 if view.a_col_major else 0, b_t=1 if view.b_col_major else 0, a_batch=a_batch, b_batch=b_batch,
        operand_lines=operand_lines, out_shape=", ".join(str(s) for s in view.output.shape), finish=finish,
    ).lstrip()
