// kw_common.cuh — device helpers shared by every kernelwright kernel family.
// Only cuda_runtime.h is assumed: no torch headers reach the .cu, which keeps nvcc at about one second.
// Math follows PyTorch's CUDA kernels (the reference we are judged against): exact functions by default,
// NaN propagation where ATen propagates it. Overloaded math names (exp, tanh, ...) resolve to the float
// versions for float arguments, so no double arithmetic sneaks into FP32 kernels.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <atomic>

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

// Read-only load of a Vec through the non-coherent path; `p` must be aligned to sizeof(Vec).
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  Vec<T, N> out;
  if constexpr (sizeof(T) * N == 1) {
    out = *reinterpret_cast<const Vec<T, N>*>(p);
  } else {
    using Word = typename RawWord<sizeof(T) * N>::type;
    const Word raw = __ldg(reinterpret_cast<const Word*>(p));
    memcpy(&out, &raw, sizeof(out));
  }
  return out;
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> splat(T x) {
  Vec<T, N> out;
#pragma unroll
  for (int j = 0; j < N; ++j) out.v[j] = x;
  return out;
}

template <typename T>
__device__ __forceinline__ T load(const T* p) { return __ldg(p); }
template <>
__device__ __forceinline__ bool load<bool>(const bool* p) { return *p; }

template <typename T>
__host__ __device__ __forceinline__ bool is_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0;
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

template <typename T>
__device__ __forceinline__ T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }

template <typename T>
__device__ __forceinline__ T silu(T x) { return x / (T(1) + exp(-x)); }

template <typename T>
__device__ __forceinline__ T mish(T x) { return x * tanh(log1p(exp(x))); }

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
  return x * beta > threshold ? x : log1p(exp(x * beta)) / beta;
}

template <typename T>
__device__ __forceinline__ T elu(T x, T alpha, T scale, T input_scale) {
  return x <= T(0) ? expm1(x * input_scale) * (alpha * scale) : x * scale;
}

template <typename T>
__device__ __forceinline__ T leaky_relu(T x, T slope) { return x > T(0) ? x : x * slope; }

template <typename T>
__device__ __forceinline__ T hardsigmoid(T x) { return clamp(x + T(3), T(0), T(6)) / T(6); }

template <typename T>
__device__ __forceinline__ T hardswish(T x) { return x * clamp(x + T(3), T(0), T(6)) / T(6); }

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

}  // namespace kw
