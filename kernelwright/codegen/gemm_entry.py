"""What every GEMM route shares at its entry point (convention in `codegen/kernel.py`): the launcher's
parameter list (each route's CUDA defines the launcher), the operands the runtime prepares (A and B viewed as
[batch, rows, cols] matrices, copied where the kernel cannot read them; epilogue tensors collapsed to their
(L, M, N) extents, dense) and the entry of the routes that make one launcher call (CUTLASS, GEMV). The
3xTF32 route builds its own entry from the same pieces (`gemm_tf32x3.py`)."""

from __future__ import annotations

from kernelwright.codegen.kernel import KernelSpec, entry_points, typed, typed_inputs
from kernelwright.fuse.gemm import GemmConfig, GemmView
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Node


def launcher_params(view: GemmView) -> str:
    """The launcher's parameter list (shared by both kernels and the entry)."""
    operands = "".join(f"const float* e{j}, long long e{j}_sm, long long e{j}_sl, "
                       for j in range(len(view.operands)))
    return (f"const float* a, const float* b, float* d, {operands}int batch, int m, int n, int k, "
            "long long lda, long long ldb, long long batch_stride_a, long long batch_stride_b, int split_k, "
            "void* workspace, cudaStream_t stream")


def input_index(group: FusedGroup, node: Node) -> int:
    """Where `node` stands among the group's inputs."""
    return next(i for i, inp in enumerate(group.inputs) if inp is node)


def stored_matrices(view: GemmView) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(batch, rows, cols) of A and of B as stored: A is [batch, M, K] (row-major) or its source
    [batch, K, M]; B is [batch, K, N] or [batch, N, K]. An operand without a batch dim has batch 1."""
    a_rows, a_cols = (view.k, view.m) if view.a_col_major else (view.m, view.k)
    b_rows, b_cols = (view.n, view.k) if view.b_col_major else (view.k, view.n)
    a_batch = view.batch if len(view.a.shape) == 3 else 1
    b_batch = view.batch if len(view.b.shape) == 3 else 1
    return (a_batch, a_rows, a_cols), (b_batch, b_rows, b_cols)


def gemm_inputs(group: FusedGroup, view: GemmView) -> tuple:
    """The group's inputs, each labelled with its role (A, B or an epilogue tensor) and IR name."""
    roles = ["A" if n is view.a else "B" if n is view.b else "epilogue tensor" for n in group.inputs]
    return typed_inputs(group.inputs, roles)


def epilogue_operands(group: FusedGroup, view: GemmView, dense: tuple) -> tuple[list, str]:
    """The epilogue tensors as runtime operands (`dense`: the step that makes each one readable, after the
    reshape to its (L, M, N) extents) and the launcher arguments addressing them: epilogue tensor j is the
    entry's operand 2 + j, after A and B (`in[2 + j].data, row stride, batch stride,`)."""
    operands, args = [], []
    for j, operand in enumerate(view.operands):
        lo, mo, no = operand.extents
        operands.append((input_index(group, operand.node), (("reshape", lo, mo, no), dense), None))
        args.append(f"static_cast<const float*>(in[{2 + j}].data), {no if mo > 1 else 0}LL, "
                    f"{mo * no if lo > 1 else 0}LL,")
    return operands, " ".join(args)


def render_entry(name: str, launcher: str, group: FusedGroup, view: GemmView,
                 config: GemmConfig) -> tuple[str, KernelSpec]:
    (a_batch, a_rows, a_cols), (b_batch, b_rows, b_cols) = stored_matrices(view)
    # CUTLASS's access widths are compiled in; the GEMV kernel picks its own from the pointers and strides
    # it is given, so copying an operand for its sake would only add traffic.
    align_a, align_b = (config.align_a, config.align_b) if config.kernel == "cutlass" else (1, 1)
    # An epilogue tensor is read with 16-byte vector loads: dense, at an aligned address.
    epilogue, operand_args = epilogue_operands(group, view, ("dense", 16))
    operands = (
        (input_index(group, view.a), (("reshape", a_batch, a_rows, a_cols), ("matrix", align_a)), None),
        (input_index(group, view.b), (("reshape", b_batch, b_rows, b_cols), ("matrix", align_b)), None),
        *epilogue,
    )
    sizes = f"{view.batch}, {view.m}, {view.n}, {view.k}"
    body = (f"  const KwOperand& a = in[0];\n  const KwOperand& b = in[1];\n"
            f"  return {launcher}_launch(static_cast<const float*>(a.data), "
            f"static_cast<const float*>(b.data), "
            f"static_cast<float*>(out[0]), {operand_args} {sizes}, "
            f"kw::row_stride(a, {a_cols}, {align_a}), kw::row_stride(b, {b_cols}, {align_b}), "
            f"kw::batch_stride(a), kw::batch_stride(b), {config.split_k}, workspace, stream);")
    cuda = entry_points(name, body, f"{launcher}_workspace({sizes}, {config.split_k})")
    return cuda, KernelSpec(gemm_inputs(group, view), operands, typed([view.output]))
