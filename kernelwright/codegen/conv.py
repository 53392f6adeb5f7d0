"""The convolution family's renderer: a group from `kernelwright.fuse.conv` -> CUTLASS's sm90 implicit-GEMM
convolution mainloop (TF32 wgmma, TMA im2col loads) under our persistent ping-pong kernel layer
(`cuda/kw_conv_pingpong.cuh`), with the epilogue and the store of `cuda/kw_conv_sm90.cu.in`: the NCHW
output, or its sum or mean over each image's pixels (a global pool: nothing else is stored), or the NHWC
output and its statistics per channel over all pixels (sum, mean, var: a BatchNorm's).

The epilogue function is the GEMM family's (`float NAME_epilogue(float acc, float e0, ...)`, the group's
pointwise IR in FP32); each epilogue tensor is read at the element's pixel m (of N*P*Q) and channel n by its
broadcast kind: "row" e[n], "col" e[m] (or e[0] when it is one value), "full" e[m * K + n].

Launcher (in the .cu; sizes are arguments, so groups that agree on the tile and the epilogue share one
instantiation, which is what costs nvcc time: ~35 s on a 2-core machine, 17 s of it in cicc):
    const char* NAME_launch(const float* x, const float* weight, float* y, [float* sJ,]...
                            [const float* eJ,]...
                            int n, int h, int w, int c, int k, int r, int s, int pad_h, int pad_w,
                            int stride_h, int stride_w, int dilation_h, int dilation_w,
                            void* workspace, cudaStream_t stream);
    size_t NAME_workspace(<the same, without workspace and stream>);

The translation unit must be built for sm_90a with -DNDEBUG (`codegen/build.py` does): CUTLASS's
device-side asserts otherwise make ptxas serialize every wgmma (1.4-1.6x slower).
"""

from __future__ import annotations

from kernelwright.codegen import kernel
from kernelwright.codegen.gemm import epilogue_function
from kernelwright.codegen.gemm_entry import epilogue_operands, input_index
from kernelwright.codegen.kernel import KernelSource, KernelSpec, cpp_bool, entry_points
from kernelwright.fuse.conv import ConvView, describe
from kernelwright.fuse.gemm import EpilogueOperand
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Node

_TEMPLATE = kernel.source_template("kw_conv_sm90.cu.in")
_SIZES = ("n", "h", "w", "c", "k", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h",
          "dilation_w")


def tile(view: ConvView) -> tuple[int, int, int]:
    """(TM, TN, TK): 128 pixels by 128 channels by 32 of C*R*S (measured on the H100: 331 TFLOP/s at 128
    output channels, 1.03x cuDNN), 64 channels wide when there are at most 64."""
    return 128, 64 if view.k <= 64 else 128, 32


def render(group: FusedGroup) -> KernelSource:
    view = describe(group)
    return kernel.shared_launcher_kernel("conv", lambda name: render_cuda(name, view),
                                         lambda name, launcher: render_entry(name, launcher, group, view),
                                         ir_comment(view))


def render_cuda(name: str, view: ConvView) -> str:
    operands = range(len(view.operands))
    statistics = range(len(view.statistics))
    tm, tn, tk = tile(view)
    return _TEMPLATE.substitute(
        name=name, epilogue_function=epilogue_function(name, view.gemm), tm=tm, tn=tn, tk=tk,
        store="StatsStore" if view.statistics else "PoolStore" if view.pooled else "NchwStore",
        pooled=cpp_bool(view.pooled), mean=cpp_bool(view.pooled and view.output.op == "mean"),
        statistics=cpp_bool(bool(view.statistics)), per_image=cpp_bool(view.per_image),
        statistic_count=max(1, len(view.statistics)),
        statistic_writes="".join(f"\n  s.out[{j}][n] = static_cast<float>({_statistic(node)});"
                                 for j, node in enumerate(view.statistics)),
        statistic_pointers=", ".join(f"s{j}" for j in statistics) or "nullptr",
        row_op={None: 0, "softmax": 1, "log_softmax": 2}[view.row.op if view.row is not None else None],
        argument_params=", ".join(["const float* x", "const float* weight", "float* y"]
                                  + [f"float* s{j}" for j in statistics]
                                  + [f"const float* e{j}" for j in operands] + [f"int {s}" for s in _SIZES]),
        forward_args=", ".join(["x", "weight", "y"] + [f"s{j}" for j in statistics]
                               + [f"e{j}" for j in operands] + list(_SIZES)),
        operand_fields="".join(f"\n    const float* e{j} = nullptr;" for j in operands),
        operand_args="".join(f"\n  args.direct.e{j} = e{j};" for j in operands),
        operand_reads="".join(f", __ldg(p.e{j} + {_index(o)})" for j, o in enumerate(view.operands)),
    ).lstrip()


def _statistic(node: Node) -> str:
    """A channel's statistic from its sum, squared deviations (m2) and pixel count (float64)."""
    if node.op == "sum":
        return "sum"
    if node.op == "mean":
        return "sum / count"
    return f"m2 / fmax(count - {float(node.attr('correction'))}, 0.0)"


def _statistic_name(node: Node) -> str:
    return f"var (correction {node.attr('correction')})" if node.op == "var" else node.op


def _index(operand: EpilogueOperand) -> str:
    """Where element (m, n) of the output reads an epilogue tensor (collapsed to its (1, M, N) extents)."""
    _, mo, no = operand.extents
    if mo > 1 and no > 1:
        return "m * p.k + n"
    return "n" if no > 1 else "m" if mo > 1 else "0"


def render_entry(name: str, launcher: str, group: FusedGroup, view: ConvView) -> tuple[str, KernelSpec]:
    """The entry: x and the weight dense at 16-byte aligned addresses (TMA), each epilogue tensor dense at
    its (1, M, N) extents; sizes baked in (the spec fixes the shapes). Where C is not a multiple of 4, x and
    the weight are first copied with zero channels up to `view.c_padded` into the workspace (before the
    kernel's own, 256-byte aligned), and the kernel reads those."""
    operands = [(input_index(group, view.x), (("dense", 16),), None),
                (input_index(group, view.w), (("dense", 16),), None),
                *epilogue_operands(group, view.gemm, ("dense", 4))[0]]     # (read a float at a time)
    sizes = ", ".join(str(v) for v in (view.n, view.h, view.w_in, view.c_padded, view.k, view.r, view.s,
                                       *view.padding, *view.stride, *view.dilation))
    tensors = [f"static_cast<const float*>(in[{j}].data)" for j in range(len(operands))]
    outputs = [f"static_cast<float*>(out[{j}])" for j in range(1 + len(view.statistics))]
    nulls = ", ".join(["nullptr"] * (len(operands) + len(outputs)))
    own = f"{launcher}_workspace({nulls}, {sizes})"
    if view.c == view.c_padded:
        args = ", ".join([*tensors[:2], *outputs, *tensors[2:]])
        body = f"  return {launcher}_launch({args}, {sizes}, workspace, stream);"
        return entry_points(name, body, own), _spec(group, view, operands)
    rows = (view.n * view.h * view.w_in, view.k * view.r * view.s)
    x_bytes, w_bytes = (_aligned(r * view.c_padded * 4) for r in rows)
    args = ", ".join(["padded_x", "padded_w", *outputs, *tensors[2:]])
    body = "\n".join([
        "  char* scratch = static_cast<char*>(workspace);",
        "  float* padded_x = reinterpret_cast<float*>(scratch);",
        f"  float* padded_w = reinterpret_cast<float*>(scratch + {x_bytes}LL);",
        f"  const char* error = {launcher}_pad({tensors[0]}, padded_x, {rows[0]}LL, {view.c}, "
        f"{view.c_padded}, stream);",
        f"  if (error == nullptr) error = {launcher}_pad({tensors[1]}, padded_w, {rows[1]}LL, {view.c}, "
        f"{view.c_padded}, stream);",
        "  if (error != nullptr) return error;",
        f"  return {launcher}_launch({args}, {sizes}, scratch + {x_bytes + w_bytes}LL, stream);"])
    return entry_points(name, body, f"{x_bytes + w_bytes} + {own}"), _spec(group, view, operands)


def _aligned(size: int) -> int:
    return -(-size // 256) * 256


def _spec(group: FusedGroup, view: ConvView, operands: list) -> KernelSpec:
    roles = ["x" if n is view.x else "weight" if n is view.w else "epilogue tensor" for n in group.inputs]
    return KernelSpec(kernel.typed_inputs(group.inputs, roles), tuple(operands),
                      kernel.typed([view.output, *view.statistics]))


def ir_comment(view: ConvView) -> str:
    tm, tn, tk = tile(view)
    ops = [n.op for n in view.epilogue] + ([view.row.op] if view.row is not None else [])
    epilogue = " → ".join(ops) or "none"
    operands = ", ".join(f"{o.node.name or o.node.op}:{o.kind}" for o in view.operands) or "none"
    padded = f" (channels padded to {view.c_padded})" if view.c != view.c_padded else ""
    statistics = ", ".join(_statistic_name(n) for n in view.statistics)
    output = (f"{view.output.op} over each image's {view.p}x{view.q} pixels -> [{view.n}, {view.k}]"
              if view.pooled else f"NHWC [{view.n}, {view.p}, {view.q}, {view.k}] and each channel's "
              f"{statistics} over {'each image' if view.per_image else 'all pixels'}" if view.statistics
              else f"NCHW [{view.n}, {view.k}, {view.p}, {view.q}]")
    return (f"conv2d NHWC [{view.n}, {view.h}, {view.w_in}, {view.c}] * [{view.k}, {view.r}, {view.s}, "
            f"{view.c}]{padded} stride {view.stride} padding {view.padding} dilation {view.dilation} -> "
            f"{output} via CUTLASS sm90 TF32 implicit GEMM (ping-pong tile {tm}x{tn}x{tk}); epilogue: "
            f"{epilogue}; epilogue tensors: {operands}")

