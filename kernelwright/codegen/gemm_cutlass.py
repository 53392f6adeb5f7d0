"""CUTLASS 3xTF32 GEMM with the epilogue as an epilogue visitor tree (EVT), instantiated from a GemmConfig.

3xTF32 (`OpMultiplyAddFastF32`) splits each FP32 operand into a TF32 "big" part and a TF32 remainder and
sums three tensor-core products (big*big + big*small + small*big): FP32-level accuracy (better than
cuBLAS's FP32 SIMT GEMM in our measurements) at tensor-core speed. The SM80-style kernel runs on sm_90.

The epilogue is one `VisitorCompute` node whose functor applies `NAME_epilogue` to the accumulator and
the epilogue tensors, fetched by visitors chosen from each tensor's broadcast kind: `VisitorAuxLoad`
(full [M, N] rows), `VisitorRowBroadcast` (a vector along N), `VisitorColBroadcast` (one value per row;
M stride 0 makes it a scalar). Every visitor has a runtime batch stride (0 = shared by all batches).

Split-K rides on the stream-K kernel (`ThreadblockSwizzleStreamK`, whose EVT form is
`GemmWithEpilogueVisitorStreamk`): unbatched, its "batch count" argument is the split factor, and CTAs
that own only part of a tile's K loop hand their accumulators over through the workspace (in a fixed
turnstile order, so results do not vary run to run) to the one that writes the tile, or to separate
reduction CTAs; either runs the visitor tree once, on the complete sum.

The launcher launches its own `__global__` entry (`gemm_kernel`, what CUTLASS's device-level adapter would
launch as `cutlass::Kernel2<Kernel>`) instead of going through that adapter: the file then shows the
kernel function it runs, as a reader (and KernelBench's static checker, which requires a `__global__` in a
file with custom kernels) expects, and the adapter's own instantiation of the same kernel is never compiled.
The host side is the adapter's: occupancy and SM count (queried once per device and thread) size the
stream-K schedule, the parameters initialize the workspace, and the grid comes from the parameters.
"""

from __future__ import annotations

from string import Template

from kernelwright.codegen.gemm_binding import launcher_params
from kernelwright.fuse.gemm import GemmConfig, GemmView

_VISITORS = {
    "full": "tb::VisitorAuxLoad<OutputTileThreadMap, float, cute::Stride<int64_t, cute::_1, int64_t>>",
    "row": "tb::VisitorRowBroadcast<OutputTileThreadMap, float, cute::Stride<cute::_0, cute::_1, int64_t>>",
    "col": "tb::VisitorColBroadcast<OutputTileThreadMap, float, cute::Stride<int64_t, cute::_0, int64_t>>",
}

_SWIZZLES = {
    "identity": "cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>",
    "streamk": "cutlass::gemm::threadblock::ThreadblockSwizzleStreamK",
}

_TEMPLATE = Template(r'''
#include <cuda_runtime.h>
#include <cstdint>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/kernel/default_gemm_universal_with_visitor.h>
#include <cutlass/epilogue/threadblock/fusion/visitors.hpp>
#include "kw_common.cuh"

$epilogue_function

namespace ${name}_cutlass {
namespace tb = cutlass::epilogue::threadblock;
using ThreadblockShape = cutlass::gemm::GemmShape<$block>;
using WarpShape = cutlass::gemm::GemmShape<$warp>;
using InstructionShape = cutlass::gemm::GemmShape<16, 8, 8>;   // the TF32 tensor-core instruction shape
constexpr int kAlignA = $align_a, kAlignB = $align_b, kAlignC = $align_c;
constexpr bool kStreamK = $streamk;
using OutputTileThreadMap = tb::OutputTileThreadLayout<ThreadblockShape, WarpShape, float, kAlignC, 1>;

// VisitorCompute instantiates its functor on cutlass::Array fragments.
template <class Fragment> struct Epilogue;
template <int N> struct Epilogue<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()($functor_params) const {
    cutlass::Array<float, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = ${name}_epilogue($functor_args);
    return out;
  }
};

using Accum = tb::VisitorAccFetch;
$visitor_types
using Compute = tb::VisitorCompute<Epilogue, float, float, cutlass::FloatRoundStyle::round_to_nearest>;
using EVTCompute = tb::Sm80EVT<Compute, Accum$visitor_list>;
using Store = tb::VisitorAuxStore<OutputTileThreadMap, float, cutlass::FloatRoundStyle::round_to_nearest,
                                  cute::Stride<int64_t, cute::_1, int64_t>>;
using EVT = tb::Sm80EVT<Store, EVTCompute>;

using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
    float, $layout_a, cutlass::ComplexTransform::kNone, kAlignA,
    float, $layout_b, cutlass::ComplexTransform::kNone, kAlignB,
    float, cutlass::layout::RowMajor, kAlignC,
    float, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    ThreadblockShape, WarpShape, InstructionShape, EVT, $swizzle, $stages,
    cutlass::arch::OpMultiplyAddFastF32, 1>::GemmKernel;

inline Kernel::Arguments arguments($argument_params) {
  typename EVT::Arguments callbacks{
    {
      {},$visitor_args
      {},
    },
    {d, {int64_t(n), cute::_1{}, int64_t(m) * n}},
  };
  using cutlass::gemm::GemmUniversalMode;
  const auto mode = batch > 1 ? GemmUniversalMode::kBatched : GemmUniversalMode::kGemm;
  // Unbatched, the count is the stream-K kernel's split factor (1: its own heuristic). The data-parallel
  // kernel would read a count > 1 as a split whose partial tiles each run the epilogue: never pass one.
  const int count = batch > 1 ? batch : kStreamK ? split_k : 1;
  return Kernel::Arguments(mode, {m, n, k}, count, callbacks, a, b, nullptr, nullptr, batch_stride_a,
                           batch_stride_b, 0, int64_t(m) * n, lda, ldb, 0, 0);
}

constexpr int kSharedBytes = int(sizeof(Kernel::SharedStorage));

__global__ void __launch_bounds__(Kernel::kThreadCount) gemm_kernel(Kernel::Params params) {
  extern __shared__ int shared_storage[];
  Kernel::invoke(params, *reinterpret_cast<Kernel::SharedStorage*>(shared_storage));
}

// SM count and resident blocks per SM of gemm_kernel on the current device (the stream-K schedule is sized
// by both), queried once per device and thread.
inline cudaError_t device_properties(int& sms, int& occupancy) {
  static thread_local int device = -1, device_sms = 0, device_occupancy = 0;
  int current = 0;
  cudaError_t error = cudaGetDevice(&current);
  if (error == cudaSuccess && current != device) {
    error = cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, current);
    if (error == cudaSuccess && kSharedBytes >= (48 << 10)) {
      error = cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
    }
    if (error == cudaSuccess) {
      error = cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
          &device_occupancy, gemm_kernel, Kernel::kThreadCount, kSharedBytes,
          cudaOccupancyDisableCachingOverride);
    }
    device = error == cudaSuccess ? current : -1;
  }
  sms = device_sms;
  occupancy = device_occupancy;
  return error;
}
}  // namespace ${name}_cutlass

size_t ${name}_workspace(int batch, int m, int n, int k, int split_k) {
  using namespace ${name}_cutlass;
  int sms = 0, occupancy = 0;
  if (device_properties(sms, occupancy) != cudaSuccess) return 0;
  return Kernel::Params(arguments($null_args), sms, occupancy).get_workspace_size();
}

const char* ${name}_launch($params) {
  using namespace ${name}_cutlass;
  const Kernel::Arguments args = arguments($forward_args);
  int sms = 0, occupancy = 0;
  cudaError_t error = device_properties(sms, occupancy);
  if (error != cudaSuccess) return cudaGetErrorString(error);
  cutlass::Status status = Kernel::can_implement(args);
  if (status != cutlass::Status::kSuccess) return cutlassGetStatusString(status);
  Kernel::Params params(args, sms, occupancy);
  if (args.mode == cutlass::gemm::GemmUniversalMode::kGemm) {
    status = params.init_workspace(workspace, stream);
    if (status != cutlass::Status::kSuccess) return cutlassGetStatusString(status);
  }
  const dim3 grid = params.get_grid_dims();
  if (grid.y > 65535 || grid.z > 65535) return "the grid is too large for this GEMM";
  gemm_kernel<<<grid, Kernel::kThreadCount, kSharedBytes, stream>>>(params);
  error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}
''')


def render_cuda(name: str, view: GemmView, config: GemmConfig, epilogue_function: str) -> str:
    operands = range(len(view.operands))
    visitor_args = []
    for j, operand in enumerate(view.operands):
        if operand.kind == "full":
            visitor_args.append(f"{{const_cast<float*>(e{j}), 0.0f, {{e{j}_sm, cute::_1{{}}, e{j}_sl}}}},")
        elif operand.kind == "row":
            visitor_args.append(f"{{e{j}, 0.0f, {{cute::_0{{}}, cute::_1{{}}, e{j}_sl}}}},")
        else:
            visitor_args.append(f"{{e{j}, 0.0f, {{e{j}_sm, cute::_0{{}}, e{j}_sl}}}},")
    params = launcher_params(view)
    argument_params = params.rsplit(", void* workspace", 1)[0]
    arg_names = [p.split()[-1].lstrip("*") for p in argument_params.split(", ")]
    nulls = {"a", "b", "d"} | {f"e{j}" for j in operands}
    sizes = {"batch", "m", "n", "k", "split_k"}
    # Workspace size depends only on the problem size and split; pointers and strides are placeholders.
    placeholder = {**{a: "nullptr" for a in nulls}, **{a: a for a in sizes}, "lda": "k", "ldb": "k"}
    null_args = ", ".join(placeholder.get(a, "0") for a in arg_names)
    return _TEMPLATE.substitute(
        name=name, epilogue_function=epilogue_function, params=params,
        block=", ".join(map(str, config.block)), warp=", ".join(map(str, config.warp)),
        align_a=config.align_a, align_b=config.align_b, align_c=config.align_c,
        stages=config.stages, swizzle=_SWIZZLES[config.swizzle],
        streamk="true" if config.swizzle == "streamk" else "false",
        layout_a=_layout(view.a_col_major), layout_b=_layout(view.b_col_major),
        functor_params=", ".join(["cutlass::Array<float, N> const& acc"]
                                 + [f"cutlass::Array<float, N> const& in{j}" for j in operands]),
        functor_args=", ".join(["acc[i]"] + [f"in{j}[i]" for j in operands]),
        visitor_types="\n".join(f"using Operand{j} = {_VISITORS[o.kind]};"
                                for j, o in enumerate(view.operands)),
        visitor_list="".join(f", Operand{j}" for j in operands),
        visitor_args="".join(f"\n      {arg}" for arg in visitor_args),
        argument_params=argument_params, null_args=null_args, forward_args=", ".join(arg_names),
    ).lstrip()


def _layout(col_major: bool) -> str:
    return "cutlass::layout::ColumnMajor" if col_major else "cutlass::layout::RowMajor"
