// CUTLASS sm90 implicit-GEMM convolution (fprop, NHWC, TF32 wgmma, TMA im2col) with its epilogue fused as
// an epilogue visitor tree: y = relu(conv(x, w) + bias[k]) and, with -DSTATS=1, each channel's sum and sum of
// squares of y into sums[0:K] and sums[K:2K]. Route (b) of issue #20, measured beside cuDNN by
// bench/kernels/probe_conv_sm90.py, which builds this file with -DTM/TN/TK (tile), -DSTAGES (0: as many as
// shared memory holds), -DCM/CN (cluster). Not used by the compiler yet: see the results' NOTES.md.
// Build with -DNDEBUG: CUTLASS's device asserts are calls between wgmma issue and wait, and ptxas then
// serializes every wgmma of the kernel (warning C7510; 1.4-1.6x slower on the H100).
// CUTLASS 4.2's ConvUniversal accepts only the one-consumer-warpgroup, non-persistent schedule
// (KernelImplicitTmaWarpSpecializedSm90; the cooperative and ping-pong ones are commented out in its builder).
#include <cuda_runtime.h>
#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/conv/convolution.h>
#include <cutlass/conv/convnd_problem_shape.hpp>
#include <cutlass/conv/device/conv_universal_adapter.hpp>
#include <cutlass/conv/kernel/conv_universal.hpp>
#include <cutlass/conv/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include "kw_conv_pingpong.cuh"

#ifndef PINGPONG
#define PINGPONG 0
#endif
#ifndef NCHW
// 1: y written NCHW (contiguous [N, K, P, Q]) by the consumer threads from their accumulators (ping-pong
// only), instead of NHWC tiles by the epilogue collective's TMA stores
#define NCHW 0
#endif
#ifndef STATS
// 1: also each channel's sum and sum of squares of y (a following BatchNorm's statistics), reduced across the
// tiles by CUTLASS's deterministic row reduction (the last tile of a column reduces the column);
// 2: the same sums, each tile's partial stored in the workspace and reduced across tiles by a second kernel;
// 3 (with NCHW): the same partials, summed by the NCHW store from its staged tile (no visitor-tree reduction)
#define STATS 0
#endif

using namespace cute;
namespace fu = cutlass::epilogue::fusion;

// Sm90Compute instantiates the functor on Array fragments (and on the element type, for its Arguments).
template <class T> struct Epi {};
template <int N> struct Epi<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc,
                                                     cutlass::Array<float, N> const& b) const {
    cutlass::Array<float, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) { float v = acc[i] + b[i]; out[i] = v > 0.f ? v : 0.f; }
    return out;
  }
};

using TileShape = Shape<Int<TM>, Int<TN>, Shape<Int<TK>>>;
using ClusterShape = Shape<Int<CM>, Int<CN>, _1>;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecialized;
using Bias = fu::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>, 4>;
using Compute = fu::Sm90Compute<Epi, float, float, cutlass::FloatRoundStyle::round_to_nearest>;
using Output = fu::Sm90EVT<Compute, fu::Sm90AccFetch, Bias>;
#if STATS == 1 || STATS == 2
// A row reduction (over M = N*P*Q: per output channel) passes its input through, so the sums chain above y
// and y is still what D stores. Per element: sum += y (plus) or sum += y*y (plus_square); partial sums are
// then combined by plus, across the warp and, deterministically, across tiles through the workspace (the last
// tile of a column reduces the column; no float atomics).
template <class T> struct plus_square {
  CUTLASS_HOST_DEVICE T operator()(T const& sum, T const& value) const { return sum + value * value; }
};
template <template <class> class Map>
using ChannelSum = fu::Sm90RowReduction<Map, cutlass::plus, cutlass::plus, 0, TileShape, float, float,
                                        cutlass::FloatRoundStyle::round_to_nearest, Stride<_0, _1, _0>, 4,
                                        true, /*FinalReduction=*/STATS == 1>;
using EVT = fu::Sm90EVT<ChannelSum<plus_square>, fu::Sm90EVT<ChannelSum<cutlass::plus>, Output>>;
static_assert(PINGPONG, "the statistics need the epilogue workspace, which only the ping-pong kernel provides");
#else
using EVT = Output;
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, cutlass::layout::TensorNHWC, 4,
    float, cutlass::layout::TensorNHWC, 4,
    EpiSchedule, EVT>::CollectiveOp;

using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop,
    float, cutlass::layout::TensorNHWC, 4,
    float, cutlass::layout::TensorNHWC, 4,
    float, TileShape, ClusterShape,
    std::conditional_t<STAGES == 0, cutlass::conv::collective::StageCountAutoCarveout<int(sizeof(typename CollectiveEpilogue::SharedStorage)) + (PINGPONG ? 1024 : 0) + (NCHW ? TN * (TM + 4) * 4 : 0)>, cutlass::conv::collective::StageCount<STAGES>>,
    cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;

using ProblemShape = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop,
                                                     CollectiveMainloop::DispatchPolicy::NumSpatialDimensions>;
using Kernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;
#if NCHW
static_assert(PINGPONG && (STATS == 0 || STATS == 3), "the NCHW store is a ping-pong kernel's (statistics: 3)");
// relu(acc + bias[k]) stored at y[((img * K + k) * P*Q + pq)]: the warpgroup writes its tile to shared memory
// channel-major, then each warp stores whole channel rows: 32 lanes, 128 consecutive pixels, 16 bytes a lane
// where P*Q is a multiple of 4 (else 32 pixels, 4 bytes a lane).
// (Stored straight from the accumulators, each store covered 4 channels x 8 pixels: 0.66 ms instead of 0.24.)
struct NchwBiasRelu {
  struct Params {
    float* y = nullptr;
    const float* bias = nullptr;
    int m = 0;                    // N * P * Q output pixels
    int k = 0;                    // output channels
    cutlass::FastDivmod pq{};     // P * Q: a pixel's image and its position in it
    float* partials = nullptr;    // STATS 3: [tiles][kpad] sums of y, then as many sums of y*y
    int kpad = 0;
    int64_t tiles = 0;
  };
  struct SharedStorage {
    alignas(16) float tile[TN][TM + 4];   // +4: the accumulators' 4 columns x 8 rows a store hit 32 banks
  };
  // (kw::ConvPingpong's register step: this probe computes its epilogue in `store`)
  template <class Accumulators, class TiledMma>
  CUTLASS_DEVICE static void finish(Params const&, Accumulators&, TiledMma const&, int, int64_t, int) {}
  template <class Accumulators, class TiledMma>
  CUTLASS_DEVICE static void store(Params const& p, Accumulators const& acc, TiledMma const& mma, int thread,
                                   int64_t m0, int n0, SharedStorage& smem) {
    auto thr = mma.get_thread_slice(thread);
    Tensor coords = thr.partition_C(make_identity_tensor(Shape<Int<TM>, Int<TN>>{}));
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      const int mi = get<0>(coords(i)), ni = get<1>(coords(i));
      const int n = n0 + ni;
      const float v = acc(i) + (n < p.k ? __ldg(p.bias + n) : 0.f);
      smem.tile[ni][mi] = v > 0.f ? v : 0.f;
    }
    // the two consumer warpgroups (1 and 2: warpgroup 0 is kw::ConvPingpong's producer) each sync on their
    // own barrier (user ids 1 and 2: NamedBarrier adds CUTLASS's reserved count)
    const uint32_t barrier = cutlass::canonical_warp_group_idx();
    cutlass::arch::NamedBarrier::sync(128, barrier);
    const int lane = thread & 31, warp = thread >> 5;
    if (TM == 128 && p.pq.divisor % 4 == 0) {
      // 16-byte stores: lane l takes pixels 4l..4l+3 of every channel row (one image: P*Q is a multiple of 4)
      const int m = static_cast<int>(m0) + 4 * lane;
      int img, pq;
      p.pq(img, pq, m < p.m ? m : 0);
      const int64_t base = static_cast<int64_t>(img) * p.k * p.pq.divisor + pq;
      for (int ni = warp; ni < TN && n0 + ni < p.k; ni += 4) {
        if (m < p.m) {
          *reinterpret_cast<float4*>(p.y + base + static_cast<int64_t>(n0 + ni) * p.pq.divisor) =
              *reinterpret_cast<const float4*>(&smem.tile[ni][4 * lane]);
        }
      }
    } else {
      store_scalar(p, m0, n0, lane, warp, smem);
    }
    if constexpr (STATS == 3) {
      // (a scheduler swizzle above 1 would round the tile count up: tiles past M write no partials)
      if (m0 >= p.m) {
        cutlass::arch::NamedBarrier::sync(128, barrier);
        return;
      }
      // a channel a thread: its row of the staged tile (16-byte reads, 8 lanes a phase on 8 distinct rows:
      // no bank conflict), the tile's pixels only (past the last pixel the tile holds relu(bias))
      const int valid = p.m - static_cast<int>(m0) < TM ? p.m - static_cast<int>(m0) : TM;
      for (int c = thread; c < TN && n0 + c < p.k; c += 128) {
        float sum = 0.f, squares = 0.f;
#pragma unroll 4
        for (int i = 0; i < TM; i += 4) {
          const float4 v = *reinterpret_cast<const float4*>(&smem.tile[c][i]);
          const float e[4] = {v.x, v.y, v.z, v.w};
          CUTLASS_PRAGMA_UNROLL
          for (int t = 0; t < 4; ++t) {
            const float x = i + t < valid ? e[t] : 0.f;
            sum += x;
            squares += x * x;
          }
        }
        const int64_t at = m0 / TM * p.kpad + n0 + c;
        p.partials[at] = sum;
        p.partials[p.tiles * p.kpad + at] = squares;
      }
    }
    // (the math warpgroups' order barrier already keeps the other warpgroup's writes after these reads; this
    // sync is redundant, kept as measured)
    cutlass::arch::NamedBarrier::sync(128, barrier);
  }

  // 4-byte stores of 32 consecutive pixels a warp (P*Q not a multiple of 4)
  CUTLASS_DEVICE static void store_scalar(Params const& p, int64_t m0, int n0, int lane, int warp,
                                          SharedStorage& smem) {
    int64_t base[TM / 32];
    bool live[TM / 32];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < TM / 32; ++j) {
      const int m = static_cast<int>(m0) + lane + 32 * j;
      live[j] = m < p.m;
      int img, pq;
      p.pq(img, pq, live[j] ? m : 0);
      base[j] = static_cast<int64_t>(img) * p.k * p.pq.divisor + pq;
    }
    for (int ni = warp; ni < TN && n0 + ni < p.k; ni += 4) {
      const int64_t channel = static_cast<int64_t>(n0 + ni) * p.pq.divisor;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < TM / 32; ++j) {
        if (live[j]) p.y[base[j] + channel] = smem.tile[ni][lane + 32 * j];
      }
    }
  }
};
using Direct = NchwBiasRelu;
#else
using Direct = void;
#endif
#if PINGPONG
// the same mainloop and epilogue under kw_conv_pingpong.cuh's persistent ping-pong kernel
using Pingpong = kw::ConvPingpong<ProblemShape, CollectiveMainloop, CollectiveEpilogue, Direct>;
static_assert(Pingpong::SharedStorageSize <= 232448, "over the H100's 227 KB of shared memory a block");
#endif

// The output's sizes: N*P*Q pixels, P*Q an image; with STATS 2 and 3, each tile's partial sums,
// [tiles = ceil(N*P*Q / TM), kpad = K rounded up to TN] floats for y and as many for y*y, lie in the workspace
// after the kernel's own, and a second kernel sums each channel's column in tile order.
struct OutputSizes {
  int pixels, pq, kpad;
  long long tiles;
  size_t partial_floats() const { return static_cast<size_t>(tiles * kpad); }
};
inline OutputSizes output_sizes(int n, int h, int wd, int k, int r, int s, int pad_h, int pad_w, int str_h,
                                int str_w, int dil_h, int dil_w) {
  const int p = (h + 2 * pad_h - dil_h * (r - 1) - 1) / str_h + 1;
  const int q = (wd + 2 * pad_w - dil_w * (s - 1) - 1) / str_w + 1;
  return {n * p * q, p * q, (k + TN - 1) / TN * TN, (static_cast<long long>(n) * p * q + TM - 1) / TM};
}

#if STATS >= 2
// One warp per 32 channels and statistic: lane j sums column j down the tiles (coalesced rows), then the
// warps of a block combine in a fixed order. grid (ceil(K / 32), 2), 1024 threads.
__global__ void __launch_bounds__(1024) reduce_partials(const float* __restrict__ partials, float* __restrict__ sums,
                                                        long long tiles, int k, int kpad) {
  __shared__ float part[32][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * 32 + lane;
  const float* src = partials + static_cast<size_t>(blockIdx.y) * tiles * kpad;
  float acc = 0.f;
  if (col < k) {
    for (long long t = warp; t < tiles; t += 32) acc += src[t * kpad + col];
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && col < k) {
    float total = 0.f;
    for (int w = 0; w < 32; ++w) total += part[w][lane];
    sums[blockIdx.y * k + col] = total;
  }
}
#endif

template <class Arguments>
Arguments arguments(const float* x, const float* w, const float* bias, float* y, float* sums, int n, int h,
                    int wd, int c, int k, int r, int s, int pad_h, int pad_w, int str_h, int str_w, int dil_h,
                    int dil_w) {
  ProblemShape shape(cutlass::conv::Mode::kCrossCorrelation, {n, h, wd, c}, {k, r, s, c},
                     {pad_h, pad_w}, {pad_h, pad_w}, {str_h, str_w}, {dil_h, dil_w}, 1);
  Arguments args{};
  args.problem_shape = shape;
  args.mainloop = {x, w};
  typename Output::Arguments output{{}, {bias, 0.f, {_0{}, _1{}, 0}}, {}};
#if STATS == 1
  args.epilogue.thread = {{output, {sums, 0.f, {}}}, {sums + k, 0.f, {}}};
#elif STATS == 2
  // `sums` is the partials' start here (kw_conv_launch passes the workspace past the kernel's own)
  const OutputSizes out = output_sizes(n, h, wd, k, r, s, pad_h, pad_w, str_h, str_w, dil_h, dil_w);
  args.epilogue.thread = {{output, {sums, 0.f, {}}}, {sums + out.partial_floats(), 0.f, {}}};
#else
  (void)sums;
  args.epilogue.thread = output;
#endif
  args.epilogue.ptr_C = nullptr;
  auto& dD = args.epilogue.dD;
  cute::for_each(cute::make_seq<cute::rank<0>(typename CollectiveEpilogue::StrideD{})>{}, [&](auto i) {
    cute::get<0, i>(dD) = shape.stride_C[ProblemShape::RankT - 2 - i];
  });
  args.epilogue.dC = dD;
  args.epilogue.ptr_D = y;
#if NCHW
  const OutputSizes pixels = output_sizes(n, h, wd, k, r, s, pad_h, pad_w, str_h, str_w, dil_h, dil_w);
  args.direct = {y, bias, pixels.pixels, k, cutlass::FastDivmod(pixels.pq)};
#if STATS == 3
  args.direct.partials = sums;      // the partials' start (kw_conv_launch: the workspace past the kernel's own)
  args.direct.kpad = pixels.kpad;
  args.direct.tiles = pixels.tiles;
#endif
#endif
  int dev = 0;
  cudaGetDevice(&dev);
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  return args;
}

extern "C" const char* kw_conv_launch(const float* x, const float* w, const float* bias, float* y, float* sums,
    int n, int h, int wd, int c, int k, int r, int s, int pad_h, int pad_w, int str_h, int str_w,
    int dil_h, int dil_w, void* workspace, size_t* workspace_bytes, cudaStream_t stream) {
#if PINGPONG
#if STATS >= 2
  const OutputSizes out = output_sizes(n, h, wd, k, r, s, pad_h, pad_w, str_h, str_w, dil_h, dil_w);
  const size_t own = (Pingpong::get_workspace_size(arguments<Pingpong::Arguments>(
      x, w, bias, y, nullptr, n, h, wd, c, k, r, s, pad_h, pad_w, str_h, str_w, dil_h, dil_w)) + 255) / 256 * 256;
  float* partials = workspace ? reinterpret_cast<float*>(static_cast<char*>(workspace) + own) : nullptr;
  auto args = arguments<Pingpong::Arguments>(x, w, bias, y, partials, n, h, wd, c, k, r, s, pad_h, pad_w, str_h,
                                             str_w, dil_h, dil_w);
  if (workspace_bytes) { *workspace_bytes = own + 2 * out.partial_floats() * sizeof(float); return nullptr; }
#else
  auto args = arguments<Pingpong::Arguments>(x, w, bias, y, sums, n, h, wd, c, k, r, s, pad_h, pad_w, str_h, str_w,
                                             dil_h, dil_w);
  if (workspace_bytes) { *workspace_bytes = Pingpong::get_workspace_size(args); return nullptr; }
#endif
  if (!Pingpong::can_implement(args)) return "can_implement failed";
  if (Pingpong::initialize_workspace(args, workspace, stream) != cutlass::Status::kSuccess) {
    return "initialize failed";
  }
  auto params = Pingpong::to_underlying_arguments(args, workspace);
  auto kernel = kw::conv_pingpong_kernel<Pingpong>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Pingpong::SharedStorageSize);
  if (e != cudaSuccess) return cudaGetErrorString(e);
  kernel<<<Pingpong::get_grid_shape(params), Pingpong::get_block_shape(), Pingpong::SharedStorageSize, stream>>>(
      params);
#if STATS >= 2
  reduce_partials<<<dim3((k + 31) / 32, 2), 1024, 0, stream>>>(partials, sums, out.tiles, k, out.kpad);
#endif
#else
  auto args = arguments<Conv::Arguments>(x, w, bias, y, sums, n, h, wd, c, k, r, s, pad_h, pad_w, str_h, str_w,
                                         dil_h, dil_w);
  Conv op;
  if (workspace_bytes) { *workspace_bytes = Conv::get_workspace_size(args); return nullptr; }
  if (op.can_implement(args) != cutlass::Status::kSuccess) return "can_implement failed";
  if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return "initialize failed";
  if (op.run(stream) != cutlass::Status::kSuccess) return "run failed";
#endif
  cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}
