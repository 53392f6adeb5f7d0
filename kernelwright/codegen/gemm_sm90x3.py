"""3xTF32 GEMMs on Hopper's tensor cores, split inside the kernel: FP32 accuracy, no split copies.

The launcher (`cuda/kw_gemm_sm90_x3.cu.in`, CUTLASS: compiled apart, one library per machine, tile width and
orientation for every GEMM, since sizes are arguments and the epilogue is not in it) runs CUTLASS's TMA
warp-specialized kernel with our mainloop (`cuda/kw_gemm_sm90_x3.cuh`): each stage's FP32 tiles are the TF32
big parts as they are (the tensor cores read a TF32 operand's top 19 bits); A's small part is formed in the
wgmma register fragment, B's written beside its stage in shared memory; A_small.B + A.B_small + A.B accumulate
on the tensor cores with an FP32 promotion every 128 of K (every 32 where K is at most 128). Against the
cuBLAS route (`gemm_tf32x3.py`) it writes no split copies (three of each activation operand per call, three of
each weight kept) and is more accurate than FP32 at depths of ~1000 and more; H100 numbers in
`bench/results/2026-11-28-h100-80gb-hbm3-gemm-rs/`.

wgmma reads its smem operand (B) K-major only; the operand split in registers (A) is read from shared memory
in either layout. So A stored [k, m] is read as it is, and a plain A [m, k] . B [k, n] can run swapped, D^T =
B^T . A^T with B in registers and D written transposed (`fuse.gemm.sm90x3_roles`: a measured alternative, one
launcher library per orientation). An operand the kernel cannot read in place (B stored [k, n] when A is also
MN-major, an MN-major operand whose rows are not a multiple of 4, any operand of an odd K) is first copied
into the workspace K-major, its depth padded with zeros to a multiple of 4 (`cuda/kw_gemm_kmajor.cuh`, one
bandwidth-bound pass; a misaligned view the runtime copies). The epilogue (bias, activations, ...) is the
3xTF32 route's pass over the product, in place.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelwright.codegen import gemm_tf32x3
from kernelwright.codegen.gemm_entry import epilogue_operands, gemm_inputs, input_index, stored_matrices
from kernelwright.codegen.kernel import KernelSpec, entry_points, guarded_launcher, source_template, typed
from kernelwright.fuse.gemm import (
    SM90X3_TILES,
    SM90X3_WIDE,
    GemmConfig,
    GemmView,
    Sm90x3Roles,
    sm90x3_roles,
    sm90x3_tile,
)

_CUDA = source_template("kw_gemm_sm90_x3.cu.in")

# bytes reserved for CUTLASS's own workspace (its persistent tile scheduler needs none today)
CUTLASS_WORKSPACE = 1 << 16


def render_cuda(name: str, view: GemmView | None, config: GemmConfig | None, epilogue_function: str,
                stages: int | None = None, roles: Sm90x3Roles | None = None) -> str:
    """The launcher: one instantiation per tile (`fuse.gemm.sm90x3_tile`; the wide one without a config)
    and orientation (`fuse.gemm.sm90x3_roles`: the view's, or `roles`; K-major A without either) serves
    every GEMM. `stages` overrides the tile's pipeline depth (the probe's variants)."""
    del epilogue_function
    tile = sm90x3_tile(config) if config is not None else SM90X3_WIDE
    if roles is None:
        roles = sm90x3_roles(view, config.swap) if view is not None else Sm90x3Roles(False, "K", False,
                                                                                      False)
    return _CUDA.substitute(name=name, tile_n=tile[1], stages=stages or SM90X3_TILES[tile],
                            a_major=roles.register_major, a_layout=_A_LAYOUT[roles.register_major],
                            d_layout=roles.d_layout, d_contiguous="m" if roles.swap else "n")


# CUTLASS's layout tag of the register operand [m, k]: K-major is its RowMajor, MN-major its ColumnMajor
_A_LAYOUT = {"K": "RowMajor", "MN": "ColumnMajor"}


def render_entry(name: str, launcher: str, group, view: GemmView, config: GemmConfig,
                 epilogue_function: Callable[[str, GemmView], str]) -> tuple[str, KernelSpec]:
    """Read A and B in place where the kernel can (`fuse.gemm.sm90x3_roles`: a K-major operand, or an
    MN-major one split in registers), else copy them K-major into the workspace; one launch, swapping the
    operands (and writing D transposed, i.e. as it is) where the roles say; then the epilogue pass
    (`epilogue_function`: codegen.gemm's, which imports this module)."""
    stored = stored_matrices(view)
    m, n, k, batch = view.m, view.n, view.k, view.batch
    roles = sm90x3_roles(view, config.swap)
    ldk = gemm_tf32x3.padded_depth(k)
    if batch > 1 and (stored[0][0], stored[1][0]) != (batch, batch):
        raise ValueError(f"sm90x3: a batched product needs both operands batched, got {stored}")
    lines = ["  const char* error = nullptr;", "  char* scratch = static_cast<char*>(workspace);"]
    scratch, operands = 0, []
    for j, (var, kmajor, rows, copy) in enumerate((("a", not view.a_col_major, m, roles.copy_a),
                                                    ("b", view.b_col_major, n, roles.copy_b))):
        if not copy:
            # read in place, K-major or (split in registers) MN-major: its rows (K-major) or its columns
            # are the stored matrix's contiguous extent (the runtime copies a misaligned view)
            prep = ("matrix", 4)
            lines.append(f"  const float* {var} = static_cast<const float*>(in[{j}].data);"
                         f" const long long ld_{var} = kw::row_stride(in[{j}], {k if kmajor else rows}, 4),"
                         f" bs_{var} = kw::batch_stride(in[{j}]);")
        else:
            # made K-major (a row-major B, a column-major A), its rows padded to 16 bytes (K odd)
            prep = ("inner_contiguous",)
            s_r, s_k = (f"in[{j}].strides[1]", "1") if kmajor else ("1", f"in[{j}].strides[1]")
            lines += [f"  float* {var} = reinterpret_cast<float*>(scratch + {scratch});",
                      f"  const long long ld_{var} = {ldk}, bs_{var} = {rows * ldk}LL;",
                      f"  error = kw_kmajor::kmajor(static_cast<const float*>(in[{j}].data), "
                      f"kw::batch_stride(in[{j}]), {s_r}, {s_k}, {batch}, {rows}, {k}, {var}, stream);",
                      "  if (error != nullptr) return error;"]
            scratch += gemm_tf32x3.scratch_part(batch * rows * ldk * 4)
        operands.append((input_index(group, (view.a, view.b)[j]), (("reshape", *stored[j]), prep), None))
    out = "static_cast<float*>(out[0])"
    # depth ldk: with K not a multiple of 4 both operands are copies with zero pads (CUTLASS's TMA mainloop
    # wants the contiguous extent aligned too). Swapped, the kernel computes D^T [n, m] = B^T . A^T and
    # writes it column-major, rows n apart: D itself.
    first, second, rows, cols = ("b", "a", n, m) if roles.swap else ("a", "b", m, n)
    lines.append(f"  error = {launcher}_gemm({first}, ld_{first}, bs_{first}, {second}, ld_{second}, "
                 f"bs_{second}, {out}, {n}, {m * n}LL, {rows}, {cols}, {ldk}, {batch}, {config.strips}, "
                 f"scratch + {scratch}, {CUTLASS_WORKSPACE}, stream);")
    scratch += CUTLASS_WORKSPACE
    epilogue, operand_args = epilogue_operands(group, view, ("contiguous",))
    finish = ""
    if gemm_tf32x3.has_epilogue(view):
        # the 3xTF32 route's epilogue pass, in place over the product (rows n apart)
        finish_name, finish = guarded_launcher("gemm", lambda fname: gemm_tf32x3.render_cuda(
            fname, view, config, epilogue_function(fname, view)))
        lines += ["  if (error != nullptr) return error;",
                  f"  error = {finish_name}_finish({out}, {out}, {n}, {operand_args} {batch}, {m}, {n}, "
                  "stream);"]
    lines.append("  return error;")
    spec = KernelSpec(gemm_inputs(group, view), (*operands, *epilogue), typed([view.output]))
    cuda = (finish + '#include "kw_common.cuh"\n#include "kw_gemm_kmajor.cuh"\n'
            + entry_points(name, "\n".join(lines), str(scratch)))
    return cuda, spec
