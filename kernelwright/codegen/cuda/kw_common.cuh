// kw_common.cuh — device helpers shared by every kernelwright kernel family.
// Only cuda_runtime.h is assumed: no torch headers reach the .cu, which keeps nvcc at about one second.
// Math follows PyTorch's CUDA kernels (the reference we are judged against): exact functions by default,
// NaN propagation where ATen propagates it. Overloaded math names (exp, tanh, ...) resolve to the float
// versions for float arguments, so no double arithmetic sneaks into FP32 kernels.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <cstdio>
#include <atomic>
#include <type_traits>

#include "kw_entry.h"

namespace kw {

// ------------------------------------------------------------------------------------------- memory

// N elements of T moved as one aligned access (16 bytes: one LDG.128/STG.128 per thread).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <int Bytes> struct RawWord;
template <> struct RawWord<16> { using type = uint4; };
template <> struct RawWord<8> { using type = uint2; };
template <> struct RawWord<4> { using type = unsigned int; };
template <> struct RawWord<2> { using type = unsigned short; };
template <> struct RawWord<1> { using type = unsigned char; };

// Cache policy of an access (the pointwise family's `cache` knob; the other families use the default).
//   ReadOnly:   loads through the non-coherent path (ld.global.nc), plain write-back stores.
//   Streaming:  ld.global.cs / st.global.cs, evict-first: every line is touched once.
//   NoAllocate: ld.global.nc.L1::no_allocate.L2::256B (no L1 line, 256-byte L2 fetches) / st.global.cs.
enum class Cache { ReadOnly, Streaming, NoAllocate };

__device__ __forceinline__ uint4 load_no_allocate(const uint4* p) {
  uint4 w;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w) : "l"(p));
  return w;
}
__device__ __forceinline__ uint2 load_no_allocate(const uint2* p) {
  uint2 w;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(w.x), "=r"(w.y) : "l"(p));
  return w;
}
__device__ __forceinline__ unsigned int load_no_allocate(const unsigned int* p) {
  unsigned int w;
  asm("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(w) : "l"(p));
  return w;
}
// Sub-word loads (narrow scalar tails only) keep the read-only path.
__device__ __forceinline__ unsigned short load_no_allocate(const unsigned short* p) { return __ldg(p); }
__device__ __forceinline__ unsigned char load_no_allocate(const unsigned char* p) { return __ldg(p); }

template <Cache C, typename Word>
__device__ __forceinline__ Word load_word(const Word* p) {
  if constexpr (C == Cache::Streaming) return __ldcs(p);
  else if constexpr (C == Cache::NoAllocate) return load_no_allocate(p);
  else return __ldg(p);
}

template <Cache C, typename Word>
__device__ __forceinline__ void store_word(Word* p, Word w) {
  if constexpr (C == Cache::ReadOnly) *p = w;
  else __stcs(p, w);
}

// N elements as one access; `p` must be aligned to sizeof(Vec). Loads take the read-only path by default.
template <typename T, int N, Cache C = Cache::ReadOnly>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  using Word = typename RawWord<sizeof(T) * N>::type;
  const Word raw = load_word<C>(reinterpret_cast<const Word*>(p));
  Vec<T, N> out;
  memcpy(&out, &raw, sizeof(out));
  return out;
}

template <typename T, int N, Cache C = Cache::ReadOnly>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  if constexpr (C == Cache::ReadOnly) {
    *reinterpret_cast<Vec<T, N>*>(p) = v;
  } else {
    using Word = typename RawWord<sizeof(T) * N>::type;
    Word raw;
    memcpy(&raw, &v, sizeof(raw));
    store_word<C>(reinterpret_cast<Word*>(p), raw);
  }
}

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> splat(T x) {
  Vec<T, N> out;
#pragma unroll
  for (int j = 0; j < N; ++j) out.v[j] = x;
  return out;
}

// One element (bool through its byte: __ldg has no bool overload).
template <typename T, Cache C = Cache::ReadOnly>
__device__ __forceinline__ T load(const T* p) {
  if constexpr (C == Cache::ReadOnly && !std::is_same<T, bool>::value) {
    return __ldg(p);
  } else {
    using Word = typename RawWord<sizeof(T)>::type;
    const Word raw = load_word<C>(reinterpret_cast<const Word*>(p));
    T out;
    memcpy(&out, &raw, sizeof(out));
    return out;
  }
}

template <typename T, Cache C = Cache::ReadOnly>
__device__ __forceinline__ void store(T* p, T value) {
  using Word = typename RawWord<sizeof(T)>::type;
  Word raw;
  memcpy(&raw, &value, sizeof(raw));
  store_word<C>(reinterpret_cast<Word*>(p), raw);
}

// An operand of a flat pointwise kernel, read at offset (i / Inner) % Extent for element i of the domain:
// contiguous over a band of the domain's dims (Extent elements), broadcast over the dims before the band
// and over the Inner elements after it. Contiguous: Band<1, Numel>; one value: Band<1, 1>; a bias [C] over
// [N, C]: Band<1, C>; per channel, [C, 1, 1] over [N, C, H, W]: Band<H * W, C>. An operand contiguous
// over two bands with broadcast dims between them adds ((i / Inner2) % Extent2) * Extent for the outer
// one: per sample and channel, [N, 1, 1, C] over channels-last [N, H, W, C], is Band<1, C, _, H*W*C, N>.
// The constants are known at build time, so the divisions and moduli are multiplies and shifts.
template <long long Inner, long long Extent, long long Numel, long long Inner2 = 1, long long Extent2 = 1>
struct Band {
  // V consecutive elements from a multiple of V are one aligned vector of the operand.
  static constexpr bool vector_loads(int V) {
    return Inner == 1 && Extent != 1 && (Extent == Numel || Extent % V == 0);
  }

  // Bytes the operand's pointer must be aligned to.
  template <typename T, int V>
  static constexpr int alignment() { return vector_loads(V) ? static_cast<int>(sizeof(T)) * V : 1; }

  template <typename I>
  static __device__ __forceinline__ I offset(I i) {
    if constexpr (Extent2 == 1) return inner_offset(i);
    else if constexpr (Inner2 * Extent2 == Numel)
      return inner_offset(i) + i / static_cast<I>(Inner2) * static_cast<I>(Extent);
    else return inner_offset(i) + (i / static_cast<I>(Inner2)) % static_cast<I>(Extent2) * static_cast<I>(Extent);
  }

  template <typename I>
  static __device__ __forceinline__ I inner_offset(I i) {
    if constexpr (Extent == 1) return 0;
    else if constexpr (Inner == 1 && Extent == Numel) return i;
    else if constexpr (Inner * Extent == Numel) return i / static_cast<I>(Inner);
    else if constexpr (Inner == 1) return i % static_cast<I>(Extent);
    else return (i / static_cast<I>(Inner)) % static_cast<I>(Extent);
  }

  // Elements i .. i + V - 1 (i a multiple of V): one vector, one value repeated, or V single loads.
  template <typename T, int V, Cache C, typename I>
  static __device__ __forceinline__ Vec<T, V> load_vec(const T* p, I i) {
    if constexpr (Extent == 1 || Inner % V == 0) {
      return splat<T, V>(load<T, C>(p + offset(i)));
    } else if constexpr (vector_loads(V)) {
      return kw::load_vec<T, V, C>(p + offset(i));
    } else {
      Vec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = load<T, C>(p + offset(i + j));
      return out;
    }
  }
};

template <typename T>
__host__ __device__ __forceinline__ bool is_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0;
}

// Whether `p` and `q` lie at the same offset within a 16-byte word (a row's chunks then align for both).
__host__ __device__ __forceinline__ bool same_phase16(const void* p, const void* q) {
  return (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(q)) % 16 == 0;
}

// N consecutive values from an address of no particular alignment, one load each.
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_each(const T* p) {
  Vec<T, N> out;
#pragma unroll
  for (int j = 0; j < N; ++j) out.v[j] = load<T>(p + j);
  return out;
}

// Asynchronous global -> shared copy of N floats (cp.async, sm_80+; N = 1 or 4, `src` aligned to 4 * N
// bytes). The data does not pass through registers, so one thread can have its whole share of a row in
// flight at once instead of a few loads per loop iteration. Visible to the issuing thread after
// copy_async_wait_all(); other threads need a barrier as well.
template <int N>
__device__ __forceinline__ void copy_async(float* dst, const float* src) {
  static_assert(N == 1 || N == 4, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (N == 4) {
    // .cg: 16-byte copies bypass L1 (the row is read from HBM once, no reuse)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared), "l"(src) : "memory");
  }
#else
  *reinterpret_cast<Vec<float, N>*>(dst) = load_vec<float, N>(src);
#endif
}

__device__ __forceinline__ void copy_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Close the current group of copy_async calls (groups complete in commit order).
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most `pending` of this thread's committed groups are still in flight (the count must be
// an immediate, hence the switch; above 7 it waits for 7, which only waits longer than needed).
__device__ __forceinline__ void copy_async_wait_pending(int pending) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
  }
#endif
}

// ------------------------------------------------------------------------------------------- indexing

template <typename IndexT>
__device__ __forceinline__ IndexT global_thread() {
  return static_cast<IndexT>(blockIdx.x) * blockDim.x + threadIdx.x;
}

template <typename IndexT>
__device__ __forceinline__ IndexT grid_threads() {
  return static_cast<IndexT>(gridDim.x) * blockDim.x;
}

// A host-side fact about the current device, asked once per device (up to 64) and kept: `ask(device)`
// returns it, nonzero. Threads racing on first use may both ask; they get the same answer.
template <typename Ask>
inline int per_device(std::atomic<int> (&memo)[64], Ask ask) {
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64) return ask(device);
  int value = memo[device].load(std::memory_order_relaxed);
  if (value == 0) {
    value = ask(device);
    memo[device].store(value, std::memory_order_relaxed);
  }
  return value;
}

// Blocks for a grid-stride loop over `work` items: enough to fill every SM `blocks_per_sm` times, never
// more than the work needs. The SM count is read once per device at run time (not baked in at build).
inline int grid_size(long long work, int block, int blocks_per_sm) {
  static std::atomic<int> sm_count[64];
  const long long sms = per_device(sm_count, [](int device) {
    int count = 0;
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return count > 0 ? count : 132;
  });
  const long long needed = (work + block - 1) / block;
  const long long cap = sms * blocks_per_sm;
  return static_cast<int>(needed < cap ? (needed > 0 ? needed : 1) : cap);
}

// ------------------------------------------------------------------------------------------- math

template <typename T>
__device__ __forceinline__ bool is_nan(T x) { return x != x; }

// ATen's clamp/relu/maximum propagate NaN; fminf/fmaxf would drop it.
template <typename T>
__device__ __forceinline__ T relu(T x) { return x < T(0) ? T(0) : x; }

template <typename T>
__device__ __forceinline__ T maximum(T a, T b) { return is_nan(a) ? a : (is_nan(b) ? b : (a > b ? a : b)); }

template <typename T>
__device__ __forceinline__ T minimum(T a, T b) { return is_nan(a) ? a : (is_nan(b) ? b : (a < b ? a : b)); }

template <typename T>
__device__ __forceinline__ T clamp_min(T x, T lo) { return is_nan(x) ? x : (x < lo ? lo : x); }

template <typename T>
__device__ __forceinline__ T clamp_max(T x, T hi) { return is_nan(x) ? x : (x > hi ? hi : x); }

template <typename T>
__device__ __forceinline__ T clamp(T x, T lo, T hi) { return clamp_max(clamp_min(x, lo), hi); }

// a / b. For float: IEEE division's own fast path (a reciprocal, a Newton step, a correction: correctly
// rounded) wherever that path is exact (operands and quotient normal, well inside the exponent range), else
// what div.full.f32 computes (operands scaled by a power of 2 into the reciprocal's range, times the
// reciprocal: within 2 ulp, inf, NaN and zeros as IEEE, but for a quotient within an ulp or two of FLT_MAX,
// which may come out inf, as div.full's does), picked by a select, one reciprocal for both. The
// `/` operator branches to a slow-path call instead, and that branch made each element of an unrolled
// epilogue a basic block of its own: nvcc could not interleave their latency chains (a conv epilogue, a warp
// a scheduler, then ran at its instructions' latency, not their issue rate). Other types: `/`.
template <typename T>
__device__ __forceinline__ T divide(T a, T b) { return a / b; }

__device__ __forceinline__ float divide(float a, float b) {
#ifndef __CUDA_ARCH__
  return a / b;   // the math section compiled for the host (a test runs generated code on the CPU)
#else
  const float scale = fabsf(b) > 0x1p126f ? 0.25f : (fabsf(b) < 0x1p-126f ? 0x1p24f : 1.f);
  a *= scale;
  b *= scale;
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  const float near = a * r;
  const float refined = fmaf(fmaf(-b, r, 1.f), r, r);
  const float q0 = a * refined;
  const float q = fmaf(refined, fmaf(-b, q0, a), q0);
  const float fa = fabsf(a), fb = fabsf(b), fq = fabsf(q0);
  const bool exact = fb >= 0x1p-125f && fb <= 0x1p125f && fa >= 0x1p-100f && fa <= 0x1p125f &&
                     fq >= 0x1p-124f && fq <= 0x1p125f;
  return exact ? q : near;
#endif
}

// a / d by IEEE division's fast path alone (a reciprocal, a Newton step, a correction), without kw::divide's
// range checks and scaling, for callers whose operands keep that path correctly rounded: a finite, d in
// [1, 2^125], the quotient normal, and where |a| < 2^-100 (the residual would underflow) d exactly 1 or 2,
// which makes the refined reciprocal exact and the quotient a's exact product by it. The sigmoid's
// t / (1 + t) and 1 / (1 + t) (t = e^-|x| in [0, 1]) and Mish's n / (n + 2) (n in [0, 2.4e17]) are such.
__device__ __forceinline__ float fast_quotient(float a, float d) {
#ifndef __CUDA_ARCH__
  return a / d;
#else
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  const float refined = fmaf(fmaf(-d, r, 1.f), r, r);
  const float q0 = a * refined;
  return fmaf(refined, fmaf(-d, q0, a), q0);
#endif
}

template <typename T>
__device__ __forceinline__ T sigmoid(T x) { return divide(T(1), T(1) + exp(-x)); }

// The sigmoid as (x >= 0 ? 1 : t) / (1 + t) with t = e^-|x|: the divisor stays in [1, 2], so the fast path
// alone divides (fast_quotient), where 1 / (1 + e^-x) needed kw::divide's scaling once e^-x passed 2^125.
// The same bits as before for x >= 0. For x < 0 its error is e^x's plus about 1 ulp, no worse than the old
// form's in a float32 emulation (2.3 ulp with e^x correctly rounded; two reviews' emulations of e^x one ulp
// off gave 2.1 and 4.1). Below -88.72, where e^-x overflows and the old form (as ATen's) gave 0, it gives
// e^x, nonzero down to -103.97. A one-element kernel: 35 SASS instructions instead of 44, loads and stores
// included (sm_90a).
__device__ __forceinline__ float sigmoid(float x) {
  const float t = exp(-fabsf(x));
  return fast_quotient(x >= 0.f ? 1.f : t, 1.f + t);
}

// Not x sigmoid(x): where e^x is subnormal but x e^x is not (x in (-88.72, -87.34)), e^x's rounding alone
// is up to 2 ulp of the product, while x / (1 + e^-x) stays within an ulp (a float32 emulation: 2.3 ulp
// against 0.9, 6.2 with e^x one subnormal step off); below -88.72 it gives -0, as ATen's does.
template <typename T>
__device__ __forceinline__ T silu(T x) { return divide(x, T(1) + exp(-x)); }

// Mish, x tanh(log1p(e^x)), as x n / (n + 2) with n = e^x (e^x + 2) (tanh(log u) = (u^2 - 1) / (u^2 + 1) with
// u = 1 + e^x): one exp and one division instead of exp, log1p and tanh, within a few ulp everywhere (the
// ratio's relative sensitivity to n is 2 / (n + 2) <= 1). Past x = 20 tanh(softplus(x)) rounds to 1 (in
// double too), so n is taken at min(x, 20) (e^2x would overflow past 44) and the ratio is then exactly 1:
// no select, which nvcc compiled as a branch around the math, a basic block per element of an unrolled
// epilogue; -inf and NaN give NaN as the original does. In a conv epilogue (one warp a scheduler) libm's
// three took 1.15 ms, this formula with `/` and the select 0.70 (level2/07's conv + Mish + Tanh; with a ReLU
// 0.27; H100); branch-free, 0.477 -> 0.408 ms (H200). The ratio is `mish_ratio`.
template <typename T>
__device__ __forceinline__ T mish_ratio(T n) { return n / (n + T(2)); }

// n / (n + 2) for Mish's n in [0, 2.4e17]: the divisor lies in [2, 2.4e17], inside the reciprocal's range,
// and it is exactly 2 wherever n < 2^-100. IEEE division's fast path is therefore correctly rounded for
// every n (fast_quotient), and kw::divide's range checks and scaling, which always picked it here, are left
// out: the same bits, 18 floating-point instructions an element instead of 30 (sm_90a SASS, with e^x and
// the product by x).
__device__ __forceinline__ float mish_ratio(float n) { return fast_quotient(n, n + 2.f); }

template <typename T>
__device__ __forceinline__ T mish(T x) {
  const T e = exp(fmin(x, T(20)));
  return x * mish_ratio(e * (e + T(2)));
}

// Exact GELU: 0.5 x (1 + erf(x / sqrt 2)).
template <typename T>
__device__ __forceinline__ T gelu_erf(T x) { return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440))); }

// GELU, tanh approximation (PyTorch's approximate="tanh"): x^3 as x*x*x, never pow.
template <typename T>
__device__ __forceinline__ T gelu_tanh(T x) {
  const T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh(inner));
}

template <typename T>
__device__ __forceinline__ T softplus(T x, T beta, T threshold) {
  return x * beta > threshold ? x : divide(log1p(exp(x * beta)), beta);
}

template <typename T>
__device__ __forceinline__ T elu(T x, T alpha, T scale, T input_scale) {
  return x <= T(0) ? expm1(x * input_scale) * (alpha * scale) : x * scale;
}

template <typename T>
__device__ __forceinline__ T leaky_relu(T x, T slope) { return x > T(0) ? x : x * slope; }

// As ATen's CUDA kernels: times one sixth, computed as 1.0f / 6.0f even for double (a float constant there).
template <typename T>
__device__ __forceinline__ T hardsigmoid(T x) { return clamp(x + T(3), T(0), T(6)) * T(1.0f / 6.0f); }

template <typename T>
__device__ __forceinline__ T hardswish(T x) { return x * clamp(x + T(3), T(0), T(6)) * T(1.0f / 6.0f); }

// As ATen's sign: both comparisons are false for NaN, so sign(NaN) is 0.
template <typename T>
__device__ __forceinline__ T sign(T x) { return T((T(0) < x) - (x < T(0))); }

template <typename T>
__device__ __forceinline__ T iabs(T x) { return x < T(0) ? -x : x; }

// Python floor division for floats, as ATen's div_floor_floating.
template <typename T>
__device__ __forceinline__ T div_floor(T a, T b) {
  if (b == T(0)) return a / b;
  const T mod = fmod(a, b);
  T div = (a - mod) / b;
  if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);
  if (div == T(0)) return copysign(T(0), a / b);
  T floordiv = floor(div);
  if (div - floordiv > T(0.5)) floordiv += T(1);
  return floordiv;
}

template <typename T>
__device__ __forceinline__ T idiv_floor(T a, T b) {
  const T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Python modulus (sign of the divisor), as ATen's remainder.
template <typename T>
__device__ __forceinline__ T remainder(T a, T b) {
  T mod = fmod(a, b);
  if (mod != T(0) && (b < T(0)) != (mod < T(0))) mod += b;
  return mod;
}

template <typename T>
__device__ __forceinline__ T iremainder(T a, T b) {
  T mod = a % b;
  if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
  return mod;
}

template <typename T>
__device__ __forceinline__ T ipow(T base, T exponent) {
  if (exponent < 0) return base == T(1) ? T(1) : (base == T(-1) ? (exponent % 2 ? T(-1) : T(1)) : T(0));
  T result = 1;
  while (exponent) {
    if (exponent & 1) result *= base;
    base *= base;
    exponent >>= 1;
  }
  return result;
}

// ------------------------------------------------------------------------------------------- reductions

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T value, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Reduce over the whole block; every thread gets the result. `scratch` holds one value per warp (32).
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T value, Op op, T identity, T* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  value = warp_reduce(value, op);
  __syncthreads();   // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  value = lane < warps ? scratch[lane] : identity;
  return warp_reduce(value, op);
}

struct Sum { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct Max { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return maximum(a, b); } };
struct Min { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return minimum(a, b); } };

// ------------------------------------------------------------------------------------------- host entries
// The message of a launcher's CUDA error code (nullptr for success).
inline const char* launch_error(int error) {
  if (error == 0) return nullptr;
  static thread_local char text[256];
  snprintf(text, sizeof(text), "kernel launch failed: %s", cudaGetErrorString(static_cast<cudaError_t>(error)));
  return text;
}

// A strided launcher's arguments from the operands: each one's pointer and its strides over the kernel's
// rank-R domain.
template <int N, int R, typename Launcher>
inline const char* strided_entry(Launcher launch, const KwOperand* operands, void* const* outputs,
                                 cudaStream_t stream) {
  const void* in[N + 1];
  long long strides[N * R + 1];
  for (int k = 0; k < N; ++k) {
    in[k] = operands[k].data;
    for (int d = 0; d < R; ++d) strides[k * R + d] = operands[k].strides[d];
  }
  return launch_error(launch(in, strides, outputs, stream));
}

// A [batch, rows, cols] matrix operand's row stride (a single row: its width rounded up to the access
// width) and batch stride (0 for a single matrix, which every batch reads).
inline long long row_stride(const KwOperand& v, long long cols, long long align) {
  return v.sizes[1] == 1 ? (cols + align - 1) / align * align : v.strides[1];
}
inline long long batch_stride(const KwOperand& v) { return v.sizes[0] == 1 ? 0 : v.strides[0]; }

}  // namespace kw
