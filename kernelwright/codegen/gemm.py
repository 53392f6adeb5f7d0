"""The GEMM family's renderer: a fused group from `kernelwright.fuse.gemm` → CUDA launcher + entry points.

Three routes (`GemmConfig.kernel`). A CUTLASS 3xTF32 tensor-core GEMM (`gemm_cutlass.py`) and a
bandwidth-bound matrix-vector kernel (`gemm_gemv.py`) share one launcher signature and one entry
(`gemm_entry.py`); the 3xTF32-on-cuBLAS route (`gemm_tf32x3.py`) has launchers of its own and an entry
built from the same pieces. All apply the same generated epilogue function,
`float NAME_epilogue(float acc, float e0, ...)`, built from the group's pointwise IR with the pointwise
family's expression table; they differ only in how they fetch `e0...`.

Launcher of the CUTLASS and GEMV routes (in the .cu, no torch headers):
    const char* NAME_launch(const float* a, const float* b, float* d,
                            [const float* eJ, long long eJ_sm, long long eJ_sl,]...
                            int batch, int m, int n, int k, long long lda, long long ldb,
                            long long batch_stride_a, long long batch_stride_b, int split_k,
                            void* workspace, cudaStream_t stream);   // nullptr on success, else the error
    size_t NAME_workspace(int batch, int m, int n, int k, int split_k);

`split_k` is the config's (a launcher argument, so variants that differ only in it share one instantiation).

CUTLASS sources include `<cutlass/...>` headers (angle brackets: they are not ours to inline): the extension
must be built with the `nvidia-cutlass` wheel's include directory, which the build recipe in
`codegen/build.py` finds.
"""

from __future__ import annotations

import functools

import torch

from kernelwright.codegen import gemm_cutlass, gemm_gemv, gemm_sm90x3, gemm_tf32x3
from kernelwright.codegen.gemm_entry import render_entry
from kernelwright.codegen.kernel import KernelSource, shared_launcher_kernel
from kernelwright.codegen.pointwise import c_literal, emit_statements
from kernelwright.fuse.gemm import GemmConfig, GemmView, describe, gemm_config, sm90x3_roles, sm90x3_tile
from kernelwright.fuse.plan import FusedGroup

# nvcc flags the CUTLASS translation units need on top of torch's defaults.
CUTLASS_NVCC_FLAGS = ("-std=c++17", "--expt-relaxed-constexpr")


def render(group: FusedGroup) -> KernelSource:
    """The kernel source of one GEMM group. Problem sizes and strides are launcher arguments, so the CUDA
    side depends only on the variant, the layouts and the epilogue: groups that agree on those share one
    CUTLASS instantiation (named by the hash of its text and wrapped in an include guard, so repeating it
    in one translation unit costs nothing), while each group keeps its own entry points."""
    view = describe(group)
    config = gemm_config(group)
    if config.split_k > 1 and config.kernel != "tf32x3" and (config.kernel, config.swizzle, view.batch) != (
            "cutlass", "streamk", 1):
        raise ValueError(f"split-K needs the CUTLASS stream-K kernel and an unbatched product, got {config} "
                         f"for batch {view.batch}")
    route = {"gemv": gemm_gemv, "tf32x3": gemm_tf32x3, "sm90x3": gemm_sm90x3}.get(config.kernel, gemm_cutlass)
    entry = {"tf32x3": gemm_tf32x3.render_entry,
             "sm90x3": functools.partial(gemm_sm90x3.render_entry, epilogue_function=epilogue_function)
             }.get(config.kernel, render_entry)
    return shared_launcher_kernel(
        "gemm", lambda name: route.render_cuda(name, view, config, epilogue_function(name, view)),
        lambda name, launcher: entry(name, launcher, group, view, config), ir_comment(view, config))


def epilogue_function(name: str, view: GemmView) -> str:
    """`float NAME_epilogue(float acc, float e0, ...)`: the anchor's own bias term, then the pointwise
    epilogue, in FP32 as ATen computes it."""
    params = ["float acc"] + [f"float e{j}" for j in range(len(view.operands))]
    env = {id(o.node): f"e{j}" for j, o in enumerate(view.operands)}
    lines = []
    anchor = view.anchor
    if anchor.op == "linear" and len(anchor.inputs) > 2:
        lines.append("const float product = acc + e0;")
    elif anchor.op == "addmm":
        alpha, beta = float(anchor.attr("alpha", 1)), float(anchor.attr("beta", 1))
        scaled = "acc" if alpha == 1 else f"{c_literal(alpha, torch.float32)} * acc"
        if beta == 0:       # ATen ignores the input entirely (NaN/inf in it do not propagate)
            lines.append(f"const float product = {scaled};")
        else:
            bias = "e0" if beta == 1 else f"{c_literal(beta, torch.float32)} * e0"
            lines.append(f"const float product = {scaled} + {bias};")
    else:
        lines.append("const float product = acc;")
    env[id(anchor)] = "product"
    lines += emit_statements(view.epilogue, env)
    body = "\n".join(f"  {line}" for line in lines)
    return (f"__device__ __forceinline__ float {name}_epilogue({', '.join(params)}) {{\n{body}\n"
            f"  return {env[id(view.output)]};\n}}")


def ir_comment(view: GemmView, config: GemmConfig) -> str:
    layout = f"A {'col' if view.a_col_major else 'row'}-major, B {'col' if view.b_col_major else 'row'}-major"
    if config.kernel == "gemv":
        kernel = "matrix-vector kernel (exact FP32, bandwidth-bound)"
    elif config.kernel == "tf32x3":
        kernel = "3xTF32 split operands + cuBLAS TF32 GEMM of depth 3K"
    elif config.kernel == "sm90x3":
        tile = "x".join(map(str, sm90x3_tile(config)))
        roles = sm90x3_roles(view, config.swap)
        order = ("B^T . A^T: B's small part in registers, A's in shared memory" if roles.swap
                 else "A's small part in registers, B's in shared memory")
        copies = [name for name, copy in (("A", roles.copy_a), ("B", roles.copy_b)) if copy]
        kernel = (f"SM90 3xTF32 tile {tile} (TMA + wgmma, {order}, "
                  + (f"{' and '.join(copies)} copied K-major, " if copies else "")
                  + "FP32 promotion every 128 of K"
                  + (f", tiles in strips of {config.strips})" if config.strips > 1 else ")"))
    else:
        split = f" split-K {config.split_k}" if config.split_k > 1 else ""
        kernel = (f"CUTLASS 3xTF32 tile {'x'.join(map(str, config.block))} warp "
                  f"{'x'.join(map(str, config.warp))} {config.stages} stages {config.swizzle}{split}")
    epilogue = " → ".join(n.op for n in view.epilogue) or "none"
    operands = ", ".join(f"{o.node.name or o.node.op}:{o.kind}" for o in view.operands) or "none"
    return (f"{view.anchor.op} [batch {view.batch}] {view.m}x{view.n}x{view.k} ({layout}) via {kernel}; "
            f"epilogue: {epilogue}; epilogue tensors: {operands}")
