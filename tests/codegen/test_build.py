"""Assembling one extension from kernel sources, naming it, the build recipe the emitted files carry, and
the nvcc compile check."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import types

import pytest
import torch

from kernelwright.codegen.assemble import HEADER_DIR, RUNTIME_SOURCE, assemble
from kernelwright.codegen.build import BUILD_SOURCE, extension_name, nvcc_check, recipe
from kernelwright.codegen.kernel import KernelSource, KernelSpec
from kernelwright.environment import nvcc_path


def kernel(name: str, body: str = "") -> KernelSource:
    cuda = f'#include "kw_common.cuh"\n__global__ void {name}_k(float* p) {{ {body} }}\n'
    spec = KernelSpec((("float32", (4,), "x"),), ((0, (), None),), (("float32", (4,)),))
    return KernelSource(name, cuda, spec, f"IR of {name}")


def test_headers_are_inlined_once_and_torch_stays_out_of_the_cuda_unit():
    sources = assemble([kernel("a"), kernel("b")])
    text = sources.cuda_text
    assert text.count("namespace kw {") == 1
    assert '#include "kw_common.cuh"' not in text and "#include <torch" not in text
    assert "#include <ATen" not in text
    assert set(sources.specs) == {"a", "b"}


def test_the_runtime_and_the_kernels_inline_one_entry_declaration():
    """kw_runtime.cpp (ATen side) and the kernels (kw_common.cuh) both inline kw_entry.h, the ABI between
    the two libraries: one declaration, self-contained texts (no include of ours left in either)."""
    entry = (HEADER_DIR / "kw_entry.h").read_text().replace("#pragma once\n", "")
    headers = assemble([kernel("a")]).headers
    for text in (RUNTIME_SOURCE, headers):
        assert entry.strip() in text and text.count("struct KwOperand {") == 1
        assert not re.search(r'#include\s+"', text)


def test_sources_are_normalized_exactly_as_emitted():
    for text in assemble([kernel("a")]).cuda_sources:
        assert text.startswith("\n") and text.endswith("\n") and not text.startswith("\n\n")


def test_extension_name_is_a_hash_of_the_sources():
    a, b = assemble([kernel("a")]), assemble([kernel("a", "p[0] = 1;")])
    assert extension_name(a) == extension_name(assemble([kernel("a")]))
    assert extension_name(a) != extension_name(b)
    assert extension_name(a).startswith("kw_") and extension_name(a).isidentifier()


def test_unknown_header_is_reported():
    bad = KernelSource("x", '#include "nope.cuh"\n', kernel("x").spec, "")
    with pytest.raises(FileNotFoundError, match="nope.cuh"):
        assemble([bad])


def test_build_recipe_needs_only_torch():
    namespace = {"torch": torch}
    exec(BUILD_SOURCE, namespace)
    assert callable(namespace["_kw_build"])
    assert "import kernelwright" not in BUILD_SOURCE and "from kernelwright" not in BUILD_SOURCE


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_nvcc_check_reports_the_first_error():
    broken = assemble([kernel("a", "p[0] = undefined_thing;")]).cuda_text
    check = nvcc_check(broken, ptxas_level=0)
    assert not check.ok and "undefined_thing" in check.log and check.seconds > 0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_kernels_call_the_runtime_launch_as_it_is_at_call_time(tmp_path):
    """Each kernel attribute finds its C entries in the library and calls the runtime module's `launch`
    looked up at every call: the judge counts calls by wrapping the module's functions and times after
    putting them back, so a binding made once would be timed with the counting wrapper."""
    library = tmp_path / "libk.so"
    (tmp_path / "k.c").write_text('const char* kw_entry_k(void) { return 0; }\n'
                                  'unsigned long kw_workspace_k(void) { return 0; }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "k.c"), "-o", str(library)], check=True)
    made = []

    class Kernel:
        def __init__(self, name, entry, workspace, inputs, operands, outputs):
            assert entry and workspace and entry != workspace
            made.append((name, inputs, operands, outputs))

    runtime = types.ModuleType("runtime")
    runtime.Kernel = Kernel
    runtime.launch = lambda kernel, tensors: ("raw", tensors)
    namespace = recipe()
    spec = kernel("k").spec.literal()
    kernels = namespace["_KwKernels"](runtime, ctypes.CDLL(str(library)), {"k": spec})
    assert made == [("k", *map(list, spec))]
    assert kernels.k([1]) == ("raw", [1])
    runtime.launch = lambda kernel, tensors: ("counted", tensors)    # what the judge's recorder does
    assert kernels.k([2]) == ("counted", [2])


def test_many_kernels_are_spread_over_units_each_with_the_headers(monkeypatch):
    """nvcc is one process a translation unit: a library of many kernels is compiled as several units side
    by side, about `per_unit` kernels each, at most one per CPU (and MAX_JOBS); each unit has the headers
    first and every kernel is in exactly one unit, kernels that share a launcher's include guard in one."""
    import os

    units = recipe()["_kw_units"]
    monkeypatch.delenv("MAX_JOBS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    sources = ["HEADERS", *[f"kernel {i}" for i in range(20)]]
    split = units(sources, 8)
    assert len(split) == 3 and all(unit.startswith("HEADERS\n") for unit in split)
    assert sorted(line for unit in split for line in unit.splitlines()[1:]) == sorted(sources[1:])
    assert len(units(sources[:9], 8)) == 1 and units(["ONE LAUNCHER"], 8) == ["ONE LAUNCHER"]
    # 12 kernels of one launcher (GEMVs of a deep MLP), 12 of another, 4 alone: 4 units, each launcher whole
    shared = [f"#ifndef KW_GEMM_A\n#define KW_GEMM_A\nA\n#endif\nentry a{i}" for i in range(12)]
    shared += [f"#ifndef KW_GEMM_B\n#define KW_GEMM_B\nB\n#endif\nentry b{i}" for i in range(12)]
    shared += [f"entry c{i}" for i in range(4)]
    split = units(["HEADERS", *shared], 8)
    assert len(split) == 4
    assert sum("entry a" in unit for unit in split) == 1 and sum("entry b" in unit for unit in split) == 1
    assert sorted(line for unit in split for line in unit.splitlines() if line.startswith("entry")) == \
        sorted(text.splitlines()[-1] for text in shared)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert len(units(sources, 8)) == 2   # never more units than CPUs to run them
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setenv("MAX_JOBS", "1")
    assert len(units(sources, 8)) == 1   # nor than ninja may run at once


@pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc")
def test_the_units_of_an_assembled_library_compile_and_link_together(tmp_path):
    """The headers hold only templates and inline functions and each kernel carries what it needs, so the
    units compile apart and link into one library (no symbol defined twice)."""
    from kernelwright.codegen.build import DEFAULT_CHECK_ARCH, RECIPE_NVCC_FLAGS, TORCH_NVCC_FLAGS

    def sharing(name: str) -> KernelSource:   # a launcher shared under one guard, as GEMVs share theirs
        body = '#include "kw_gemm_kmajor.cuh"\n#ifndef KW_GEMM_SHARED\n#define KW_GEMM_SHARED\n' \
               'extern "C" int kw_gemm_shared_launch() { return 1; }\n#endif\n'
        return KernelSource(name, body + kernel(name).cuda, kernel(name).spec, "")

    kernels = [kernel(name, "p[0] = kw::load(p + 1);") for name in "abcdefghij"]
    sources = assemble(kernels + [sharing(name) for name in "klmnopqrst"]).cuda_sources
    assert "kw_kmajor" in sources[0]   # a header with a __global__ function of its own
    split = recipe()["_kw_units"](sources, 4)
    objects = []
    for index, unit in enumerate(split):
        (tmp_path / f"u{index}.cu").write_text(unit)
        objects.append(str(tmp_path / f"u{index}.o"))
        subprocess.run([nvcc_path(), *RECIPE_NVCC_FLAGS, *TORCH_NVCC_FLAGS, "-Xptxas", "-O0",
                        f"-gencode=arch=compute_{DEFAULT_CHECK_ARCH},code=sm_{DEFAULT_CHECK_ARCH}",
                        "-c", str(tmp_path / f"u{index}.cu"), "-o", objects[-1]], check=True)
    subprocess.run([nvcc_path(), "-shared", *objects, "-o", str(tmp_path / "kernels.so")], check=True)
    assert (tmp_path / "kernels.so").is_file()


def test_the_recipe_finds_the_cutlass_wheel_from_many_threads(tmp_path, monkeypatch):
    """The recipe's CUTLASS lookup runs in build threads (a test builds 23 libraries at once; optimize builds
    launchers side by side): it scans sys.path itself, where importlib's find_spec from many threads at once
    once found no package in some of them and every such build failed for "no CUTLASS headers"."""
    from concurrent.futures import ThreadPoolExecutor

    site = tmp_path / "site"
    include = site / "cutlass_library" / "source" / "include"
    (include / "cutlass").mkdir(parents=True)
    (include / "cutlass" / "cutlass.h").write_text("")
    (site / "cutlass_library" / "__init__.py").write_text("raise ImportError('not to be imported')\n")
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    monkeypatch.syspath_prepend(str(site))
    find = recipe()["_kw_cutlass_include"]
    with ThreadPoolExecutor(32) as pool:
        found = set(pool.map(lambda _: find(), range(256)))
    assert found == {str(include)}
    # $CUTLASS_PATH first, where it holds the headers
    checkout = tmp_path / "checkout"
    (checkout / "include" / "cutlass").mkdir(parents=True)
    (checkout / "include" / "cutlass" / "cutlass.h").write_text("")
    monkeypatch.setenv("CUTLASS_PATH", str(checkout))
    assert find() == str(checkout / "include")
