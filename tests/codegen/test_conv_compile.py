"""The conv family's CUDA through nvcc as the build recipe compiles it (the slow one: ~35 s): it compiles for
sm_90a, no wgmma is serialized (ptxas warning C7510, what CUTLASS's device asserts cause without
-DNDEBUG), and no launcher state is one per process (GNU_UNIQUE statics)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_gemm_render import assert_no_shared_statics

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import RECIPE_NVCC_FLAGS, TORCH_NVCC_FLAGS, recipe
from kernelwright.codegen.conv import render
from kernelwright.environment import cutlass_include_dir, nvcc_path
from kernelwright.fuse.plan import make_group

sys.path.insert(0, str(Path(__file__).parents[1] / "fuse"))
from test_conv_match import bn_chain, conv_chain, convt_chain  # noqa: E402


def test_conv_source_compiles_without_serialized_wgmma():
    if nvcc_path() is None or cutlass_include_dir() is None:
        pytest.skip("needs nvcc and the CUTLASS headers")
    from kernelwright.ir.ops import input_node, make_node

    # three input channels (the padding entry) and an epilogue tensor of each broadcast kind
    residual, pixel = input_node("residual", 1, (8, 34, 34, 128)), input_node("pixel", 2, (8, 34, 34, 1))

    def epilogue(y, extra):
        return make_node("tanh", [make_node("mul", [make_node("add", [y, extra[0]]), extra[1]])])

    graph = conv_chain(c=3, epilogue=epilogue, extra=(residual, pixel))
    _compiles(render(make_group(graph, "conv", [n for n in graph.nodes() if not n.is_leaf])))


@pytest.mark.parametrize("form", ["pooled", "channel_softmax", "statistics", "channel_logsumexp"])
def test_other_stores_compile_without_serialized_wgmma(form, monkeypatch):
    """The global-pool store (tile sums per image and channel, then their sum per image), the NCHW store
    after a softmax over the channels of the staged tile, the NHWC store with a BatchNorm's statistics
    (tile moments, then their two combines), and a logsumexp over the channels stored a value a pixel."""
    if nvcc_path() is None or cutlass_include_dir() is None:
        pytest.skip("needs nvcc and the CUTLASS headers")
    from kernelwright.ir.ops import make_node

    if form == "statistics":
        import kernelwright.fuse.conv as fuse_conv
        from kernelwright.fuse import plan_fusion

        monkeypatch.setattr(fuse_conv, "cutlass_include_dir", lambda: Path("/cutlass/include"))
        monkeypatch.setattr(fuse_conv, "hopper_gpu", lambda: True)
        plan = plan_fusion(bn_chain())
        _compiles(render(next(g for g in plan.groups if g.family == "conv")))
        return
    if form == "pooled":
        graph = conv_chain(epilogue=lambda y, extra: make_node("gelu", [y], approximate="none"), pool="mean")
    elif form == "channel_logsumexp":
        graph = conv_chain(k=40, to_nchw=False, epilogue=lambda y, extra: make_node(
            "logsumexp", [y], dims=(3,), keepdim=False))
    else:
        graph = conv_chain(epilogue=lambda y, extra: make_node("softmax", [y], dim=3))
    _compiles(render(make_group(graph, "conv", [n for n in graph.nodes() if not n.is_leaf])))


@pytest.mark.parametrize("form", ["nchw_softmax", "nchw_residual", "reduced_min"])
def test_transposed_conv_compiles_without_serialized_wgmma(form, monkeypatch):
    """A transposed conv's NCHW store of interleaved rows: after a softmax over each W phase's channels and
    pointwise ops of it (level2/27), and with the epilogue applied by the store (an NCHW residual: level2/10;
    three input channels: x padded, the phase weights' channels too); and its min over the channels, then
    GELU, stored a value a pixel (level2/26)."""
    if nvcc_path() is None or cutlass_include_dir() is None:
        pytest.skip("needs nvcc and the CUTLASS headers")
    import kernelwright.fuse.conv as fuse_conv
    from kernelwright.fuse import plan_fusion
    from kernelwright.ir.ops import const_node, input_node, make_node

    monkeypatch.setattr(fuse_conv, "hopper_gpu", lambda: True)
    if form == "nchw_residual":
        residual = input_node("add_input", 1, (64, 64, 64, 64))
        nhwc = make_node("permute", [residual], dims=(0, 2, 3, 1))
        graph = convt_chain(n=64, c=3, extra=(residual,),
                            after=lambda y: make_node("hardswish", [make_node("add", [y, nhwc])]))
    elif form == "reduced_min":
        graph = convt_chain(k=32, to_nchw=False, after=lambda y: make_node(
            "gelu", [make_node("amin", [y], dims=(3,), keepdim=True)], approximate="none"))
    else:
        graph = convt_chain(kernel=(4, 4), output_padding=(0, 0), after=lambda y: make_node(
            "sigmoid", [make_node("mul", [make_node("softmax", [y], dim=3), const_node(3.0)])]))
    _compiles(render(next(g for g in plan_fusion(graph).groups if g.family == "conv")))


def _compiles(kernel) -> None:
    includes = [f"-I{path}" for path in recipe()["_kw_cutlass_paths"](str(cutlass_include_dir()))]
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / "kernels.cu"
        source.write_text(assemble([kernel]).cuda_text)
        command = [nvcc_path(), *RECIPE_NVCC_FLAGS, "-gencode=arch=compute_90a,code=sm_90a",
                   *TORCH_NVCC_FLAGS,
                   *includes, "-Xptxas", "-v", "-c", str(source), "-o", str(source.with_suffix(".o"))]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-4000:]
        assert "C7510" not in done.stderr, "ptxas serialized the wgmma instructions"
        assert_no_shared_statics(source.with_suffix(".o"))


@pytest.mark.parametrize("form", ["conv3d_instance_norm", "convt3d_nchw"])
def test_3d_convs_compile_without_serialized_wgmma(form, monkeypatch):
    """The 3-D instantiation (TMA im2col over NDHWC): a Conv3d's InstanceNorm statistics per image, and a
    ConvTranspose3d's phases along D and H stored NCDHW."""
    if nvcc_path() is None or cutlass_include_dir() is None:
        pytest.skip("needs nvcc and the CUTLASS headers")
    import kernelwright.fuse.conv as fuse_conv
    from kernelwright.fuse import plan_fusion
    from kernelwright.ir.ops import make_node

    monkeypatch.setattr(fuse_conv, "hopper_gpu", lambda: True)
    if form == "conv3d_instance_norm":
        graph = bn_chain(n=4, d=8, h=16, w=16, c=16, k=32, norm="instance")
    else:
        graph = convt_chain(n=2, d=8, h=16, w=16, c=32, k=32, kernel=(3, 3, 3), stride=(2, 2, 2),
                            padding=(1, 1, 1), output_padding=(1, 1, 1),
                            after=lambda y: make_node("relu", [y]))
    _compiles(render(next(g for g in plan_fusion(graph).groups if g.family == "conv")))
