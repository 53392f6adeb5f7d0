"""3xTF32 GEMMs on cuBLAS's TF32 tensor-core kernels: FP32 accuracy at tensor-core speed.

Each FP32 operand is split exactly into x = big + small, `big` being x rounded to TF32 (10 mantissa bits)
and `small` the remainder. The product A·B is then A_small·B_big + A_big·B_small + A_big·B_big (the
small·small term, 2^-22 of the product, is dropped as CUTLASS's `OpMultiplyAddFastF32` drops it), and the
three products are ONE TF32 GEMM of depth 3K over the operands concatenated along K:

    [A_small | A_big | A_big] · [B_big ; B_small ; B_big]

(each block zero-padded to a depth that is a multiple of 4: `padded_depth`).

The tensor cores accumulate all 3K terms in FP32, so the result matches an FP32 GEMM's accuracy (better
than cuBLAS's FP32 SIMT kernels at large K, measured in `bench/kernels/bench_gemm.py`) while running on the
TF32 units: about 3x their FP32 rate / 3. The split is a bandwidth-bound kernel of ours (reads an operand
once, writes it three times). A parameter's split (an `nn.Linear` weight) is kept by the runtime
(kw_runtime.cpp), with a
64-bit fingerprint per 4096-element tile of the values it was made from; every call's split kernel reads
the parameter, and re-splits only the tiles whose fingerprint changed. So no write goes unseen (writes
through `param.data` move no version counter), with no host sync, for one read of the weight per call
(an 8192x8192 weight: 0.27 GB against the split's 1.07 GB). The GEMM
epilogue (bias, activations, residuals) runs as one elementwise pass over the product, with the same
`NAME_epilogue` function as the CUTLASS kernels.

cuBLAS is reached without its headers or a link-time dependency (neither exists on a CPU-only build
machine): the launcher looks its three entry points up in the libcublas that torch has already loaded, and
reports an error, which verification (`verify/measure.py`) treats as "keep ATen", where there is none.
"""

from __future__ import annotations

import hashlib

from kernelwright.codegen.assemble import HEADER_DIR
from kernelwright.codegen.gemm_entry import epilogue_operands, gemm_inputs, input_index, stored_matrices
from kernelwright.codegen.kernel import KernelSpec, entry_points, source_template, typed
from kernelwright.fuse.gemm import GemmConfig, GemmView

# Which of the three K blocks carry the small part: A = [small, big, big], B = [big, small, big].
SMALLS_A = 0b001
SMALLS_B = 0b010

_CUDA = source_template("kw_gemm_tf32x3.cu.in")


def render_cuda(name: str, view: GemmView, config: GemmConfig, epilogue_function: str) -> str:
    del config      # one instantiation serves every shape: sizes are arguments
    operands = range(len(view.operands))
    loads = []
    for j, operand in enumerate(view.operands):
        n_term = " + col" if operand.kind in ("full", "row") else ""
        loads.append(f", __ldg(e{j} + l * e{j}_sl + r * e{j}_sm{n_term})")
    return _CUDA.substitute(
        name=name, epilogue_function=epilogue_function,
        operand_params="".join(f", const float* __restrict__ e{j}, long long e{j}_sm, long long e{j}_sl"
                               for j in operands),
        operand_decls="".join(f"const float* e{j}, long long e{j}_sm, long long e{j}_sl, " for j in operands),
        operand_args="".join(f", e{j}, e{j}_sm, e{j}_sl" for j in operands),
        operand_loads="".join(loads),
    ).lstrip()


def scratch_part(nbytes: int) -> int:
    """The workspace a part of `nbytes` takes: rounded up to SCRATCH_ALIGN, so the next part starts
    aligned."""
    return -(-nbytes // SCRATCH_ALIGN) * SCRATCH_ALIGN


def padded_depth(k: int) -> int:
    """K rounded up to a multiple of 4: the depth of each of the split's three blocks (zero-padded), so that
    their leading dimension 3K and the blocks' starts are 16-byte aligned for cuBLAS's TF32 kernels (and the
    row length of the product, N rounded up the same way)."""
    return -(-k // 4) * 4


def has_epilogue(view: GemmView) -> bool:
    """Whether anything runs after the product (a bias, addmm's scaling, pointwise ops)."""
    if view.operands or view.epilogue:
        return True
    return view.anchor.op == "addmm" and float(view.anchor.attr("alpha", 1)) != 1


# A split of [batch, rows, cols] floats: 3 copies (big and small parts); one fingerprint word per 4096-element
# tile (the split kernel's kTile). The runtime keeps a parameter's split per process, for every model: its
# key names the split's format (a hash of the split kernels' source, kw_gemm_x3.cuh), so files of other
# kernelwright versions in one process never read each other's splits.
SPLIT_TILE, SCRATCH_ALIGN = 4096, 256
SPLIT_FORMAT = int(hashlib.sha1((HEADER_DIR / "kw_gemm_x3.cuh").read_bytes()).hexdigest()[:12], 16)


def render_entry(name: str, launcher: str, group, view: GemmView,
                 config: GemmConfig) -> tuple[str, KernelSpec]:
    """The entry: split A (and B; a parameter's split is kept by the runtime, an activation's goes in the
    call's workspace), one cuBLAS call, the epilogue (from a padded product in the workspace when N is not a
    multiple of 4)."""
    epilogue, operand_args = epilogue_operands(group, view, ("contiguous",))
    operands, lines, scratch = [], [], 0
    matrices = stored_matrices(view)
    pad = padded_depth(view.k) - view.k
    # The product's rows 16-byte aligned: with N not a multiple of 4 the product goes to the workspace in
    # rows of N' = N rounded up, and the epilogue pass (an identity copy when there is nothing to apply)
    # writes the output's N columns. cuBLAS computes the N' - N extra columns too, never read back: from the
    # slack after the split when B's split is stored [N, 3K'] (an nn.Linear weight), from the unwritten pad
    # of its rows when stored [3K', N'] (kw_x3::row_pitch; a column-major A's split [3K', M'] the same way).
    # An N of 4093 made cuBLAS take an Ampere kernel for 4-byte alignment, 3.37 ms against 1.97 for N = 4096
    # and ATen's FP32 2.65; a row-major B of N = 4099 with rows N apart 2.17 ms against ATen's 1.56 (H100).
    ld = padded_depth(view.n)
    # A row-major [M, K]: K along its columns; column-major (stored [K, M]): along its rows. B the opposite.
    for j, (node, along, smalls) in enumerate(((view.a, not view.a_col_major, SMALLS_A),
                                              (view.b, view.b_col_major, SMALLS_B))):
        batch, rows, cols = matrices[j]
        elements = batch * rows * cols
        # floats: K padded, and the rows of a split stored [3K', cols] padded to kw_x3::row_pitch
        split = 3 * batch * (rows * (cols + pad) if along else (rows + pad) * padded_depth(cols))
        if j == 1 and along:
            split += (ld - view.n) * 3 * (view.k + pad)     # the extra columns' slack
        cache = None
        if node.op == "param":
            cache = (split * 4, -(-elements // SPLIT_TILE),
                     (SPLIT_FORMAT, batch, rows, cols, int(along), smalls))
            target = f"static_cast<float*>(cached[{j}].data)"
        else:
            target = f"reinterpret_cast<float*>(static_cast<char*>(workspace) + {scratch})"
            scratch += scratch_part(split * 4)
        operands.append((input_index(group, node), (("reshape", batch, rows, cols), ("inner_contiguous",)),
                         cache))
        var = "xy"[j]
        lines += [f"  float* {var} = {target};",
                  f"  error = kw_x3::split_matrix(static_cast<const float*>(in[{j}].data), "
                  f"{cols if rows == 1 else f'in[{j}].strides[1]'}, kw::batch_stride(in[{j}]), "
                  f"{batch}, {rows}, {cols}, {int(along)}, {pad}, {smalls}, {var}, cached[{j}].words, "
                  f"cached[{j}].salt, stream);",
                  "  if (error != nullptr) return error;"]
    (a_batch, _, _), (b_batch, _, _) = matrices
    m, n, k = view.m, view.n, view.k + pad
    product = "static_cast<float*>(out[0])"
    if ld != n:
        product = f"reinterpret_cast<float*>(static_cast<char*>(workspace) + {scratch})"
        scratch += scratch_part(view.batch * m * ld * 4)
        lines.append(f"  float* product = {product};")
        product = "product"
    # each split's batch stride: 3K' of its rows, padded to kw_x3::row_pitch where stored [3K', rows]
    x_bs = 0 if a_batch == 1 else 3 * k * (padded_depth(m) if view.a_col_major else m)
    y_bs = 0 if b_batch == 1 else 3 * k * (n if view.b_col_major else ld)
    lines.append(f"  error = kw_x3::gemm(x, {int(view.a_col_major)}, {x_bs}, y, {int(view.b_col_major)}, "
                 f"{y_bs}, {product}, {ld}, {view.batch}, {m}, {ld}, {3 * k}, {config.split_k}, stream);")
    if has_epilogue(view) or ld != n:
        lines += ["  if (error != nullptr) return error;",
                  f"  error = {launcher}_finish(static_cast<float*>(out[0]), {product}, {ld}, {operand_args} "
                  f"{view.batch}, {m}, {n}, stream);"]
    body = "\n".join(["  const char* error = nullptr;", *lines, "  return error;"])
    spec = KernelSpec(gemm_inputs(group, view), (*operands, *epilogue), typed([view.output]))
    return entry_points(name, body, str(scratch)), spec
