"""3xTF32 GEMMs on cuBLAS's TF32 tensor-core kernels: FP32 accuracy at tensor-core speed.

Each FP32 operand is split exactly into x = big + small, `big` being x rounded to TF32 (10 mantissa bits)
and `small` the remainder. The product A·B is then A_small·B_big + A_big·B_small + A_big·B_big (the
small·small term, 2^-22 of the product, is dropped as CUTLASS's `OpMultiplyAddFastF32` drops it), and the
three products are ONE TF32 GEMM of depth 3K over the operands concatenated along K:

    [A_small | A_big | A_big] · [B_big ; B_small ; B_big]

The tensor cores accumulate all 3K terms in FP32, so the result matches an FP32 GEMM's accuracy (better
than cuBLAS's FP32 SIMT kernels at large K, measured in `bench/kernels/bench_gemm.py`) while running on the
TF32 units: about 3x their FP32 rate / 3. The split is a bandwidth-bound kernel of ours (reads an operand
once, writes it three times). A parameter's split (an `nn.Linear` weight) is kept by the binding, with a
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

from string import Template

from kernelwright.codegen.gemm_binding import binding_plumbing, input_index, stored_matrices
from kernelwright.codegen.kernel import source_template
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


def finish_params(view: GemmView) -> str:
    operands = "".join(
        f"const float* e{j}, long long e{j}_sm, long long e{j}_sl, " for j in range(len(view.operands))
    )
    return f"float* d, {operands}int batch, int m, int n, cudaStream_t stream"


def has_epilogue(view: GemmView) -> bool:
    """Whether anything runs after the product (a bias, addmm's scaling, pointwise ops)."""
    if view.operands or view.epilogue:
        return True
    return view.anchor.op == "addmm" and float(view.anchor.attr("alpha", 1)) != 1


_BINDING = source_template("kw_gemm_tf32x3_binding.cpp.in")

_FINISH = ('  error = ${launcher}_finish(out.data_ptr<float>(), ${operand_args} batch, m, n, stream);\n'
           '  KW_CHECK(error == nullptr, "${name}: ", error == nullptr ? "" : error);')


def render_binding(name: str, launcher: str, group, view: GemmView, config: GemmConfig) -> str:
    """The C++ binding: split A (and B, cached when it is a parameter), one cuBLAS call, the epilogue."""
    checks, operand_lines, operand_args = binding_plumbing(name, group, view, "kw_tf32x3::dense")
    (a_batch, a_rows, a_cols), (b_batch, b_rows, b_cols) = stored_matrices(view)

    def split_expr(node, batch, rows, cols, k_along_cols: bool, smalls: int) -> str:
        index = input_index(group, node)
        source = f"inputs[{index}].reshape({{{batch}, {rows}, {cols}}})"
        along = "true" if k_along_cols else "false"
        if node.op == "param":
            return (f"kw_tf32x3::cached_split({launcher}_split, inputs[{index}], {source}, {batch}, "
                    f"{rows}, {cols}, {along}, {smalls}, \"{name}\")")
        return (f"kw_tf32x3::split({launcher}_split, {source}, {batch}, {rows}, {cols}, {along}, {smalls}, "
                f"\"{name}\")")

    finish = ""
    if has_epilogue(view):
        finish = Template(_FINISH).substitute(launcher=launcher, name=name, operand_args=operand_args)
    return _BINDING.substitute(
        name=name, launcher=launcher, finish_params=finish_params(view),
        checks=checks, chunks=config.split_k, batch=view.batch, m=view.m, n=view.n, k=view.k,
        # A row-major [M, K]: K along its columns; column-major (stored [K, M]): along its rows.
        # B the opposite.
        a_split=split_expr(view.a, a_batch, a_rows, a_cols, not view.a_col_major, SMALLS_A),
        b_split=split_expr(view.b, b_batch, b_rows, b_cols, view.b_col_major, SMALLS_B),
        a_t=1 if view.a_col_major else 0, b_t=1 if view.b_col_major else 0, a_batch=a_batch, b_batch=b_batch,
        operand_lines=operand_lines, out_shape=", ".join(str(s) for s in view.output.shape), finish=finish,
    ).lstrip()
