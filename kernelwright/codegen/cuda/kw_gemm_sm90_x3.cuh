// kw::X3Mainloop: the 3xTF32 mainloop of the SM90 GEMM (codegen/gemm_sm90x3.py). CUTLASS's TMA + GMMA
// warp-specialized SS mainloop (cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp) does the
// loads, the pipeline and the parameters; this subclass adds a second pair of stage buffers (the small parts)
// and replaces the consumer (`mma`). Instantiated with ElementA = ElementB = uint32_t and a TF32 TiledMma,
// so that TMA copies raw 32-bit words: CUTLASS's float path converts f32 to tf32 on load, dropping exactly
// the bits the small part needs.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/arch/barrier.h>
#include <cutlass/gemm/collective/collective_mma.hpp>
#include <cute/tensor.hpp>

// probe only (bench/kernels/gemm_sm90_x3.py): 1 = no split (wrong sums, the MMAs' time), 2 = one TF32 product
#ifndef KW_X3_PROBE_MODE
#define KW_X3_PROBE_MODE 0
#endif

namespace kw {
using namespace cute;

// Promotion: k-tiles between the FP32 promotions of the tensor cores' partial sums (see below)
template <class Base, int Promotion = 4>
struct X3Mainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::Params;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TiledMma;
  static_assert(cute::is_same_v<typename Base::ElementA, uint32_t> &&
                cute::is_same_v<typename Base::ElementB, uint32_t>, "raw 32-bit operands: no TMA conversion");

  // the base's stage buffers, then the small parts of each stage in the same layouts
  struct TensorStorage : Base::TensorStorage {
    cute::array_aligned<typename TiledMma::ValTypeA, cute::cosize_v<SmemLayoutA>> smem_As;
    cute::array_aligned<typename TiledMma::ValTypeB, cute::cosize_v<SmemLayoutB>> smem_Bs;
  };

  // ---- kw: the 3xTF32 consumer. Each stage's FP32 tiles (raw bits, as TMA copied them) are the big parts
  // (the tensor cores read a TF32 operand's top 19 bits: x truncated); the consumer threads write each
  // element's rest, small = x - big (exact), to smem_As / smem_Bs in the same layouts, then A_small.B +
  // A.B_small + A.B go to the tensor cores (the dropped A_small.B_small is below 2^-20 of each product),
  // accumulating in `partial`, added to the FP32 accumulators with an FADD every `Promotion`
  // k-tiles: the tensor cores' own accumulation rounds less exactly than FP32 adds, so it is kept short
  // (H100, 2026-11-27: every 4 k-tiles of 32, 2-3x more accurate than cuBLAS FP32 against float64; every 16,
  // less accurate). One tile's MMAs stay in flight while the next stage is split. Rounding the big part in
  // place instead (cvt.rna, a second store per element) was 1.4x slower for 1.4x less error.
  static constexpr int NumMmaThreads = size(TiledMma{});

  // x's small part: x - big exactly, big being x with its 13 low mantissa bits dropped (what the tensor cores
  // read of a TF32 operand: the tile itself is the big part); inf and NaN have none
  CUTLASS_DEVICE static float small_part(float x) {
    const uint32_t bits = __float_as_uint(x);
    return (bits & 0x7f800000u) == 0x7f800000u ? 0.f : x - __uint_as_float(bits & 0xffffe000u);
  }

  template <int N>
  CUTLASS_DEVICE static void split_tile(const void* tile, void* smalls, int thread) {
    const float4* x = reinterpret_cast<const float4*>(tile);
    float4* s = reinterpret_cast<float4*>(smalls);
    CUTLASS_PRAGMA_UNROLL
    for (int i = thread; i < N / 4; i += NumMmaThreads) {
      const float4 v = x[i];
      s[i] = make_float4(small_part(v.x), small_part(v.y), small_part(v.z), small_part(v.w));
    }
  }

  CUTLASS_DEVICE static void split_stage(TensorStorage& shared_tensors, int stage, int thread) {
    constexpr int TileA = size<0>(SmemLayoutA{}) * size<1>(SmemLayoutA{});
    constexpr int TileB = size<0>(SmemLayoutB{}) * size<1>(SmemLayoutB{});
    static_assert(TileA % (4 * NumMmaThreads) == 0 && TileB % (4 * NumMmaThreads) == 0, "whole float4s");
    split_tile<TileA>(shared_tensors.smem_A.data() + stage * TileA,
                      shared_tensors.smem_As.data() + stage * TileA, thread);
    split_tile<TileB>(shared_tensors.smem_B.data() + stage * TileB,
                      shared_tensors.smem_Bs.data() + stage * TileB, thread);
    cutlass::arch::fence_view_async_shared();            // the generic-proxy writes, seen by the wgmma reads
    cutlass::arch::NamedBarrier::sync(NumMmaThreads, 0);  // every consumer's part of the stage written
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void
  mma(MainloopPipeline pipeline,
      PipelineState smem_pipe_read,
      FrgTensorC& accum,
      int k_tile_count,
      int thread_idx,
      TensorStorage& shared_tensors,
      Params const& mainloop_params) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    // (BLK_M, BLK_K, PIPE) and (BLK_N, BLK_K, PIPE): the stages, and their small parts
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    Tensor sAs = make_tensor(make_smem_ptr(shared_tensors.smem_As.data()), SmemLayoutA{});
    Tensor sBs = make_tensor(make_smem_ptr(shared_tensors.smem_Bs.data()), SmemLayoutB{});

    constexpr int MmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout =
        make_layout(Int<MmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));     // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));     // (MMA,MMA_N,MMA_K,PIPE)
    Tensor tCrAs = thread_mma.make_fragment_A(thread_mma.partition_A(sAs));
    Tensor tCrBs = thread_mma.make_fragment_B(thread_mma.partition_B(sBs));

    auto partial = make_fragment_like(accum);
    clear(accum);
    (void)mainloop_params;
    constexpr int interval = Promotion;
    int since = 0, pending = 0;
    PipelineState smem_pipe_release = smem_pipe_read;
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);
    CUTLASS_PRAGMA_NO_UNROLL
    for ( ; k_tile_count > 0; --k_tile_count) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      const int stage = smem_pipe_read.index();
#if KW_X3_PROBE_MODE == 0
      split_stage(shared_tensors, stage, thread_idx);
#endif

      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
#if KW_X3_PROBE_MODE != 2
        cute::gemm(tiled_mma, tCrAs(_,_,k_block,stage), tCrB(_,_,k_block,stage), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        cute::gemm(tiled_mma, tCrA(_,_,k_block,stage), tCrBs(_,_,k_block,stage), partial);
#endif
        cute::gemm(tiled_mma, tCrA(_,_,k_block,stage), tCrB(_,_,k_block,stage), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++pending;
      if (++since == interval) {
        warpgroup_wait<0>();
        warpgroup_fence_operand(partial);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) += partial(i);
        since = 0;
        tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
        for (; pending > 0; --pending) {
          pipeline.consumer_release(smem_pipe_release);
          ++smem_pipe_release;
        }
      } else {
        warpgroup_wait<1>();                 // the previous tile's MMAs done: its stage goes back
        warpgroup_fence_operand(partial);
        for (; pending > 1; --pending) {
          pipeline.consumer_release(smem_pipe_release);
          ++smem_pipe_release;
        }
      }
      ++smem_pipe_read;
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(partial);
    if (since > 0) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += partial(i);
    }
    for (; pending > 0; --pending) {
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    }
    warpgroup_fence_operand(accum);
  }

  /// every stage was released in mma()
  CUTLASS_DEVICE void
  mma_tail(MainloopPipeline, PipelineState, int) {}
};

}  // namespace kw
