"""The convolution family's renderer: a group from `kernelwright.fuse.conv` -> CUTLASS's sm90 implicit-GEMM
convolution mainloop (TF32 wgmma, TMA im2col loads) under our persistent ping-pong kernel layer
(`cuda/kw_conv_pingpong.cuh`), with the epilogue and the store of `cuda/kw_conv_sm90.cu.in`: the NCHW
output, or its sum or mean over each image's pixels (a global pool: nothing else is stored), or its
reduction over the channels (a value a pixel, computed in registers), or the NHWC output and its statistics
per channel over all pixels (sum, mean, var: a BatchNorm's).

The epilogue function is the GEMM family's (`float NAME_epilogue(float acc, float e0, ...)`, the group's
pointwise IR in FP32); each epilogue tensor is read at the element's pixel m (of N*P*Q) and channel n by its
broadcast kind: "row" e[n], "col" e[m] (or e[0] when it is one value), "full" e[m * K + n], or at its NCHW
index where it is an NCHW tensor's NHWC view (a model input: then the NCHW store applies the epilogue as it
writes, reading it 16 bytes a lane: `late`). A transposed conv is launched once per output phase along H
(`fuse.conv.phases`), from weights gathered for that phase (`phase_taps`). A 3-D conv is the kernel's
`kRank` 3 instantiation (NDHWC, TMA im2col over five dims): the same stores, its rows an image's depth x
height rows; a transposed one is launched once per output phase along D and H.

Launcher (in the .cu; sizes are arguments, so groups that agree on the tile and the epilogue share one
instantiation, which is what costs nvcc time: ~35 s on a 2-core machine, 17 s of it in cicc):
    const char* NAME_launch(const float* x, const float* weight, float* y, [float* sJ,]...
                            [const float* eJ,]...
                            int n, int h, int w, int c, int k, int r, int s, int pad_h, int pad_w,
                            int pad_h_hi, int pad_w_hi, int stride_h, int stride_w, int dilation_h,
                            int dilation_w, int channels, int out_h, int out_w, int phase_h, int phases_h,
                            int d, int t, int pad_d, int pad_d_hi, int stride_d, int dilation_d, int out_d,
                            int phase_d, int phases_d, void* workspace, cudaStream_t stream);
(k the GEMM's columns: the channels, or a transposed conv's channels times its phases along W; out_h, out_w
the output's size and phase_h of phases_h the launch's phase along H, 0 of 1 for a conv; then the same
along D, one plane and one tap for a 2-D conv: `_sizes`)
    size_t NAME_workspace(<the same, without workspace and stream>);

The translation unit must be built for sm_90a with -DNDEBUG (`codegen/build.py` does): CUTLASS's
device-side asserts otherwise make ptxas serialize every wgmma (1.4-1.6x slower).
"""

from __future__ import annotations

from kernelwright.codegen import kernel
from kernelwright.codegen.gemm import epilogue_function
from kernelwright.codegen.gemm_entry import epilogue_operands, input_index
from kernelwright.codegen.kernel import KernelSource, KernelSpec, cpp_bool, entry_points
from kernelwright.fuse.conv import MAX_PHASE_TAPS, ConvView, describe, to_nchw
from kernelwright.fuse.gemm import EpilogueOperand
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Node

_TEMPLATE = kernel.source_template("kw_conv_sm90.cu.in")
# kRowOp: what each pixel's row of channels computes after the epilogue (a softmax on the staged tile, a
# reduction in registers)
ROW_OPS = {None: 0, "softmax": 1, "log_softmax": 2, "sum": 3, "mean": 4, "amax": 5, "amin": 6, "logsumexp": 7}
# The tile widths (columns), narrowest first: each one another instantiation of the kernel.
TILE_WIDTHS = (64, 96, 128)
_SIZES = ("n", "h", "w", "c", "k", "r", "s", "pad_h", "pad_w", "pad_h_hi", "pad_w_hi", "stride_h", "stride_w",
          "dilation_h", "dilation_w", "channels", "out_h", "out_w", "phase_h", "phases_h", "d", "t", "pad_d",
          "pad_d_hi", "stride_d", "dilation_d", "out_d", "phase_d", "phases_d")


def tile(view: ConvView) -> tuple[int, int, int]:
    """(TM, TN, TK): 128 pixels by 128 columns by 32 of C*R*S (measured on the H100: 331 TFLOP/s at 128
    output channels, 1.03x cuDNN), 64 or 96 columns wide where there are at most that many (the channels, or
    a transposed conv's channels times its phases along W): a wider tile's idle columns cost multiply-adds."""
    return 128, next((width for width in TILE_WIDTHS if view.columns <= width), TILE_WIDTHS[-1]), 32


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
        store_function=epilogue_function(f"{name}_store", view.gemm if late(view) else view.post_view),
        store="StatsStore" if view.statistics else "PoolStore" if view.pooled else
              "ReduceStore" if view.reduced else "NchwStore",
        rank=view.rank, phased=cpp_bool(view.phased), phases_w=view.phases_w, phase_taps_max=MAX_PHASE_TAPS,
        pooled=cpp_bool(view.pooled), mean=cpp_bool(view.pooled and view.output.op == "mean"),
        statistics=cpp_bool(bool(view.statistics)), per_image=cpp_bool(view.per_image),
        statistic_count=max(1, len(view.statistics)),
        statistic_writes="".join(f"\n  s.out[{j}][n] = static_cast<float>({_statistic(node)});"
                                 for j, node in enumerate(view.statistics)),
        statistic_pointers=", ".join(f"s{j}" for j in statistics) or "nullptr",
        row_op=ROW_OPS[view.row.op if view.row is not None else None],
        store_epilogue=cpp_bool(late(view) or bool(view.post)),
        argument_params=", ".join(["const float* x", "const float* weight", "float* y"]
                                  + [f"float* s{j}" for j in statistics]
                                  + [f"const float* e{j}" for j in operands] + [f"int {s}" for s in _SIZES]),
        forward_args=", ".join(["x", "weight", "y"] + [f"s{j}" for j in statistics]
                               + [f"e{j}" for j in operands] + list(_SIZES)),
        operand_fields="".join(f"\n    const float* e{j} = nullptr;" for j in operands),
        operand_args="".join(f"\n  args.direct.e{j} = e{j};" for j in operands),
        operand_reads=_reads(view, "p.nchw(m, n)"), late=cpp_bool(late(view)),
        late_reads=_reads(view, "at"),
        late_prefetch="".join(f'\n    asm volatile("prefetch.global.L2 [%0];" :: "l"(p.e{j} + at));'
                              for j, o in enumerate(view.operands) if _nchw(o)),
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


def _reads(view: ConvView, nchw: str) -> str:
    """The epilogue function's tensor arguments, each read where element (m, n) of the output reads it (an
    NCHW one at `nchw`, its NCHW index)."""
    return "".join(f", __ldg(p.e{j} + {nchw if _nchw(o) else _index(o)})"
                   for j, o in enumerate(view.operands))


def _index(operand: EpilogueOperand) -> str:
    """Where element (m, n) of the output reads an epilogue tensor (collapsed to its (1, M, N) extents)."""
    _, mo, no = operand.extents
    if mo > 1 and no > 1:
        return "m * p.channels + n"
    return "n" if no > 1 else "m" if mo > 1 else "0"


def late(view: ConvView) -> bool:
    """Whether the NCHW store applies the epilogue (`kLate`): where it reads an NCHW epilogue tensor and
    nothing (a softmax over the channels) follows it in the staged tile."""
    return (not (view.statistics or view.pooled) and view.row is None
            and any(_nchw(o) for o in view.operands))


def _nchw(operand: EpilogueOperand) -> bool:
    """Whether an epilogue tensor of the output's whole NHWC shape is the NHWC view of an NCHW tensor (the
    layout pass's permute of a model input, say a residual): read where it is, not copied to NHWC first."""
    node = operand.node
    rank = len(node.shape)
    return (operand.kind == "full" and node.op == "permute" and rank in (4, 5)
            and tuple(node.attr("dims")) == (0, *range(2, rank), 1))


def render_entry(name: str, launcher: str, group: FusedGroup, view: ConvView) -> tuple[str, KernelSpec]:
    """The entry: x and the weight dense at 16-byte aligned addresses (TMA), each epilogue tensor dense at
    its (1, M, N) extents; sizes baked in (the spec fixes the shapes). Where C is not a multiple of 4, x and
    the weight are first copied with zero channels up to `view.c_padded` into the workspace (before the
    kernel's own, 256-byte aligned), and the kernel reads those."""
    epilogue = [(index, (("permute", *to_nchw(len(o.node.shape))), ("dense", 4)) if _nchw(o) else steps,
                 dtype)
                for (index, steps, dtype), o in zip(epilogue_operands(group, view.gemm, ("dense", 4))[0],
                                                    view.operands, strict=True)]   # (read a float at a time)
    operands = [(input_index(group, view.x), (("dense", 16),), None),
                (input_index(group, view.w), (("dense", 16),), None), *epilogue]
    tensors = [f"static_cast<const float*>(in[{j}].data)" for j in range(len(operands))]
    outputs = [f"static_cast<float*>(out[{j}])" for j in range(1 + len(view.statistics))]
    if view.transposed:
        return _transposed_entry(name, launcher, view, tensors, outputs), _spec(group, view, operands)
    sizes = _sizes(view)
    nulls = ", ".join(["nullptr"] * (len(operands) + len(outputs)))
    own = f"{launcher}_workspace({nulls}, {sizes})"
    if view.c == view.c_padded:
        args = ", ".join([*tensors[:2], *outputs, *tensors[2:]])
        body = f"  return {launcher}_launch({args}, {sizes}, workspace, stream);"
        return entry_points(name, body, own), _spec(group, view, operands)
    rows = (view.input_pixels, view.k * view.t * view.r * view.s)
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


def _sizes(view: ConvView, **launch: int) -> str:
    """The launcher's size arguments, in `_SIZES`' order: the conv's (a 2-D one's along D: one plane, one tap,
    no padding), or where given a launch's own (a transposed conv's phase)."""
    depth = view.rank == 3
    sizes = dict(n=view.n, h=view.h, w=view.w_in, c=view.c_padded, k=view.k, r=view.r, s=view.s,
                 pad_h=view.padding[-2], pad_w=view.padding[-1], pad_h_hi=view.padding[-2],
                 pad_w_hi=view.padding[-1], stride_h=view.stride[-2], stride_w=view.stride[-1],
                 dilation_h=view.dilation[-2], dilation_w=view.dilation[-1], channels=view.k, out_h=view.p,
                 out_w=view.q, phase_h=0, phases_h=1, d=view.d, t=view.t, pad_d=view.padding[0] * depth,
                 pad_d_hi=view.padding[0] * depth, stride_d=view.stride[0] if depth else 1,
                 dilation_d=view.dilation[0] if depth else 1, out_d=view.z, phase_d=0, phases_d=1)
    sizes.update(launch)
    return ", ".join(str(sizes[name]) for name in _SIZES)


def _transposed_entry(name: str, launcher: str, view: ConvView, tensors: list[str],
                      outputs: list[str]) -> str:
    """A transposed conv's entry: each output phase along D and H a launch of the kernel (a stride-1
    correlation of x, its phases along W the GEMM's columns; a stride-1 conv's one launch a conv's), its
    weights first gathered from the conv's into the workspace (`{launcher}_phase_weights`, every call: the
    weight may change), x padded as for a conv where C is not a multiple of 4."""
    rows_d, rows_h, rows_w = view.phases()
    row_w = rows_w[0]     # the W phases share one window
    lines = ["  char* scratch = static_cast<char*>(workspace);", "  const char* error = nullptr;"]
    offset = 0
    x = tensors[0]
    if view.c != view.c_padded:
        rows = view.input_pixels
        lines += ["  float* padded_x = reinterpret_cast<float*>(scratch);",
                  f"  error = {launcher}_pad({x}, padded_x, {rows}LL, {view.c}, {view.c_padded}, stream);",
                  "  if (error != nullptr) return error;"]
        x, offset = "padded_x", _aligned(rows * view.c_padded * 4)
    launches, owns = [], []
    nulls = ", ".join(["nullptr"] * (len(tensors) + len(outputs)))
    for j, (rd, rh) in enumerate((rd, rh) for rd in range(len(rows_d)) for rh in range(len(rows_h))):
        row_d, row_h = rows_d[rd], rows_h[rh]
        taps = phase_taps(view, rd, rh)     # K * len(taps) rows of c_padded: the launch's weights
        weight = f"phase_w{j}"
        lines += [f"  static const int taps{j}[] = {{{', '.join(map(str, taps))}}};",
                  f"  float* {weight} = reinterpret_cast<float*>(scratch + {offset}LL);",
                  f"  error = {launcher}_phase_weights({tensors[1]}, {weight}, taps{j}, {len(taps)}, "
                  f"{view.phases_w}, {view.k}, {view.c}, {view.c_padded}, {view.t * view.r * view.s}, "
                  "stream);",
                  "  if (error != nullptr) return error;"]
        offset += _aligned(view.k * len(taps) * view.c_padded * 4)
        # a stride-1 correlation of the phase's window and paddings (along D one tap, no padding in 2-D)
        sizes = _sizes(view, k=view.columns, t=len(row_d.taps), r=len(row_h.taps), s=len(row_w.taps),
                       pad_d=row_d.lower, pad_d_hi=row_d.upper, pad_h=row_h.lower, pad_h_hi=row_h.upper,
                       pad_w=row_w.lower, pad_w_hi=row_w.upper, stride_d=1, stride_h=1, stride_w=1,
                       dilation_d=1, dilation_h=1, dilation_w=1, phase_d=rd, phases_d=len(rows_d), phase_h=rh,
                       phases_h=len(rows_h))
        launches.append((", ".join([x, weight, *outputs, *tensors[2:]]), sizes))
        owns.append(f"{launcher}_workspace({nulls}, {sizes})")
    # the launches run one after another on the stream, each on the same workspace after the weights (the
    # stores of a transposed conv use none but CUTLASS's: their sum is at least the largest)
    for args, sizes in launches:
        lines += [f"  error = {launcher}_launch({args}, {sizes}, scratch + {offset}LL, stream);",
                  "  if (error != nullptr) return error;"]
    body = "\n".join([*lines, "  return nullptr;"])
    return entry_points(name, body, " + ".join([str(offset), *owns]))


def phase_taps(view: ConvView, rd: int, rh: int) -> list[int]:
    """The kernel's tap ((kd * R + kh) * S + kw, or -1 for a zero weight) at each tap (rw, v, t, u) of output
    phase rd's window along D (one tap in 2-D), rh's along H and W phase rw's along W, in that order
    (`phase_weights` in the template gathers the launch's weights [K * phases along W][V][T][U][C] by it)."""
    rows_d, rows_h, rows_w = view.phases()
    return [-1 if None in (e, a, b) else (e * view.r + a) * view.s + b
            for row_w in rows_w for e in rows_d[rd].taps for a in rows_h[rh].taps for b in row_w.taps]


def _aligned(size: int) -> int:
    return -(-size // 256) * 256


def _spec(group: FusedGroup, view: ConvView, operands: list) -> KernelSpec:
    roles = ["x" if n is view.x else "weight" if n is view.w else "epilogue tensor" for n in group.inputs]
    return KernelSpec(kernel.typed_inputs(group.inputs, roles), tuple(operands),
                      kernel.typed([view.output, *view.statistics]))


def ir_comment(view: ConvView) -> str:
    tm, tn, tk = tile(view)
    row = [f"{view.row.op} over the channels"] if view.row is not None else []
    epilogue = " → ".join([n.op for n in view.epilogue] + row + [n.op for n in view.post]) or "none"
    depth = view.rank == 3
    kernel = f"{view.t}, " * depth + f"{view.r}, {view.s}"
    x = f"{view.layout} [{view.n}, " + f"{view.d}, " * depth + f"{view.h}, {view.w_in}, {view.c}]"
    if view.phased:
        rows_d, rows_h, (row_w, *_) = view.phases()
        windows = ", ".join(f"{len(e.taps)}x" * depth + f"{len(r.taps)}x{len(row_w.taps)}"
                            for e in rows_d for r in rows_h)
        along = "D and H" if depth else "H"
        return (f"conv_transpose{view.rank}d {x} * [{view.c}, {kernel}, {view.k}] stride {view.stride} "
                f"padding {view.padding} -> {_stored(view)}: {len(rows_d) * len(rows_h)} launches (output "
                f"phases along {along}; windows {windows}), the {view.phases_w} phases along W side by side "
                f"as the GEMM's columns, via CUTLASS sm90 TF32 implicit GEMM (ping-pong tile {tm}x{tn}x{tk});"
                f" epilogue: {epilogue}")
    operands = ", ".join(f"{o.node.name or o.node.op}:{o.kind}" for o in view.operands) or "none"
    padded = f" (channels padded to {view.c_padded})" if view.c != view.c_padded else ""
    statistics = ", ".join(_statistic_name(n) for n in view.statistics)
    pixels = f"{view.z}x" * depth + f"{view.p}x{view.q}"
    output = (f"{view.output.op} over each image's {pixels} pixels -> [{view.n}, {view.k}]"
              if view.pooled else f"{view.layout} [{view.n}, " + f"{view.z}, " * depth +
              f"{view.p}, {view.q}, {view.k}] and each channel's "
              f"{statistics} over {'each image' if view.per_image else 'all pixels'}" if view.statistics
              else _stored(view))
    conv = (f"conv_transpose{view.rank}d {x} * [{view.c}, {kernel}, {view.k}] stride 1 (the correlation with "
            f"its kernel flipped)" if view.transposed else
            f"conv{view.rank}d {x} * [{view.k}, {kernel}, {view.c}]{padded} stride {view.stride}")
    return (f"{conv} padding {view.padding} dilation {view.dilation} -> "
            f"{output} via CUTLASS sm90 TF32 implicit GEMM (ping-pong tile {tm}x{tn}x{tk}); epilogue: "
            f"{epilogue}; epilogue tensors: {operands}")


def _stored(view: ConvView) -> str:
    """The output an NCHW or reducing store writes."""
    if view.reduced:
        return f"{list(view.output.shape)} (a value a pixel)"
    return "NC" + "D" * (view.rank == 3) + f"HW {list(view.output.shape)}"
