// The 3xTF32 GEMM's parts that do not depend on the model: the exact split of an FP32 operand into TF32
// big and small parts (kept splits fingerprinted per tile), and the cuBLAS TF32 call. One copy per
// translation unit of a kernel library, however many GEMMs it holds (codegen/gemm_tf32x3.py renders each
// GEMM's epilogue pass).
#pragma once
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cstdint>
#include <mutex>
#include "kw_common.cuh"

// Everything in a namespace of its own per translation unit, so that two kernel libraries in one process (of
// two kernelwright versions, say) never share an object. nvcc names even an anonymous namespace (after the
// file and its content), so the one function with state, `cublas()`, is `static`: an inline function's
// static locals are GNU-unique symbols, one per process.
namespace kw_x3 {
namespace {


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

// Where a tile's first element (flat index e0) lies in a [batch, rows, cols] matrix: one 64-bit division
// per tile; `locate` finds the tile's element j from it in 32-bit arithmetic (j < kTile, so c + j and the
// row that follows stay below 2^32 whatever the matrix's size).
struct Origin {
  long long l;
  unsigned r, c;
};

__device__ __forceinline__ Origin tile_origin(long long e0, int rows, int cols) {
  const long long rest = e0 / cols;
  return {rest / rows, static_cast<unsigned>(rest % rows), static_cast<unsigned>(e0 - rest * cols)};
}

__device__ __forceinline__ void locate(const Origin& o, unsigned j, int rows, int cols, long long& l,
                                       long long& r, long long& c) {
  const unsigned cj = o.c + j, q = cj / static_cast<unsigned>(cols);
  c = cj - q * static_cast<unsigned>(cols);
  const unsigned rq = o.r + q, p = rq / static_cast<unsigned>(rows);
  r = rq - p * static_cast<unsigned>(rows);
  l = o.l + p;
}

// The row length of a split stored [3 * kp, cols] (K along the rows): cols rounded up to a multiple of 4, so
// that every row starts 16-byte aligned, as cuBLAS's fast TF32 kernels need (a row-major B of N = 4099
// took a 4-byte-aligned kernel: 2.17 ms against ATen's FP32 1.56, H100). The columns past `cols` are never
// written: cuBLAS computes the product's padded columns from them, which nothing reads.
__host__ __device__ __forceinline__ long long row_pitch(long long cols) { return (cols + 3) / 4 * 4; }

// Element (l, r, c) of the source, value x, into the split's three blocks (the layouts of split_kernel
// below), with the zero pad that follows it when it ends a row of K. Not inlined: the 4-byte stores are the
// slow path (unaligned rows, or a kept split's tile that changed), and 16 inlined copies per kernel made
// most of ptxas's time for the GEMM library.
__device__ __noinline__ void split_one(float x, long long l, long long r, long long c, int rows, int cols,
                                      long long kp, int along_cols, int pad, int smalls, float* dst) {
  float parts[2];
  split(x, parts[0], parts[1]);
#pragma unroll
  for (int part = 0; part < 3; ++part) {
    const long long o = along_cols ? (l * rows + r) * 3 * kp + part * kp + c
                                   : ((l * 3 + part) * kp + r) * row_pitch(cols) + c;
    dst[o] = parts[(smalls >> part) & 1];
    if (pad > 0 && along_cols && c == cols - 1) {
      for (int q = 1; q <= pad; ++q) dst[o + q] = 0.f;
    } else if (pad > 0 && !along_cols && r == rows - 1) {
      for (int q = 1; q <= pad; ++q) dst[o + static_cast<long long>(q) * row_pitch(cols)] = 0.f;
    }
  }
}

// src [batch, rows, cols] (unit column stride) -> dst, dense: [batch, rows, 3 * kp] when K runs along the
// columns, else [batch, 3 * kp, row_pitch(cols)], kp = K + pad being K rounded up to a multiple of 4 (the
// pad entries zero: they add nothing to the product, and every K block, leading dimension and chunk
// boundary stays 16-byte aligned; cuBLAS's TF32 kernels on an unaligned 3K ran slower than FP32: K = 4099,
// 3.98 ms vs ATen's 2.83). Block `part` holds the small halves when bit `part` of `smalls` is set. The
// source is walked in tiles of kTile consecutive elements (row-major), one per block step.
// With FINGERPRINTS (a parameter's split, kept across calls), a tile is split only when its fingerprint
// differs from the one stored for it, which is stored once the tile's writes are visible device-wide: one
// read of the parameter per call decides, whatever wrote it (writes through `param.data` move no version
// counter). Two streams refreshing one split at once: a tile either looks changed to both (both write the
// same values) or is complete when it looks unchanged, so the worst case is a redundant split.
// FLAT (a dense source, 16-byte aligned, whose rows are not: K odd in an nn.Linear weight): the tile is read
// as the flat array it is, VEC values at a time across row ends, and written a value at a time. The
// fingerprint terms are the per-element ones of the other forms: a kept split may be checked by either.
template <int VEC, bool FINGERPRINTS, bool FLAT>
__global__ void __launch_bounds__(kThreads) split_kernel(const float* __restrict__ src, long long ld,
                                                        long long bs, int rows, int cols, long long elements,
                                                        int along_cols, int pad, int smalls,
                                                        float* __restrict__ dst,
                                                        unsigned long long* fingerprints,
                                                        unsigned long long salt) {
  constexpr int ITEMS = kTile / (kThreads * VEC);
  const long long kp = (along_cols ? cols : rows) + pad;
  const long long tiles = (elements + kTile - 1) / kTile;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const Origin origin = tile_origin(tile * kTile, rows, cols);
    kw::Vec<float, VEC> x[ITEMS];
    [[maybe_unused]] unsigned long long term = 0;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int j = (k * kThreads + static_cast<int>(threadIdx.x)) * VEC;
      const long long e = tile * kTile + j;
      if (e >= elements) continue;
      if constexpr (FLAT) {
        if (e + VEC <= elements) {
          x[k] = kw::load_vec<float, VEC>(src + e);
        } else {
#pragma unroll
          for (int v = 0; v < VEC; ++v) x[k].v[v] = e + v < elements ? src[e + v] : 0.f;
        }
      } else {
        long long l, r, c;
        locate(origin, j, rows, cols, l, r, c);
        x[k] = kw::load_vec<float, VEC>(src + l * bs + r * ld + c);
      }
      if constexpr (FINGERPRINTS) {
#pragma unroll
        for (int v = 0; v < VEC; ++v)
          if (!FLAT || e + v < elements) term += fingerprint_term(__float_as_uint(x[k].v[v]), j + v);
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
      if constexpr (FLAT || VEC == 1) {
        for (int v = 0; v < VEC && e + v < elements; ++v) {
          locate(origin, j + v, rows, cols, l, r, c);
          split_one(x[k].v[v], l, r, c, rows, cols, kp, along_cols, pad, smalls, dst);
        }
        continue;
      }
      locate(origin, j, rows, cols, l, r, c);
      kw::Vec<float, VEC> big, small;
#pragma unroll
      for (int v = 0; v < VEC; ++v) split(x[k].v[v], big.v[v], small.v[v]);
#pragma unroll
      for (int part = 0; part < 3; ++part) {
        const long long o = along_cols ? (l * rows + r) * 3 * kp + part * kp + c
                                       : ((l * 3 + part) * kp + r) * row_pitch(cols) + c;
        kw::store_vec<float, VEC>(dst + o, (smalls >> part) & 1 ? small : big);
        // the pad after K's last entry: by the vector ending a row (K along the columns), or for each
        // column of the last row (K along the rows)
        if (pad > 0 && along_cols && c + VEC == cols) {
          for (int q = 0; q < pad; ++q) dst[o + VEC + q] = 0.f;
        } else if (pad > 0 && !along_cols && r == rows - 1) {
          for (int q = 1; q <= pad; ++q)
            for (int v = 0; v < VEC; ++v) dst[o + static_cast<long long>(q) * row_pitch(cols) + v] = 0.f;
        }
      }
    }
    if constexpr (FINGERPRINTS) {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) *reinterpret_cast<volatile unsigned long long*>(fingerprints + tile) = print;
    }
  }
}

// A split made anew with K along the columns, where the source's rows are not 16-byte aligned (K not a
// multiple of 4, or an offset source): one thread per 4 columns of a row, read a value at a time, written
// as three 16-byte stores (dst's rows, 3 * kp long, start aligned); a row's last vector carries K's zero pad.
// The flat kernel's 4-byte form took 307 us for a 4096 x 4099 activation (its 16-byte form 98 us at 4096);
// with this one level2/05 (that activation, Linear to 4093) ran 1.858 ms instead of 2.030 (H100).
template <typename Index>
__global__ void __launch_bounds__(kThreads) split_rows_kernel(const float* __restrict__ src, long long ld,
                                                             long long bs, int rows, int cols,
                                                             long long vectors, long long kp, int smalls,
                                                             float* __restrict__ dst) {
  const long long per_row = kp / 4;
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < vectors;
       i += static_cast<long long>(gridDim.x) * kThreads) {
    long long l, r, c;
    coordinates<Index>(i, per_row, rows, 4, l, r, c);
    const float* row = src + l * bs + r * ld;
    kw::Vec<float, 4> x, big, small;
#pragma unroll
    for (int v = 0; v < 4; ++v) x.v[v] = c + v < cols ? __ldg(row + c + v) : 0.f;
#pragma unroll
    for (int v = 0; v < 4; ++v) split(x.v[v], big.v[v], small.v[v]);
    const long long o = (l * rows + r) * 3 * kp + c;
#pragma unroll
    for (int part = 0; part < 3; ++part)
      kw::store_vec<float, 4>(dst + o + part * kp, (smalls >> part) & 1 ? small : big);
  }
}

// split_kernel's instance: with fingerprints when given.
template <int VEC, bool FLAT = false>
void launch_split(const float* src, long long ld, long long bs, int rows, int cols, long long elements,
                  int along_cols, int pad, int smalls, float* dst, unsigned long long* fingerprints,
                  unsigned long long salt, cudaStream_t stream) {
  const long long tiles = (elements + kTile - 1) / kTile;
  const unsigned grid = static_cast<unsigned>(kw::grid_size(tiles * kThreads, kThreads, 8));
  if (fingerprints != nullptr) {
    split_kernel<VEC, true, FLAT><<<grid, kThreads, 0, stream>>>(src, ld, bs, rows, cols, elements, along_cols,
                                                                 pad, smalls, dst, fingerprints, salt);
  } else {
    split_kernel<VEC, false, FLAT><<<grid, kThreads, 0, stream>>>(src, ld, bs, rows, cols, elements,
                                                                  along_cols, pad, smalls, dst, nullptr, 0);
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

static Cublas& cublas() {
  static Cublas* api = [] {
    Cublas* c = new Cublas();
    c->create = reinterpret_cast<CreateFn>(cublas_symbol("cublasCreate_v2"));
    c->set_stream = reinterpret_cast<SetStreamFn>(cublas_symbol("cublasSetStream_v2"));
    c->gemm = reinterpret_cast<GemmFn>(cublas_symbol("cublasGemmStridedBatchedEx"));
    return c;
  }();
  return *api;
}

// `fingerprints`: nullptr for a split made anew (an activation, every call); else a parameter's kept split,
// one word per tile of the source, salted by `salt`, and only the tiles that changed are split again (a
// tile's pad entries are written with it, on the split's first call at the latest). `pad`: K's entries to
// 4-alignment (0-3).
inline const char* split_matrix(const float* src, long long ld, long long bs, int batch, int rows, int cols,
                                int along_cols, int pad, int smalls, float* dst, unsigned long long* fingerprints,
                                unsigned long long salt, cudaStream_t stream) {
  const bool wide = cols % 4 == 0 && ld % 4 == 0 && bs % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const long long elements = static_cast<long long>(batch) * rows * cols;
  // the source is one flat array: element e at src + e
  const bool dense = (rows == 1 || ld == cols) && (batch == 1 || bs == static_cast<long long>(rows) * cols);
  if (wide) {
    launch_split<4>(src, ld, bs, rows, cols, elements, along_cols, pad, smalls, dst, fingerprints, salt, stream);
  } else if (fingerprints == nullptr && along_cols && (cols + pad) % 4 == 0 &&
             reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    const long long kp = cols + pad, vectors = static_cast<long long>(batch) * rows * (kp / 4);
    const unsigned grid = static_cast<unsigned>(kw::grid_size(vectors, kThreads, 8));
    if (vectors < (1ll << 32)) {
      split_rows_kernel<unsigned><<<grid, kThreads, 0, stream>>>(src, ld, bs, rows, cols, vectors, kp, smalls,
                                                                  dst);
    } else {
      split_rows_kernel<unsigned long long><<<grid, kThreads, 0, stream>>>(src, ld, bs, rows, cols, vectors,
                                                                            kp, smalls, dst);
    }
  } else if (dense && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    // read at full width: a kept split's per-call check of level2/05's 4093 x 4099 weight took 164 us
    // a value at a time (H100)
    launch_split<4, true>(src, ld, bs, rows, cols, elements, along_cols, pad, smalls, dst, fingerprints, salt,
                          stream);
  } else {
    launch_split<1>(src, ld, bs, rows, cols, elements, along_cols, pad, smalls, dst, fingerprints, salt, stream);
  }
  return last_error();
}

// d[l] (row-major m x n) = x[l] . y[l] over depth k3 = 3k, both split operands in the layouts the split
// wrote: x is A's, "[m, k3]" (x_t 0) or "[k3, m]" with rows row_pitch(m) apart (x_t 1); y is B's, "[k3, n]"
// (y_t 0; n is then N rounded up to the split's row pitch, d's padded columns computed from its unwritten
// pad) or "[n, k3]" (y_t 1).
// cuBLAS is column-major, so it computes d^T = y^T . x^T. With `chunks` > 1 the big x big block (the last k
// of the depth) is cut into that many consecutive GEMMs, each adding its part to d (beta = 1) with an FP32
// add, after one GEMM over the two correction blocks: the tensor cores' accumulator rounds less exactly than
// FP32 FMAs (measured: 3-9x cuBLAS FP32's error over one 3K-deep pass), so the accumulation of the large
// terms is kept short; the corrections are 2^-11 of the product and need no such care.
inline const char* gemm(const float* x, int x_t, long long x_bs, const float* y, int y_t, long long y_bs,
                        float* d, int ld_d, int batch, int m, int n, int k3, int chunks, cudaStream_t stream) {
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
  const int op_x = x_t ? kOpT : kOpN, ld_x = x_t ? static_cast<int>(row_pitch(m)) : k3;
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
    const float* xc = x + (x_t ? static_cast<long long>(k0) * ld_x : k0);
    const float* yc = y + (y_t ? k0 : static_cast<long long>(k0) * n);
    const int status = api.gemm(handle, op_y, op_x, n, m, k1 - k0, &one, yc, kR32F, ld_y, y_bs, xc, kR32F,
                                ld_x, x_bs, first ? &zero : &one, d, kR32F, ld_d, static_cast<long long>(m) * ld_d,
                                batch, kCompute32FFastTF32, kGemmDefault);
    if (status != 0) return "cublasGemmStridedBatchedEx failed";
    first = false;
  }
  return last_error();
}


}  // namespace
}  // namespace kw_x3
