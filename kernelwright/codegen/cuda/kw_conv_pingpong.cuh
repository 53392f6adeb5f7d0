// A persistent ping-pong kernel layer for CUTLASS's sm90 implicit-GEMM convolution mainloop.
//
// CUTLASS 4.2 runs its sm90 conv collective (`CollectiveConv<MainloopSm90TmaGmmaWarpSpecializedImplicitGemm>`)
// only under the one-consumer-warpgroup, one-tile-per-CTA kernel (`ConvUniversal` ->
// sm90_gemm_tma_warpspecialized.hpp): a tile's epilogue and its pipeline fill are never overlapped with
// another tile's loads (H100, built with -DNDEBUG: 0.76x cuDNN's throughput where this layer reaches 1.03x;
// bench/results/2026-11-27-h100-80gb-hbm3-conv-pingpong). This is CUTLASS's GEMM ping-pong kernel
// (sm90_gemm_tma_warpspecialized_pingpong.hpp) with the static persistent scheduler only, made to take a
// ConvProblemShape the way the conv kernel does: the scheduler and the epilogue get the linearized
// (M = N*P*Q, N = K, K = C*R*S, L = 1) shape, the mainloop its ConvProblemShape, the epilogue's parameters
// the transformed (hierarchical) shape, and the B tensor has no batch mode. Two consumer warpgroups take
// alternate tiles: one's MMA runs while the other's epilogue does, ordered by a two-stage barrier.
//
// The mainloop collective is unchanged (its TiledMma is the one-warpgroup 1x1x1 layout the builder makes for
// KernelImplicitTmaWarpSpecializedSm90). Cluster 1x1x1 only (launched without a cluster launch).
//
// DirectStore (optional): instead of the epilogue collective (TMA stores of NHWC tiles), each consumer thread
// hands its accumulators first to `DirectStore::finish(params.direct, accumulators, tiled_mma, thread, m0,
// n0)`, which may rewrite them in registers (the epilogue's math: the two warpgroups may do it at the same
// time, beside the other's MMA and store), then to `DirectStore::store(params.direct, accumulators,
// tiled_mma, thread, m0, n0, storage)` (storage: its SharedStorage, one for both warpgroups, whose stores take
// turns), which writes them itself (an NCHW output, say); the epilogue collective is then never run, and may
// be `kw::NoEpilogue` (no shared memory, no TMA descriptor, none of CUTLASS's epilogue headers to compile).
#pragma once

// self-contained: the emitted file inlines this header before the kernels that include CuTe
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/conv/convnd_problem_shape.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/conv/detail.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/pipeline/pipeline.hpp>

namespace kw {

// The epilogue collective of a kernel whose DirectStore writes the output: the interface ConvPingpong calls,
// doing nothing.
struct NoEpilogue {
  struct Pipeline {
    static constexpr int Stages = 1;
    enum class ThreadCategory { NonParticipant, Producer, Consumer, ProducerConsumer };
    struct Params {
      ThreadCategory role = ThreadCategory::NonParticipant;
      uint32_t dst_blockid = 0, producer_arv_count = 0, consumer_arv_count = 0, transaction_bytes = 0;
      bool always_wait = false;
    };
    struct SharedStorage {};
    CUTLASS_DEVICE Pipeline(SharedStorage&, Params const&) {}
    CUTLASS_DEVICE explicit Pipeline(Params const&) {}
  };
  using LoadPipeline = Pipeline;
  using StorePipeline = Pipeline;
  using LoadPipelineState = cutlass::PipelineState<1>;
  using PipelineStorage = Pipeline::SharedStorage;
  struct TensorStorage {};
  struct Arguments {};
  struct Params {};
  static constexpr bool RequiresTransactionBytes = false;

  template <class Shape>
  static Params to_underlying_arguments(Shape const&, Arguments const&, void*) { return {}; }
  template <class Shape>
  static size_t get_workspace_size(Shape const&, Arguments const&) { return 0; }
  template <class Shape>
  static cutlass::Status initialize_workspace(Shape const&, Arguments const&, void*, cudaStream_t, void*) {
    return cutlass::Status::kSuccess;
  }
  template <class Shape>
  static bool can_implement(Shape const&, Arguments const&) { return true; }
  template <class Tile>
  CUTLASS_HOST_DEVICE static constexpr int get_load_pipe_increment(Tile) { return 1; }
  template <class Tile>
  CUTLASS_HOST_DEVICE static constexpr int get_store_pipe_increment(Tile) { return 1; }
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const&) {}
  CUTLASS_DEVICE NoEpilogue(Params const&, TensorStorage&) {}
  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  template <class... Ts>
  CUTLASS_DEVICE LoadPipelineState load(Ts&&...) { return {}; }
  template <class... Ts>
  CUTLASS_DEVICE void load_tail(Ts&&...) {}
};

namespace detail {
struct NoDirect {};
template <class D> struct Direct { using Params = typename D::Params; using SharedStorage = typename D::SharedStorage; };
template <> struct Direct<void> { using Params = NoDirect; using SharedStorage = NoDirect; };
}  // namespace detail

template <class ProblemShape_, class CollectiveMainloop_, class CollectiveEpilogue_, class DirectStore = void>
class ConvPingpong {
 public:
  static constexpr bool Direct = !std::is_void_v<DirectStore>;
  using DirectParams = typename detail::Direct<DirectStore>::Params;
  using DirectStorage = typename detail::Direct<DirectStore>::SharedStorage;
  using ProblemShape = ProblemShape_;
  using CollectiveMainloop = CollectiveMainloop_;
  using CollectiveEpilogue = CollectiveEpilogue_;
  using TileShape = typename CollectiveMainloop::TileShape;
  using TiledMma = typename CollectiveMainloop::TiledMma;
  using ArchTag = typename CollectiveMainloop::ArchTag;
  using DispatchPolicy = typename CollectiveMainloop::DispatchPolicy;
  using ElementAccumulator = typename CollectiveMainloop::ElementAccumulator;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using MainloopArguments = typename CollectiveMainloop::Arguments;
  using MainloopParams = typename CollectiveMainloop::Params;
  using EpilogueArguments = typename CollectiveEpilogue::Arguments;
  using EpilogueParams = typename CollectiveEpilogue::Params;
  static_assert(cute::size(ClusterShape{}) == 1, "cluster 1x1x1 only");
  // fprop only: its L mode is 1 (a strided dgrad's tiles would all write l = 0 here)
  static_assert(DispatchPolicy::ConvOp == cutlass::conv::Operator::kFprop, "fprop only");

  using TileScheduler = typename cutlass::gemm::kernel::detail::TileSchedulerSelector<
      cutlass::gemm::PersistentScheduler, ArchTag, TileShape, ClusterShape>::Scheduler;
  using TileSchedulerArguments = typename TileScheduler::Arguments;
  using TileSchedulerParams = typename TileScheduler::Params;

  static constexpr uint32_t NumMmaWarpGroups = 2;
  static constexpr uint32_t NumMMAThreads = cute::size(TiledMma{});
  static_assert(NumMMAThreads == 128, "one warpgroup per tile");
  static constexpr uint32_t MaxThreadsPerBlock = NumMMAThreads * NumMmaWarpGroups + cutlass::NumThreadsPerWarpGroup;
  static constexpr uint32_t MinBlocksPerMultiprocessor = 1;
  static constexpr int RegsPerThread = cute::size<0>(TileShape{}) * cute::size<1>(TileShape{}) *
                                       sizeof(ElementAccumulator) / (NumMMAThreads * sizeof(uint32_t));
  static constexpr uint32_t LoadRegisterRequirement = RegsPerThread >= 208 ? 24 : 40;
  static constexpr uint32_t MmaRegisterRequirement = RegsPerThread >= 208 ? 240 : 232;

  using LoadWarpOrderBarrier = cutlass::OrderedSequenceBarrier<1, 2>;
  using MathWarpGroupOrderBarrier = cutlass::OrderedSequenceBarrier<2, NumMmaWarpGroups>;

  struct SharedStorage {
    struct PipelineStorage : cute::aligned_struct<16, cute::_1> {
      alignas(16) typename CollectiveMainloop::PipelineStorage mainloop;
      alignas(16) typename CollectiveEpilogue::PipelineStorage epi_load;
      alignas(16) typename MathWarpGroupOrderBarrier::SharedStorage math_wg_order;
      alignas(16) typename LoadWarpOrderBarrier::SharedStorage load_order;
    } pipelines;
    struct TensorStorage : cute::aligned_struct<128, cute::_1> {
      typename CollectiveEpilogue::TensorStorage epilogue;
      typename CollectiveMainloop::TensorStorage mainloop;
      DirectStorage direct;   // DirectStore's staging (shared by both warpgroups: their epilogues take turns)
    } tensors;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);

  struct Arguments {
    ProblemShape problem_shape{};
    MainloopArguments mainloop{};
    EpilogueArguments epilogue{};
    cutlass::KernelHardwareInfo hw_info{};
    TileSchedulerArguments scheduler{};
    DirectParams direct{};
  };

  using ProblemShapeMNKL = decltype(CollectiveMainloop::get_problem_shape_MNKL(ProblemShape{}));
  struct Params {
    ProblemShapeMNKL problem_shape{};
    MainloopParams mainloop{};
    EpilogueParams epilogue{};
    cutlass::KernelHardwareInfo hw_info{};
    TileSchedulerParams scheduler{};
    DirectParams direct{};
  };

  static Params to_underlying_arguments(Arguments const& args, void* workspace) {
    auto problem_shape_mnkl = CollectiveMainloop::get_problem_shape_MNKL(args.problem_shape);
    auto transformed = cutlass::conv::detail::get_transformed_problem_shape_MNKL(args.problem_shape);
    int sm_count = args.hw_info.sm_count > 0
        ? args.hw_info.sm_count
        : cutlass::KernelHardwareInfo::query_device_multiprocessor_count(args.hw_info.device_id);
    cutlass::KernelHardwareInfo hw_info{args.hw_info.device_id, sm_count, 0};
    constexpr uint32_t NumEpilogueSubTiles = CollectiveEpilogue::get_store_pipe_increment(TileShape{});
    return {
      problem_shape_mnkl,
      CollectiveMainloop::to_underlying_arguments(args.problem_shape, args.mainloop, nullptr),
      CollectiveEpilogue::to_underlying_arguments(transformed, args.epilogue, workspace),
      hw_info,
      TileScheduler::to_underlying_arguments(cute::append<4>(problem_shape_mnkl, cute::Int<1>{}), TileShape{},
                                             ClusterShape{}, hw_info, args.scheduler, nullptr,
                                             NumEpilogueSubTiles),
      args.direct,
    };
  }

  // The epilogue's workspace (a visitor tree with a reduction node needs one, zeroed); the mainloop needs none.
  static size_t get_workspace_size(Arguments const& args) {
    auto transformed = cutlass::conv::detail::get_transformed_problem_shape_MNKL(args.problem_shape);
    return CollectiveEpilogue::get_workspace_size(transformed, args.epilogue);
  }

  static cutlass::Status initialize_workspace(Arguments const& args, void* workspace, cudaStream_t stream) {
    auto transformed = cutlass::conv::detail::get_transformed_problem_shape_MNKL(args.problem_shape);
    return CollectiveEpilogue::initialize_workspace(transformed, args.epilogue, workspace, stream, nullptr);
  }

  static bool can_implement(Arguments const& args) {
    auto transformed = cutlass::conv::detail::get_transformed_problem_shape_MNKL(args.problem_shape);
    return CollectiveMainloop::can_implement(args.problem_shape, args.mainloop) &&
           CollectiveEpilogue::can_implement(transformed, args.epilogue) &&
           TileScheduler::can_implement(args.scheduler);
  }

  static dim3 get_grid_shape(Params const& params) {
    TileSchedulerArguments args{};      // the raster order and swizzle the scheduler's parameters were made with
    if constexpr (!std::is_const_v<decltype(args.max_swizzle_size)>) {
      args.max_swizzle_size = 1 << params.scheduler.log_swizzle_size_;
    }
    args.raster_order = params.scheduler.raster_order_ == TileScheduler::RasterOrder::AlongN
                            ? TileScheduler::RasterOrderOptions::AlongN
                            : TileScheduler::RasterOrderOptions::AlongM;
    return TileScheduler::get_grid_shape(params.scheduler, cute::append<4>(params.problem_shape, cute::Int<1>{}),
                                         TileShape{}, ClusterShape{}, params.hw_info, args);
  }

  static dim3 get_block_shape() { return dim3(MaxThreadsPerBlock, 1, 1); }

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
    using namespace cute;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    enum class WarpGroupRole { Producer = 0, Consumer0 = 1, Consumer1 = 2 };
    enum class ProducerWarpRole { Mainloop = 0, Warp1 = 1, Epilogue = 2, Warp3 = 3 };

    SharedStorage& shared_storage = *reinterpret_cast<SharedStorage*>(smem_buf);
    int thread_idx = int(threadIdx.x);
    int lane_idx = cutlass::canonical_lane_idx();
    int warp_idx = cutlass::canonical_warp_idx_sync();
    int warp_group_thread_idx = thread_idx % cutlass::NumThreadsPerWarpGroup;
    auto warp_group_role = WarpGroupRole(cutlass::canonical_warp_group_idx());
    auto producer_warp_role = ProducerWarpRole(warp_idx % cutlass::NumWarpsPerWarpGroup);
    int lane_predicate = cute::elect_one_sync();
    uint32_t block_rank_in_cluster = cute::block_rank_in_cluster();

    if ((warp_idx == 0) && lane_predicate) {
      CollectiveMainloop::prefetch_tma_descriptors(params.mainloop);
      CollectiveEpilogue::prefetch_tma_descriptors(params.epilogue);
    }

    // the pipelines' roles (other threads keep the default: not participating)
    bool const consumer = warp_group_role == WarpGroupRole::Consumer0 || warp_group_role == WarpGroupRole::Consumer1;
    bool const producer = warp_group_role == WarpGroupRole::Producer;
    using MainloopPipeline = typename CollectiveMainloop::MainloopPipeline;
    typename MainloopPipeline::Params mainloop_pipeline_params;
    if (producer && producer_warp_role == ProducerWarpRole::Mainloop) {
      mainloop_pipeline_params.role = MainloopPipeline::ThreadCategory::Producer;
    }
    if (consumer) mainloop_pipeline_params.role = MainloopPipeline::ThreadCategory::Consumer;
    mainloop_pipeline_params.is_leader = warp_group_thread_idx == 0;
    mainloop_pipeline_params.num_consumers = cutlass::NumThreadsPerWarpGroup;
    mainloop_pipeline_params.transaction_bytes = params.mainloop.tma_transaction_bytes;
    MainloopPipeline mainloop_pipeline(shared_storage.pipelines.mainloop, mainloop_pipeline_params, ClusterShape{});

    using EpiLoadPipeline = typename CollectiveEpilogue::LoadPipeline;
    typename EpiLoadPipeline::Params epi_load_pipeline_params;
    if (producer && producer_warp_role == ProducerWarpRole::Epilogue) {
      epi_load_pipeline_params.role = EpiLoadPipeline::ThreadCategory::Producer;
    }
    if (consumer) epi_load_pipeline_params.role = EpiLoadPipeline::ThreadCategory::Consumer;
    epi_load_pipeline_params.dst_blockid = cute::block_rank_in_cluster();
    epi_load_pipeline_params.producer_arv_count = cutlass::NumThreadsPerWarp;
    epi_load_pipeline_params.consumer_arv_count = cutlass::NumThreadsPerWarpGroup;
    if constexpr (CollectiveEpilogue::RequiresTransactionBytes) {
      epi_load_pipeline_params.transaction_bytes = params.epilogue.tma_transaction_bytes;
    }
    EpiLoadPipeline epi_load_pipeline(shared_storage.pipelines.epi_load, epi_load_pipeline_params);

    using EpiStorePipeline = typename CollectiveEpilogue::StorePipeline;
    typename EpiStorePipeline::Params epi_store_pipeline_params;
    epi_store_pipeline_params.always_wait = true;
    EpiStorePipeline epi_store_pipeline(epi_store_pipeline_params);

    typename LoadWarpOrderBarrier::Params params_load_order_barrier;
    params_load_order_barrier.group_id = producer_warp_role == ProducerWarpRole::Mainloop ? 0 : 1;
    params_load_order_barrier.group_size = cutlass::NumThreadsPerWarp;
    LoadWarpOrderBarrier load_order_barrier(shared_storage.pipelines.load_order, params_load_order_barrier);

    typename MathWarpGroupOrderBarrier::Params params_math_wg_order_barrier;
    params_math_wg_order_barrier.group_id = cutlass::canonical_warp_group_idx() - int(WarpGroupRole::Consumer0);
    params_math_wg_order_barrier.group_size = cutlass::NumThreadsPerWarpGroup;
    MathWarpGroupOrderBarrier math_wg_order_barrier(shared_storage.pipelines.math_wg_order,
                                                    params_math_wg_order_barrier);

    typename CollectiveMainloop::PipelineState mainloop_pipe_consumer_state;
    typename CollectiveEpilogue::LoadPipelineState epi_load_pipe_consumer_state;
    cutlass::PipelineState mainloop_pipe_producer_state = cutlass::make_producer_start_state<MainloopPipeline>();
    cutlass::PipelineState epi_load_pipe_producer_state = cutlass::make_producer_start_state<EpiLoadPipeline>();
    cutlass::PipelineState epi_store_pipe_producer_state = cutlass::make_producer_start_state<EpiStorePipeline>();

    __syncthreads();   // the pipelines' initialization is visible to every warp (cluster of one)

    auto problem_shape_MNKL = append<4>(params.problem_shape, Int<1>{});
    TiledMma tiled_mma;
    auto blk_shape = TileShape{};
    CollectiveMainloop collective_mainloop;
    CollectiveEpilogue collective_epilogue(params.epilogue, shared_storage.tensors.epilogue);

    // conv: gA_mkl is (BLK_M, BLK_K, m, k), gB_nkl (BLK_N, BLK_K, n, k): no batch mode
    auto load_inputs = collective_mainloop.load_init(problem_shape_MNKL, params.mainloop);
    Tensor gA_mkl = get<0>(load_inputs);
    Tensor gB_nkl = get<1>(load_inputs);
    auto k_tile_count = size<3>(gA_mkl);
    auto c_tile_count = CollectiveEpilogue::get_load_pipe_increment(blk_shape);
    auto d_tile_count = CollectiveEpilogue::get_store_pipe_increment(blk_shape);
    auto tile_coord = [&](auto const& work) {
      return make_coord(idx2crd(work.M_idx, shape<2>(gA_mkl)), idx2crd(work.N_idx, shape<2>(gB_nkl)), _, Int<0>{});
    };

    TileScheduler scheduler{params.scheduler};
    if (warp_group_role == WarpGroupRole::Consumer1) {
      scheduler.advance_to_next_work();     // the second math warpgroup starts on the next tile
      mainloop_pipe_consumer_state.advance(k_tile_count);
      epi_load_pipe_consumer_state.advance(c_tile_count);
      epi_store_pipe_producer_state.advance(d_tile_count);
    }
    auto work_tile_info = scheduler.initial_work_tile_info(ClusterShape{});

    if (producer) {
      cutlass::arch::warpgroup_reg_dealloc<LoadRegisterRequirement>();
      if (producer_warp_role == ProducerWarpRole::Mainloop) {
        bool do_load_order_arrive = true;
        while (work_tile_info.is_valid()) {
          auto k_tile_iter = cute::make_coord_iterator(shape<3>(gA_mkl));
          collective_mainloop.load(params.mainloop, mainloop_pipeline, mainloop_pipe_producer_state, load_inputs,
                                   tile_coord(work_tile_info), k_tile_iter, k_tile_count, lane_idx,
                                   block_rank_in_cluster, shared_storage.tensors.mainloop);
          mainloop_pipe_producer_state.advance(k_tile_count);
          if (do_load_order_arrive) {
            load_order_barrier.arrive();
            do_load_order_arrive = false;
          }
          scheduler.advance_to_next_work();
          work_tile_info = scheduler.get_current_work();
        }
        collective_mainloop.load_tail(mainloop_pipeline, mainloop_pipe_producer_state);
      } else if (producer_warp_role == ProducerWarpRole::Epilogue && !Direct &&
                 collective_epilogue.is_producer_load_needed()) {
        bool do_load_order_wait = true;
        while (work_tile_info.is_valid()) {
          if (do_load_order_wait) {
            load_order_barrier.wait();
            do_load_order_wait = false;
          }
          epi_load_pipe_producer_state = collective_epilogue.load(
              epi_load_pipeline, epi_load_pipe_producer_state, problem_shape_MNKL, blk_shape,
              tile_coord(work_tile_info), tiled_mma, lane_idx, shared_storage.tensors.epilogue);
          scheduler.advance_to_next_work();
          work_tile_info = scheduler.get_current_work();
        }
        collective_epilogue.load_tail(epi_load_pipeline, epi_load_pipe_producer_state);
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<MmaRegisterRequirement>();
      while (work_tile_info.is_valid()) {
        auto blk_coord = tile_coord(work_tile_info);
        (void)blk_coord;
        Tensor accumulators = partition_fragment_C(tiled_mma, take<0, 2>(blk_shape));
        math_wg_order_barrier.wait();        // the two warpgroups' MMAs one after the other
        collective_mainloop.mma(mainloop_pipeline, mainloop_pipe_consumer_state, accumulators, k_tile_count,
                                warp_group_thread_idx, shared_storage.tensors.mainloop, params.mainloop);
        math_wg_order_barrier.arrive();
        collective_mainloop.mma_tail(mainloop_pipeline, mainloop_pipe_consumer_state, k_tile_count);
        mainloop_pipe_consumer_state.advance(k_tile_count * NumMmaWarpGroups);
        const int64_t m0 = int64_t(work_tile_info.M_idx) * size<0>(blk_shape);
        const int n0 = int(work_tile_info.N_idx) * int(size<1>(blk_shape));
        (void)m0; (void)n0;
        if constexpr (Direct) {
          // registers only: outside the ordered section, so one warpgroup's epilogue math need not wait for
          // the other's stores
          DirectStore::finish(params.direct, accumulators, tiled_mma, warp_group_thread_idx, m0, n0);
        }

        math_wg_order_barrier.wait();        // ... and their epilogues
        if constexpr (Direct) {
          DirectStore::store(params.direct, accumulators, tiled_mma, warp_group_thread_idx, m0, n0,
                             shared_storage.tensors.direct);
        } else {
          auto [epi_load_next, epi_store_next] = collective_epilogue.store(
              epi_load_pipeline, epi_load_pipe_consumer_state, epi_store_pipeline, epi_store_pipe_producer_state,
              problem_shape_MNKL, blk_shape, blk_coord, accumulators, tiled_mma, warp_group_thread_idx,
              shared_storage.tensors.epilogue);
          // every TMA store of this tile done before the other warpgroup reuses the epilogue's shared memory
          auto [epi_load_after, epi_store_after] =
              collective_epilogue.store_tail(epi_load_pipeline, epi_load_next, epi_store_pipeline, epi_store_next);
          epi_load_pipe_consumer_state = epi_load_after;
          epi_store_pipe_producer_state = epi_store_after;
          epi_load_pipe_consumer_state.advance(c_tile_count);
          epi_store_pipe_producer_state.advance(d_tile_count);
        }
        math_wg_order_barrier.arrive();

        scheduler.advance_to_next_work(NumMmaWarpGroups);
        work_tile_info = scheduler.get_current_work();
      }
    }
#elif defined(__CUDA_ARCH__)
    // wgmma and setmaxnreg exist only on sm_90a: a build for plain sm_90 must fail loudly, not write nothing
    printf("kw::ConvPingpong: built without sm_90a features (compile with -arch=sm_90a)\n");
    __trap();
#endif
  }
};

// The kernel entry point (CUTLASS's device_kernel, named for this file's readers).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
conv_pingpong_kernel(CUTLASS_GRID_CONSTANT typename Kernel::Params const params) {
  extern __shared__ char smem[];
  Kernel op;
  op(params, smem);
}

}  // namespace kw
