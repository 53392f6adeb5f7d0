// Probe of the SM90 3xTF32 GEMM (kernelwright/codegen/cuda/kw_gemm_sm90_x3.cuh): D = A . B in FP32 with
// A row-major [L, M, K] and B stored [L, N, K] (K-major both, 16-byte aligned rows), D row-major [L, M, N].
// Built by bench/kernels/gemm_sm90_x3.py (nvcc -arch=sm_90a, CUTLASS headers), called through ctypes.
#include <cuda_runtime.h>
#include <cstdio>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "kw_gemm_sm90_x3.cuh"  // (-I kernelwright/codegen/cuda)

using namespace cute;

#ifndef KW_TILE_N
#define KW_TILE_N 128
#endif
#ifndef KW_STAGES
#define KW_STAGES 3
#endif
#ifndef KW_PROMOTION
#define KW_PROMOTION 4
#endif

using TileShape = Shape<_128, Int<KW_TILE_N>, _32>;
using ClusterShape = Shape<_1, _1, _1>;
using Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using Built = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    float, cutlass::layout::RowMajor, 4, float, cutlass::layout::ColumnMajor, 4, float,
    TileShape, ClusterShape, cutlass::gemm::collective::StageCount<KW_STAGES>, Schedule>::CollectiveOp;
// CUTLASS's mainloop on raw 32-bit operands (uint32_t: TMA copies bits, converts nothing), TF32 MMAs
using Base = cutlass::gemm::collective::CollectiveMma<
    typename Built::DispatchPolicy, TileShape, uint32_t, typename Built::StrideA, uint32_t,
    typename Built::StrideB, typename Built::TiledMma, typename Built::GmemTiledCopyA,
    typename Built::SmemLayoutAtomA, typename Built::SmemCopyAtomA, typename Built::TransformA,
    typename Built::GmemTiledCopyB, typename Built::SmemLayoutAtomB, typename Built::SmemCopyAtomB,
    typename Built::TransformB>;
using Mainloop = kw::X3Mainloop<Base, KW_PROMOTION>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, cutlass::layout::RowMajor, 1, float, cutlass::layout::RowMajor, 1,
    cutlass::epilogue::NoSmemWarpSpecialized>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

extern "C" size_t x3_smem() { return sizeof(typename Kernel::SharedStorage); }

extern "C" const char* x3_gemm(const float* a, const float* b, float* d, int m, int n, int k, int l,
                               long long lda, long long ldb, long long ldd, long long bsa, long long bsb,
                               long long bsd, int promotion, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {m, n, k, l};
  typename Kernel::StrideA sa{};
  get<0>(sa) = lda;
  get<2>(sa) = bsa;
  typename Kernel::StrideB sb{};
  get<0>(sb) = ldb;
  get<2>(sb) = bsb;
  typename Kernel::StrideD sd{};
  get<0>(sd) = ldd;
  get<2>(sd) = bsd;
  args.mainloop.ptr_A = reinterpret_cast<const uint32_t*>(a);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = reinterpret_cast<const uint32_t*>(b);
  args.mainloop.dB = sb;
  (void)promotion;   // compiled in: KW_PROMOTION
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = sd;
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return "cannot implement";
  if (Gemm::get_workspace_size(args) > workspace_bytes) return "workspace too small";
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return "initialize failed";
  if (gemm.run(stream) != cutlass::Status::kSuccess) return "run failed";
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}
