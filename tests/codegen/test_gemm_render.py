"""The GEMM renderer on hand-built groups: the epilogue function, the CUTLASS instantiation and the GEMV
kernel it prints, the binding's operand plumbing, and (one slow test) nvcc compiling a CUTLASS source."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

import kernelwright.fuse.gemm as fuse_gemm
from kernelwright.codegen.gemm import epilogue_function, render
from kernelwright.codegen.gemm_build import DEVICE_HEADERS
from kernelwright.codegen.gemm_tf32x3 import SPLIT_FORMAT
from kernelwright.environment import cutlass_include_dir, nvcc_path
from kernelwright.fuse.gemm import GemmConfig, describe, match
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import const_node, input_node, make_node, param_node
from kernelwright.judge.kernelbench import strip_comments


@pytest.fixture(autouse=True)
def cutlass_headers(monkeypatch):
    """Rendering does not read the headers (only the compile test does, and it skips without them)."""
    monkeypatch.setattr(fuse_gemm, "cutlass_include_dir", lambda: Path("/cutlass/include"))


def group_of(*outputs, inputs=(), params=()) -> FusedGroup:
    groups = match(Graph(inputs=tuple(inputs), params=tuple(params), outputs=tuple(outputs),
                         output_kind="tensor" if len(outputs) == 1 else "tuple"), frozenset())
    assert len(groups) == 1
    return groups[0]


def epilogue_group() -> FusedGroup:
    """bmm with a transposed A (column-major), odd N (alignment 1) and every epilogue operand kind."""
    a, b = input_node("a", 0, (3, 36, 96)), input_node("b", 1, (3, 36, 201))
    residual, gate = input_node("residual", 2, (96, 201)), input_node("gate", 3, (3, 96, 1))
    bias = param_node("bias", (201,))
    y = make_node("bmm", [make_node("permute", [a], dims=(0, 2, 1)), b])
    y = make_node("mul", [make_node("add", [make_node("add", [y, residual]), bias]), gate])
    y = make_node("hardswish", [y])
    return group_of(y, inputs=(a, b, residual, gate), params=(bias,))


def test_epilogue_function_folds_linear_bias_then_pointwise_ops():
    x, w, b = input_node("x", 0, (512, 256)), param_node("w", (128, 256)), param_node("b", (128,))
    y = make_node("mul", [make_node("silu", [make_node("linear", [x, w, b])]), const_node(0.5)])
    text = epilogue_function("k", describe(group_of(y, inputs=(x,), params=(w, b))))
    assert "float k_epilogue(float acc, float e0)" in text
    assert "const float product = acc + e0;" in text
    assert "kw::silu(product)" in text and "0.5f" in text


@pytest.mark.parametrize(("alpha", "beta", "expected"), [
    (1.0, 1.0, "acc + e0;"), (2.0, 0.5, "2.0f * acc + 0.5f * e0;"), (1.0, 0.0, "product = acc;"),
])
def test_addmm_scalars(alpha, beta, expected):
    bias, a, b = param_node("bias", (256,)), input_node("a", 0, (256, 128)), input_node("b", 1, (128, 256))
    y = make_node("addmm", [bias, a, b], alpha=alpha, beta=beta)
    assert expected in epilogue_function("k", describe(group_of(y, inputs=(a, b), params=(bias,))))


def test_cutlass_source_instantiates_the_config():
    group = epilogue_group()
    group = dataclasses.replace(group, config=group.config._replace(swizzle="streamk"))
    source = render(group)
    assert "#include <torch" not in source.text and "cutlass::arch::OpMultiplyAddFastF32" in source.text
    assert "float, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, kAlignA" in source.text
    assert "kAlignA = 4, kAlignB = 1, kAlignC = 1" in source.text
    assert "ThreadblockSwizzleStreamK" in source.text
    for visitor in ("VisitorAuxLoad", "VisitorRowBroadcast", "VisitorColBroadcast"):
        assert f"tb::{visitor}<" in source.text
    assert "bmm" in source.ir_comment and "3xTF32" in source.ir_comment
    # the launcher launches its own, explicit __global__ entry (not the device adapter's Kernel2)
    code = strip_comments(source.text)
    assert ("__global__ void __launch_bounds__(Kernel::kThreadCount) gemm_kernel(Kernel::Params params)"
            in code)
    assert "gemm_kernel<<<grid, Kernel::kThreadCount, kSharedBytes, stream>>>(params);" in code
    assert "GemmUniversalAdapter" not in code


def test_split_k_is_an_entry_constant_on_the_stream_k_instantiation():
    """Variants that differ only in their split share one CUDA source (the split is a launcher argument);
    the data-parallel kernel never receives a split."""
    a, b = input_node("a", 0, (128, 4096)), input_node("b", 1, (4096, 4096))
    bias = param_node("bias", (4096,))
    group = group_of(make_node("relu", [make_node("add", [make_node("mm", [a, b]), bias])]), inputs=(a, b),
                     params=(bias,))
    assert group.config.split_k == 2 and group.config.swizzle == "streamk"
    source = render(group)
    assert "constexpr bool kStreamK = true;" in source.text
    assert "batch > 1 ? batch : kStreamK ? split_k : 1" in source.text
    launcher, entry = _launcher_and_entry(source)
    assert "_workspace(1, 128, 4096, 4096, 2)" in entry and ", 2, workspace, stream);" in entry
    assert "split-K 2" in source.ir_comment
    other = render(dataclasses.replace(group, config=group.config._replace(split_k=5)))
    assert _launcher_and_entry(other)[0] == launcher and ", 5, workspace, stream);" in other.text
    assert other.name != source.name
    data_parallel = render(dataclasses.replace(group, config=group.config._replace(swizzle="identity",
                                                                                   split_k=1)))
    assert "constexpr bool kStreamK = false;" in data_parallel.text
    with pytest.raises(ValueError, match="split-K"):
        render(dataclasses.replace(group, config=group.config._replace(swizzle="identity")))


def test_split_k_is_refused_for_batched_products():
    group = epilogue_group()
    with pytest.raises(ValueError, match="batch 3"):
        render(dataclasses.replace(group, config=group.config._replace(swizzle="streamk", split_k=2)))


def _launcher_and_entry(source) -> tuple[str, str]:
    """The kernel's CUDA split into its (guarded, shared) launcher and its own entry points."""
    cut = source.text.index('extern "C" const char* kw_entry_')
    return source.text[:cut], source.text[cut:]


def test_the_spec_maps_inputs_to_roles_and_collapses_operands():
    group = epilogue_group()
    assert [n.name for n in group.inputs] == ["a", "b", "residual", "bias", "gate"]
    spec = render(group).spec
    assert spec.operands == (
        (0, (("reshape", 3, 36, 96), ("matrix", 4)), None),    # A's source, [batch, K, M]
        (1, (("reshape", 3, 36, 201), ("matrix", 1)), None),
        (2, (("reshape", 1, 96, 201), ("dense", 16)), None),   # residual shared by the batches
        (3, (("reshape", 1, 1, 201), ("dense", 16)), None),    # bias row
        (4, (("reshape", 3, 96, 1), ("dense", 16)), None),     # per-batch gate column
    )
    assert spec.outputs == (("float32", (3, 96, 201)),)
    roles = ["A a", "B b", "epilogue tensor residual", "epilogue tensor bias", "epilogue tensor gate"]
    shapes = [tuple(n.shape) for n in group.inputs]
    assert spec.inputs == tuple(("float32", s, r) for s, r in zip(shapes, roles, strict=True))


def _linear_gemv_group() -> FusedGroup:
    x, w, b = input_node("x", 0, (1, 2048)), param_node("w", (4096, 2048)), param_node("b", (4096,))
    return group_of(make_node("relu", [make_node("linear", [x, w, b])]), inputs=(x,), params=(w, b))


@pytest.mark.parametrize(("a_shape", "b_shape", "transpose_a", "form"), [
    ((4096, 1024), (1024, 1), False, "dot"),
    ((1024, 4096), (1024, 1), True, "axpy"),
    ((1, 1024), (1024, 4096), False, "axpy"),
])
def test_gemv_forms(a_shape, b_shape, transpose_a, form):
    a, b = input_node("a", 0, a_shape), input_node("b", 1, b_shape)
    lhs = make_node("permute", [a], dims=(1, 0)) if transpose_a else a
    group = group_of(make_node("mm", [lhs, b]), inputs=(a, b))
    assert group.config.kernel == "gemv"
    source = render(group)
    assert f"({form} form)" in source.text and "cutlass" not in source.text
    # The kernel picks its access width at run time: no operand is copied for alignment.
    assert [steps[-1] for _, steps, _ in source.spec.operands[:2]] == [("matrix", 1), ("matrix", 1)]


def test_linear_with_a_single_row_is_a_dot_gemv():
    x, w, b = input_node("x", 0, (1, 2048)), param_node("w", (4096, 2048)), param_node("b", (4096,))
    group = group_of(make_node("relu", [make_node("linear", [x, w, b])]), inputs=(x,), params=(w, b))
    assert "(dot form)" in render(group).text


def test_gemv_source_compiles():
    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    a, v = input_node("a", 0, (4096, 1024)), input_node("v", 1, (1024, 1))
    scale = input_node("scale", 2, (4096, 1))
    y = make_node("tanh", [make_node("mul", [make_node("mm", [a, v]), scale])])
    group = group_of(y, inputs=(a, v, scale))
    _compile(render(group).text, [])


def test_cutlass_source_compiles_for_sm90a(tmp_path):
    """The slow one (~40 s of nvcc): a CUTLASS 3xTF32 EVT instantiation with every operand kind."""
    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    include = cutlass_include_dir()
    if include is None:
        pytest.skip("CUTLASS headers absent: pip install nvidia-cutlass")
    group = epilogue_group()
    group = dataclasses.replace(group, config=GemmConfig(block=(64, 64, 16), warp=(32, 32, 16), stages=4,
                                                         swizzle="streamk", align_a=4, align_b=1, align_c=1))
    _compile(render(group).text, [f"-I{include}"])


def _compile(cuda: str, flags: list[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / "kernel.cu"
        source.write_text(cuda)
        # torch's extension flags, so the headers are checked the way load_inline will build them.
        command = [nvcc_path(), "-std=c++17", "--expt-relaxed-constexpr", "-D__CUDA_NO_HALF_OPERATORS__",
                   "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
                   "-D__CUDA_NO_HALF2_OPERATORS__", "-gencode=arch=compute_90a,code=sm_90a",
                   f"-I{DEVICE_HEADERS}", *flags, "-c", str(source), "-o", str(source.with_suffix(".o"))]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        assert_no_shared_statics(source.with_suffix(".o"))


def assert_no_shared_statics(obj: Path) -> None:
    """No symbol of our launchers is GNU_UNIQUE (`nm` type u: one per process, shared by every library that
    defines it): two kernel libraries holding the same launcher must keep their own state (a conv kernel of
    the second one launched without its shared-memory opt-in)."""
    if shutil.which("nm") is None:
        return
    symbols = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    shared = [line for line in symbols.splitlines() if " u " in line and "kw_" in line]
    assert not shared, shared


def test_tf32x3_entry_splits_activations_and_caches_parameter_splits():
    """3xTF32 on cuBLAS: the activation is split every call, an nn.Linear weight (a parameter) kept with
    per-tile fingerprints that every call checks; the epilogue pass runs only when there is an epilogue."""
    x, w, b = input_node("x", 0, (2048, 1024)), param_node("w", (4096, 1024)), param_node("b", (4096,))
    group = group_of(make_node("gelu", [make_node("linear", [x, w, b])], approximate="none"), inputs=(x,),
                     params=(w, b))
    assert group.config.kernel == "tf32x3"
    source = render(group)
    (_, _, x_cache), (_, _, w_cache) = source.spec.operands[:2]
    assert x_cache is None
    assert w_cache == (3 * 4096 * 1024 * 4, 4096 * 1024 // 4096, (SPLIT_FORMAT, 1, 4096, 1024, 1, 2))
    _, entry = _launcher_and_entry(source)
    assert "float* x = reinterpret_cast<float*>(static_cast<char*>(workspace) + 0);" in entry
    assert "float* y = static_cast<float*>(cached[1].data);" in entry
    assert f"kw_workspace_{source.name}() {{ return {3 * 2048 * 1024 * 4}; }}" in entry
    assert "_finish(static_cast<float*>(out[0]), static_cast<float*>(out[0]), 4096, " \
           "static_cast<const float*>(in[2].data)" in entry
    assert "cutlass" not in source.text and "cublas_v2.h" not in source.text
    plain = group_of(make_node("linear", [x, w]), inputs=(x,), params=(w,))
    assert "_finish(" not in _launcher_and_entry(render(plain))[1]


def test_tf32x3_pads_an_odd_depth_and_width_to_multiples_of_4():
    """K = 4099: each of the split's three blocks is 4100 deep (zero pad), so the GEMM's depth 3K' and
    leading dimensions stay 16-byte aligned for cuBLAS's TF32 kernels (unaligned, 3.98 ms vs ATen's
    2.83 ms on an H100); the workspace and the kept weight split are sized for it. N = 4093: the product
    goes to the workspace in rows of 4096, which the epilogue reads (K padded alone still ran 4.3 ms), and
    cuBLAS computes all 4096 columns (an N of 4093 took an Ampere kernel for 4-byte alignment): the weight's
    split has the slack the 3 extra columns read."""
    x, w, b = input_node("x", 0, (4096, 4099)), param_node("w", (4093, 4099)), param_node("b", (4093,))
    group = group_of(make_node("relu", [make_node("linear", [x, w, b])]), inputs=(x,), params=(w, b))
    assert group.config.kernel == "tf32x3"
    source = render(group)
    _, entry = _launcher_and_entry(source)
    assert "kw_x3::gemm(x, 0, 0, y, 1, 0, product, 4096, 1, 4096, 4096, 12300," in entry
    assert ", 1, 4096, 4099, 1, 1, 1, x, cached[0].words" in entry    # batch, rows, cols, along, pad, smalls
    at = 3 * 4096 * 4100 * 4
    assert f"float* product = reinterpret_cast<float*>(static_cast<char*>(workspace) + {at});" in entry
    assert f"kw_workspace_{source.name}() {{ return {at + 4096 * 4096 * 4}; }}" in entry
    assert "_finish(static_cast<float*>(out[0]), product, 4096, " in entry
    (_, _, w_cache) = source.spec.operands[1]
    assert w_cache[0] == 3 * 4096 * 4100 * 4 and w_cache[1] == -(-4093 * 4099 // 4096)


def test_tf32x3_pads_the_rows_of_a_split_stored_depth_major():
    """A row-major B of N = 4099 (stored [K, N]) and a column-major A of M = 4093 (stored [K, M]): their
    splits are stored [3K', rows] with rows padded to a multiple of 4 (kw_x3::row_pitch), so every row is
    16-byte aligned for cuBLAS's TF32 kernels (rows 4099 apart: 2.17 ms against ATen's FP32 1.56 ms, H100);
    cuBLAS computes the product's padded N' columns (ld 4100) from the pad, which the epilogue never reads."""
    a, b = input_node("a", 0, (2053, 4093)), input_node("b", 1, (2053, 4099))
    group = group_of(make_node("mm", [make_node("permute", [a], dims=(1, 0)), b]), inputs=(a, b))
    view = describe(group)
    assert group.config.kernel == "tf32x3" and view.a_col_major and not view.b_col_major
    _, entry = _launcher_and_entry(render(group))
    assert "kw_x3::gemm(x, 1, 0, y, 0, 0, product, 4100, 1, 4093, 4100, 6168," in entry
    a_split, b_split = 3 * 2056 * 4096 * 4, 3 * 2056 * 4100 * 4       # K' = 2056; M' = 4096, N' = 4100
    assert "float* y = reinterpret_cast<float*>(static_cast<char*>(workspace) + " f"{a_split});" in entry
    b_split = -(-b_split // 256) * 256               # the workspace's parts start 256-byte aligned
    assert f"+ {a_split + b_split});" in entry        # the padded product follows both splits
    assert "_finish(static_cast<float*>(out[0]), product, 4100, " in entry


def test_tf32x3_alternatives_cut_the_big_block_finer(monkeypatch):
    """The GPU measures the planner's chunks against twice and four times as many (each chunk of at least
    TF32X3_MIN_CHUNK): one instantiation, other split_k arguments; other kernels have none. (Off Hopper:
    the SM90 alternative is the next test's.)"""
    monkeypatch.setattr(fuse_gemm, "hopper_gpu", lambda: False)
    a, b = input_node("a", 0, (128, 512, 1024)), input_node("b", 1, (128, 1024, 768))
    group = group_of(make_node("bmm", [a, b]), inputs=(a, b))
    assert group.config.kernel == "tf32x3" and group.config.split_k == 1
    others = fuse_gemm.launch_alternatives(group)
    assert [g.config.split_k for g in others] == [2, 4]
    assert all(g.nodes == group.nodes and g.config._replace(split_k=1) == group.config for g in others)
    sources = [render(g) for g in (group, *others)]
    assert len({s.name for s in sources}) == 3
    assert len({_launcher_and_entry(s)[0] for s in sources}) == 1
    a, b = input_node("a", 0, (4096, 300)), input_node("b", 1, (300, 4096))
    shallow = group_of(make_node("mm", [a, b]), inputs=(a, b))
    shallow = dataclasses.replace(shallow, config=GemmConfig(kernel="tf32x3", split_k=1))
    assert [g.config.split_k for g in fuse_gemm.launch_alternatives(shallow)] == [2]
    assert fuse_gemm.launch_alternatives(epilogue_group()) == []      # CUTLASS: none


def test_sm90x3_is_an_alternative_on_hopper_with_one_launcher_for_every_gemm_of_an_orientation(monkeypatch):
    """On Hopper the in-kernel split is measured too. Its launcher (CUTLASS, compiled apart) holds no
    epilogue and no size, so every GEMM of one orientation shares it (`fuse.gemm.sm90x3_roles`); each entry
    reads its operands in place where the kernel can, else copies them K-major into the workspace, then
    runs the epilogue pass in place."""
    monkeypatch.setattr(fuse_gemm, "hopper_gpu", lambda: True)
    a, b = input_node("a", 0, (128, 512, 1024)), input_node("b", 1, (128, 1024, 768))
    bmm = group_of(make_node("bmm", [a, b]), inputs=(a, b))
    others = fuse_gemm.launch_alternatives(bmm)
    assert [g.config.kernel for g in others] == ["tf32x3", "tf32x3", "sm90x3", "sm90x3"]
    assert others[-2].config.block == others[-1].config.block == fuse_gemm.SM90X3_WIDE
    labels = [fuse_gemm.launch_label(g) for g in others[-2:]]
    assert "swapped" not in labels[0] and "swapped (B split in registers)" in labels[1]
    # the SM80 kernel's products (small K, a narrow output) too, 64-wide tiles for an output at most 64 wide
    # or one whose 128-wide tiles would leave SMs idle (1000 x 1001: 64 tiles); not a product too small to
    # repay a CUTLASS library's build
    for (m, k, n), planned, tile in (((65536, 48, 24576), "cutlass", fuse_gemm.SM90X3_WIDE),
                                     ((40000, 2000, 40), "cutlass", fuse_gemm.SM90X3_NARROW),
                                     ((1000, 1004, 1001), "cutlass", fuse_gemm.SM90X3_NARROW),
                                     ((1536, 1004, 1536), "tf32x3", fuse_gemm.SM90X3_WIDE)):  # 144 tiles
        a, b = input_node("a", 0, (m, k)), input_node("b", 1, (k, n))
        group = group_of(make_node("mm", [a, b]), inputs=(a, b))
        assert group.config.kernel == planned
        other = [g for g in fuse_gemm.launch_alternatives(group) if g.config.kernel == "sm90x3"][0]
        assert fuse_gemm.sm90x3_tile(other.config) == tile, (m, k, n)
    assert fuse_gemm.launch_alternatives(epilogue_group()) == []           # 4 MFLOP
    x, w, bias = input_node("x", 0, (4096, 4099)), param_node("w", (4093, 4099)), param_node("b", (4093,))
    linear = group_of(make_node("relu", [make_node("linear", [x, w, bias])]), inputs=(x,), params=(w, bias))
    x2, w2 = input_node("x", 0, (512, 2048)), param_node("w", (1024, 2048))
    linear2 = group_of(make_node("linear", [x2, w2]), inputs=(x2,), params=(w2,))
    sm90x3 = GemmConfig(kernel="sm90x3")
    assert others[-1].config.swap and not others[-2].config.swap   # bmm: the swapped launch measured too
    swapped, odd, plain = (render(dataclasses.replace(g, config=c)) for g, c in (
        (bmm, others[-1].config), (linear, sm90x3), (linear2, sm90x3)))
    assert odd.launcher is not None and odd.launcher == plain.launcher
    assert "<cutlass/" in odd.launcher.cuda and "<cutlass/" not in odd.cuda
    wide = odd.launcher.cuda
    assert "Shape<_128, Int<128>, _32>" in wide and "kStages = 4;" in wide and "GMMA::Major::K," in wide
    narrow = render(dataclasses.replace(linear2, config=GemmConfig(kernel="sm90x3",
                                                                   block=fuse_gemm.SM90X3_NARROW)))
    assert narrow.launcher.name != plain.launcher.name      # a library of its own, for every narrow GEMM
    assert "Shape<_128, Int<64>, _32>" in narrow.launcher.cuda and "kStages = 6;" in narrow.launcher.cuda
    # bmm, B stored [K, N], swapped (B split in registers, read MN-major; D written column-major): a
    # library of its own; both operands in place (16-byte aligned rows, the runtime copies other views), no
    # copy, no epilogue pass. Unswapped, B is copied K-major.
    assert render(dataclasses.replace(bmm, config=sm90x3)).cuda.count("kw_kmajor::kmajor(in") == 0
    assert render(dataclasses.replace(bmm, config=sm90x3)).cuda.count("kw_kmajor::kmajor(") == 1
    assert swapped.launcher.name != plain.launcher.name
    launcher = swapped.launcher.cuda
    assert "GMMA::Major::MN," in launcher and "layout::ColumnMajor, Alignment" in launcher
    text = swapped.cuda
    assert "kw_kmajor::kmajor(" not in text and "_finish(" not in text
    assert [op[1] for op in swapped.spec.operands[:2]] == [(("reshape", 128, 512, 1024), ("matrix", 4)),
                                                          (("reshape", 128, 1024, 768), ("matrix", 4))]
    assert "ld_b = kw::row_stride(in[1], 768, 4)" in text and "ld_a = kw::row_stride(in[0], 1024, 4)" in text
    assert ("_gemm(b, ld_b, bs_b, a, ld_a, bs_a, static_cast<float*>(out[0]), 768, 393216LL, 768, 512, "
            "1024, 128, 1, scratch + 0, 65536, stream);") in text
    # linear, K = 4099: both operands copied with rows of 4100; bias + ReLU in place after the product
    assert odd.cuda.count("kw_kmajor::kmajor(") == 2
    assert "_finish(static_cast<float*>(out[0]), static_cast<float*>(out[0]), 4093, " in odd.cuda
    assert "kw_kmajor::kmajor(" not in plain.cuda


def test_sm90x3_roles_read_operands_in_place_where_the_kernel_can():
    """The kernel splits one operand in registers (any layout: MN-major in place where its rows are a
    multiple of 4) and reads the other with wgmma (K-major only); an odd K copies both. The swapped launch
    is a measured alternative where it reads more operands in place without more tile area."""
    def roles(m, k, n, a_col_major=False, b_col_major=False):
        a = input_node("a", 0, (k, m) if a_col_major else (m, k))
        b = input_node("b", 1, (n, k) if b_col_major else (k, n))
        a_op = make_node("permute", [a], dims=(1, 0)) if a_col_major else a
        b_op = make_node("permute", [b], dims=(1, 0)) if b_col_major else b
        graph = Graph(inputs=(a, b), params=(), outputs=(make_node("mm", [a_op, b_op]),))
        group, = match(graph, frozenset())
        view = describe(group)
        assert (view.a_col_major, view.b_col_major) == (a_col_major, b_col_major)
        return (tuple(fuse_gemm.sm90x3_roles(view)), tuple(fuse_gemm.sm90x3_roles(view, swap=True)),
                fuse_gemm.sm90x3_swap_saves_a_copy(view))

    # A . B: B copied, or swapped into registers in place
    assert roles(4096, 4096, 4096) == ((False, "K", False, True), (True, "MN", False, False), True)
    assert roles(1024, 8192, 8192)[2] and roles(4096, 4096, 4096, b_col_major=True) == (      # A . B^T
        (False, "K", False, False), (True, "K", False, False), False)
    assert roles(4096, 4096, 4096, a_col_major=True) == (                                    # A^T . B
        (False, "MN", False, True), (True, "MN", True, False), False)
    assert roles(4096, 4096, 4096, True, True)[0] == (False, "MN", False, False)             # A^T . B^T
    assert roles(4096, 4096, 4094)[2] is False                       # B's rows not a multiple of 4
    assert roles(4094, 4096, 4096, a_col_major=True) == (
        (False, "K", True, True), (True, "MN", True, False), True)
    assert roles(4096, 4098, 4096) == ((False, "K", True, True), (True, "K", True, True), False)   # K odd
    assert roles(40000, 2000, 40)[2] is False     # swapped it would tile 128 rows of its 40


def test_sm90x3_takes_its_tiles_in_strips_as_a_second_launch_where_one_product_has_many_waves(monkeypatch):
    """A product of at least SM90X3_STRIP_WAVES waves of the SM90 kernel's tiles is measured a second time
    with its tiles taken in strips (the scheduler's swizzle, a launcher argument: the same library); batches
    do not count (a bmm of small products keeps its operands in L2 and lost with strips)."""
    monkeypatch.setattr(fuse_gemm, "hopper_gpu", lambda: True)

    def sm90(m, k, n, batch=1):
        shape = (batch, m, k) if batch > 1 else (m, k)
        a, b = input_node("a", 0, shape), input_node("b", 1, (batch, k, n) if batch > 1 else (k, n))
        group = group_of(make_node("bmm" if batch > 1 else "mm", [a, b]), inputs=(a, b))
        return [g for g in fuse_gemm.launch_alternatives(group) if g.config.kernel == "sm90x3"]

    plain, strips, swapped = sm90(8192, 8192, 8192)         # 4096 tiles: 31 waves; B copied unswapped
    assert swapped.config == plain.config._replace(swap=True)
    assert (plain.config.strips, strips.config.strips) == (1, fuse_gemm.SM90X3_STRIPS)
    assert strips.config._replace(strips=1) == plain.config
    assert "tiles in strips of 8" in fuse_gemm.launch_label(strips)
    sources = [render(g) for g in (plain, strips)]
    assert sources[0].launcher == sources[1].launcher and sources[0].name != sources[1].name
    assert "8192, 1, 8, scratch + " in sources[1].cuda and "8192, 1, 1, scratch + " in sources[0].cuda
    assert [g.config.strips for g in sm90(4096, 4096, 4096)] == [1, 1]                # 1024 tiles
    assert [g.config.strips for g in sm90(512, 1024, 768, batch=128)] == [1, 1]       # 24 tiles a batch


def test_tf32x3_source_compiles():
    """Light (no CUTLASS, no cuBLAS header): the split, epilogue and cuBLAS-lookup launcher."""
    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    group = dataclasses.replace(epilogue_group(), config=GemmConfig(kernel="tf32x3"))
    _compile(render(group).text, [])


def test_tf32x3_gemms_of_one_model_share_one_split():
    """The split kernels and the cuBLAS call do not depend on the GEMM (kw_gemm_x3.cuh): a library with two
    3xTF32 GEMMs compiles them once (ptxas spent ~26 s on each copy), each GEMM adding only its epilogue."""
    from kernelwright.codegen.assemble import assemble

    x, w, b = input_node("x", 0, (2048, 1024)), param_node("w", (4096, 1024)), param_node("b", (4096,))
    first = group_of(make_node("gelu", [make_node("linear", [x, w, b])], approximate="none"), inputs=(x,),
                     params=(w, b))
    second = group_of(make_node("relu", [make_node("linear", [x, w, b])]), inputs=(x,), params=(w, b))
    sources = [render(first), render(second)]
    assert all(s.config.kernel == "tf32x3" for s in (first, second)) and sources[0].name != sources[1].name
    text = assemble(sources).cuda_text
    assert text.count("namespace kw_x3 {") == 1
    assert text.count("__launch_bounds__(kThreads) split_kernel(") == 1
    assert all("split_kernel" not in s.text and "kw_x3::split_matrix(" in s.text for s in sources)
    if nvcc_path() is not None:
        _compile(text, [])
