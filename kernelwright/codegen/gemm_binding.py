"""What every GEMM route shares with its binding: the launcher's parameter list (each route's CUDA defines
the launcher, the binding declares it), the binding's input checks and epilogue-tensor plumbing, and the
binding of the routes that make one launcher call (CUTLASS, GEMV). The 3xTF32 route builds its own binding
from the same pieces (`gemm_tf32x3.py`)."""

from __future__ import annotations

import re

from kernelwright.codegen.kernel import source_template
from kernelwright.fuse.gemm import GemmConfig, GemmView
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Node


def launcher_params(view: GemmView) -> str:
    """The launcher's parameter list (shared by both kernels and by the binding's declaration)."""
    operands = "".join(f"const float* e{j}, long long e{j}_sm, long long e{j}_sl, "
                       for j in range(len(view.operands)))
    return (f"const float* a, const float* b, float* d, {operands}int batch, int m, int n, int k, "
            "long long lda, long long ldb, long long batch_stride_a, long long batch_stride_b, int split_k, "
            "void* workspace, cudaStream_t stream")


# Assumes `kernelwright.codegen.binding.CPP_PRELUDE` (ATen tensor and empty, c10 CUDA guard and stream).
_BINDING = source_template("kw_gemm_binding.cpp.in")


def input_index(group: FusedGroup, node: Node) -> int:
    """Where `node` stands among the group's inputs (the binding's `inputs[i]`)."""
    return next(i for i, inp in enumerate(group.inputs) if inp is node)


def stored_matrices(view: GemmView) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(batch, rows, cols) of A and of B as stored: A is [batch, M, K] (row-major) or its source
    [batch, K, M]; B is [batch, K, N] or [batch, N, K]. An operand without a batch dim has batch 1."""
    a_rows, a_cols = (view.k, view.m) if view.a_col_major else (view.m, view.k)
    b_rows, b_cols = (view.n, view.k) if view.b_col_major else (view.k, view.n)
    a_batch = view.batch if len(view.a.shape) == 3 else 1
    b_batch = view.batch if len(view.b.shape) == 3 else 1
    return (a_batch, a_rows, a_cols), (b_batch, b_rows, b_cols)


def render_binding(name: str, launcher: str, group: FusedGroup, view: GemmView, config: GemmConfig) -> str:
    (a_batch, a_rows, a_cols), (b_batch, b_rows, b_cols) = stored_matrices(view)
    # CUTLASS's access widths are compiled in; the GEMV kernel picks its own from the pointers and strides
    # it is given, so copying an operand for its sake would only add traffic.
    align_a, align_b = (config.align_a, config.align_b) if config.kernel == "cutlass" else (1, 1)
    checks, operand_lines, operand_args = binding_plumbing(name, group, view, f"{name}_detail::dense")
    return _BINDING.substitute(
        name=name, launcher=launcher, params=launcher_params(view),
        checks=checks,
        batch=view.batch, m=view.m, n=view.n, k=view.k, split_k=config.split_k,
        a_expr=_matrix_expr(input_index(group, view.a), a_batch, a_rows, a_cols),
        b_expr=_matrix_expr(input_index(group, view.b), b_batch, b_rows, b_cols),
        a_batch=a_batch, b_batch=b_batch, a_rows=a_rows, a_cols=a_cols, b_rows=b_rows, b_cols=b_cols,
        align_a=align_a, align_b=align_b,
        operand_lines=operand_lines, operand_args=operand_args,
        out_shape=", ".join(str(s) for s in view.output.shape) or "",
    ).lstrip()


def binding_plumbing(name: str, group: FusedGroup, view: GemmView, dense: str) -> tuple[str, str, str]:
    """Binding lines shared by every GEMM kernel: the input checks (count, dtype, shape, one device; then
    the device guard), the epilogue tensors made dense
    (`at::Tensor eJ = DENSE(...)`), and the launcher arguments addressing them
    (`eJ, row stride, batch stride,`)."""
    operand_lines, operand_args = [], []
    for j, operand in enumerate(view.operands):
        lo, mo, no = operand.extents
        # Collapsed to (L, M, N) extents and made dense, an operand is addressed by two strides.
        operand_lines.append(f"  at::Tensor e{j} = {dense}(inputs[{input_index(group, operand.node)}], "
                             f"{lo}, {mo}, {no});")
        operand_args.append(f"e{j}.data_ptr<float>(), {no if mo > 1 else 0}LL, {mo * no if lo > 1 else 0}LL,")
    n = len(group.inputs)
    checks = [
        f'  KW_CHECK(inputs.size() == {n}, "{name}: expected {n} inputs, got ", inputs.size());',
        "  // Every input as passed, before any is viewed or copied: a CUDA float32 tensor of the",
        "  // planned shape, all on one device (the kernel runs on input 0's). Strides are free: what",
        "  // the kernel cannot read is copied.",
    ]
    for k, node in enumerate(group.inputs):
        shape = ", ".join(map(str, node.shape))
        checks.append(f'  kw_check_input(inputs[{k}], at::kFloat, at::IntArrayRef{{{shape}}}, '
                      f'"{name} ({_role(node, view)})", {k});')
    checks += [
        "  for (size_t i = 1; i < inputs.size(); ++i) {",
        f'    KW_CHECK(inputs[i].device() == inputs[0].device(), "{name}: input ", i, " is on ", '
        "inputs[i].device(),",
        '             ", input 0 on ", inputs[0].device());',
        "  }",
        "  const c10::cuda::CUDAGuard guard(inputs[0].device());",
    ]
    return "\n".join(checks), "\n".join(operand_lines), " ".join(operand_args)


def _role(node: Node, view: GemmView) -> str:
    """How an input appears in check messages: its role and its IR name (letters, digits, `._` only, so it
    is safe inside a C string literal)."""
    role = "A" if node is view.a else "B" if node is view.b else "epilogue tensor"
    label = re.sub(r"[^\w.]", "_", node.name or node.op)
    return f"{role} {label}"


def _matrix_expr(index: int, batch: int, rows: int, cols: int) -> str:
    # reshape is a view whenever the strides allow (an nn.Linear input [..., K] flattens for free).
    return f"inputs[{index}].reshape({{{batch}, {rows}, {cols}}})"
