"""Launchers compiled apart: a CUTLASS launcher (10-40 s of nvcc) is a library of its own that every model
calling it links to, so a second model with the same launcher compiles only its small translation unit.

CPU: the split (the model's unit declares the launcher's functions and holds no CUTLASS), the emitted
file's build call, and, with nvcc and the CUTLASS headers, two model libraries linked to one launcher
library and loaded, their entries resolved (the declarations match the definitions). The GPU runs the same
through the recipe (tests/codegen/test_conv_gpu.py, test_gemm_gpu.py's emitted files)."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from test_gemm_render import group_of

import kernelwright.fuse.gemm as fuse_gemm
from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import TORCH_NVCC_FLAGS, extension_name, recipe
from kernelwright.codegen.gemm import render
from kernelwright.codegen.kernel import launcher_declarations
from kernelwright.emit.module import _build_block, _sources_block
from kernelwright.environment import cutlass_include_dir, nvcc_path
from kernelwright.ir.ops import input_node, make_node, param_node


@pytest.fixture
def cutlass_headers(monkeypatch):
    """Rendering does not read the headers (the link test needs real ones, and skips without them)."""
    if cutlass_include_dir() is None:
        monkeypatch.setattr(fuse_gemm, "cutlass_include_dir", lambda: Path("/cutlass/include"))


def _two_kernels_one_launcher():
    """A split-K GEMM + bias + ReLU at split 2 and 5: one CUTLASS instantiation, two entries."""
    a, b = input_node("a", 0, (128, 4096)), input_node("b", 1, (4096, 4096))
    bias = param_node("bias", (4096,))
    group = group_of(make_node("relu", [make_node("add", [make_node("mm", [a, b]), bias])]), inputs=(a, b),
                     params=(bias,))
    first = render(group)
    second = render(dataclasses.replace(group, config=group.config._replace(split_k=5)))
    return first, second


def test_a_cutlass_launcher_is_compiled_apart(cutlass_headers):
    first, second = _two_kernels_one_launcher()
    assert first.launcher is not None and first.launcher == second.launcher and first.name != second.name
    for kernel in (first, second):
        sources = assemble([kernel])
        assert "cutlass" not in "".join(sources.cuda_sources)           # the model's unit: no CUTLASS
        assert [name for name, _ in sources.launchers] == [kernel.launcher.name]
        (_, text), = sources.launchers
        assert "#include <cutlass/" in text and 'include "' not in text   # our headers inlined
        assert f"{kernel.launcher.name}_launch(" in kernel.cuda          # declared, then called
    both = assemble([first, second])
    assert len(both.launchers) == 1 and "#include <cutlass/" in both.cuda_text
    # the model's name hashes its launcher's text too; the build call passes it
    assert extension_name(both) != extension_name(dataclasses.replace(both, launchers=()))
    block = _build_block(both)
    assert f'("{first.launcher.name}", _KW_LAUNCHER_{first.launcher.name})' in block
    namespace = {"torch": types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True))}
    built = []
    namespace["_kw_build"] = lambda *args: built.append(args) or (None, 0.0)
    exec(compile(_sources_block(both) + "\n" + block, "emitted", "exec"), namespace)   # noqa: S102
    (name, cuda, specs, runtime, root, launchers), = built
    assert launchers == list(both.launchers) and cuda == both.cuda_sources and root is None


def test_declarations_are_the_definitions_at_the_start_of_a_line():
    cuda = ("namespace kw_x_ns { int helper(int a) { return a; } }\n"
            "size_t kw_x_workspace(int batch,\n    int m) {\n  return 0;\n}\n"
            "static int kw_x_hidden(int a) { return a; }\n"
            "const char* kw_x_launch(const float* a, void* workspace, cudaStream_t stream) {\n"
            "  return 0;\n}\n")
    assert launcher_declarations(cuda, "kw_x") == (
        "size_t kw_x_workspace(int batch, int m);\n"
        "const char* kw_x_launch(const float* a, void* workspace, cudaStream_t stream);\n")
    with pytest.raises(ValueError, match="no exported function"):
        launcher_declarations("int other(int a) { return a; }\n", "kw_x")


def _two_convs_one_launcher():
    """Two channels-last 3x3 convs + bias of other sizes and C (one padded to 4): one launcher."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "fuse"))
    from test_conv_match import conv_chain

    from kernelwright.codegen.conv import render as render_conv
    from kernelwright.fuse.plan import make_group

    kernels = []
    for c in (16, 3):
        graph = conv_chain(c=c)
        kernels.append(render_conv(make_group(graph, "conv", [n for n in graph.nodes() if not n.is_leaf])))
    return kernels


def _two_sm90x3_kernels():
    """The SM90 3xTF32 GEMM: one launcher for every GEMM of one orientation (no epilogue, no size in it); a
    bmm whose B is made K-major (383 columns: TMA cannot read it in place as the register operand), and a
    Linear of odd K with bias + ReLU (both operands copied, the epilogue pass after)."""
    a, b = input_node("a", 0, (8, 256, 512)), input_node("b", 1, (8, 512, 383))
    bmm = group_of(make_node("bmm", [a, b]), inputs=(a, b))
    x, w, bias = input_node("x", 0, (1024, 1027)), param_node("w", (768, 1027)), param_node("bias", (768,))
    linear = group_of(make_node("relu", [make_node("linear", [x, w, bias])]), inputs=(x,), params=(w, bias))
    sm90x3 = fuse_gemm.GemmConfig(kernel="sm90x3")
    return tuple(render(dataclasses.replace(g, config=sm90x3)) for g in (bmm, linear))


@pytest.mark.parametrize("family", ["gemm", "conv", "sm90x3"])
def test_two_models_link_to_one_launcher_library(tmp_path, family):
    """The slow one (~30-40 s of nvcc each): the launcher's library once, two models' libraries linked to
    it by path, both loaded and their entries found."""
    include = cutlass_include_dir()
    if nvcc_path() is None or include is None or shutil.which("readelf") is None:
        pytest.skip("needs nvcc, readelf and the CUTLASS headers")
    cudart = _shared_cudart()
    if cudart is None:
        pytest.skip("no shared CUDA runtime beside nvcc")
    first, second = {"gemm": _two_kernels_one_launcher, "conv": _two_convs_one_launcher,
                     "sm90x3": _two_sm90x3_kernels}[family]()
    assert first.launcher == second.launcher and first.name != second.name
    flags = ["-O3", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a", *TORCH_NVCC_FLAGS, "-shared",
             "-cudart", "shared"]
    (launcher_name, launcher_text), = assemble([first]).launchers
    launcher = tmp_path / f"{launcher_name}.so"
    includes = [f"-I{path}" for path in recipe()["_kw_cutlass_paths"](str(include))]
    _nvcc(tmp_path / "launcher.cu", launcher_text, [*flags, *includes], launcher)
    ctypes.CDLL(str(cudart), mode=ctypes.RTLD_GLOBAL)
    for kernel in (first, second):
        library = tmp_path / f"{kernel.name}.so"
        _nvcc(tmp_path / f"{kernel.name}.cu", "\n".join(assemble([kernel]).cuda_sources), flags, library,
              [str(launcher)])
        needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
        assert str(launcher) in needed                           # found by its path, whatever the cwd
        loaded = ctypes.CDLL(str(library))
        assert getattr(loaded, f"kw_entry_{kernel.name}") and getattr(loaded, f"kw_workspace_{kernel.name}")


def _shared_cudart() -> Path | None:
    """The CUDA runtime library of the toolkit nvcc belongs to (nvcc may be a wrapper script elsewhere)."""
    dry = subprocess.run([nvcc_path(), "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"],
                         capture_output=True, text=True).stderr
    here = next((line.split("=", 1)[1] for line in dry.splitlines() if "_HERE_=" in line), None)
    if here is None:
        return None
    found = sorted(p for lib in ("lib64", "lib") for p in (Path(here).parent / lib).glob("libcudart.so*"))
    return found[0] if found else None


def _nvcc(source: Path, text: str, flags: list[str], output: Path, link: list[str] = ()) -> None:
    source.write_text(text)
    done = subprocess.run([nvcc_path(), *flags, str(source), "-o", str(output), *link], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
