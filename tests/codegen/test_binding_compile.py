"""The C++ bindings that manage state compile on the host as `load_inline` builds them (g++, torch's headers;
syntax only, no GPU): the 3xTF32 binding's parameter-split cache (fingerprints, events, allocator stream
records) and a split-row reduction's per-call workspace. The CUDA sides have their nvcc tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from pool_cases import CASES as POOL_CASES
from reduction_cases import CASES
from torch.utils.cpp_extension import include_paths

from kernelwright.codegen.binding import assemble
from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import input_node, make_node, param_node

CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"


def tf32x3_linear():
    x, w, b = input_node("x", 0, (4096, 1024)), param_node("w", (1024, 1024)), param_node("b", (1024,))
    graph = Graph(inputs=(x,), params=(w, b), outputs=(make_node("linear", [x, w, b]),))
    (group,) = plan_fusion(graph).groups
    assert group.config.kernel == "tf32x3"
    return group


def split_row_reduction():
    (group,) = [g for g in plan_fusion(CASES["mean_all_split"]()).groups if g.family == "reduction"]
    assert group.config[0].split
    return group


@pytest.mark.skipif(shutil.which("g++") is None or not (CUDA_INCLUDE / "cuda_runtime_api.h").exists(),
                    reason="needs g++ and the CUDA runtime headers")
def test_stateful_bindings_compile_on_the_host(tmp_path):
    kernels = [render_group(tf32x3_linear()), render_group(split_row_reduction())]
    assert "kw_tf32x3::cached_split(" in kernels[0].cpp and "_workspace()" in kernels[1].cpp
    source = tmp_path / "bindings.cpp"
    source.write_text(assemble(kernels).cpp_text)
    # A CPU build of torch ships c10/cuda without the header its CMake generates; an empty one stands in.
    shim = tmp_path / "shim" / "c10" / "cuda" / "impl"
    shim.mkdir(parents=True)
    (shim / "cuda_cmake_macros.h").write_text("#pragma once\n")
    includes = [*include_paths(), sysconfig.get_paths()["include"], str(CUDA_INCLUDE), str(tmp_path / "shim")]
    command = ["g++", "-std=c++17", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=kw_check",
               *(f"-I{path}" for path in includes), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


# A namespace-scope `__device__` variable is shared by every launch of the kernel on the device, whatever
# their streams: scratch must come from the launch's workspace instead (issue 18 #7).
DEVICE_GLOBAL = re.compile(r"^\s*(static\s+)?__device__\s+(?!__forceinline__|inline|static)[^(;{]*;",
                           re.MULTILINE)


def test_no_kernel_keeps_device_globals():
    x = input_node("x", 0, (33, 1000))
    graphs = [build() for build in (*CASES.values(), *POOL_CASES.values())]
    graphs.append(Graph((x,), (), (make_node("gelu", [make_node("exp", [x])], approximate="none"),)))
    groups = [g for graph in graphs for g in plan_fusion(graph).groups] + [tf32x3_linear()]
    assert {g.family for g in groups} >= {"pointwise", "reduction", "scan", "pool", "gemm"}
    for group in groups:
        kernel = render_group(group)
        found = DEVICE_GLOBAL.search(kernel.cuda)
        assert found is None, f"{kernel.name}: {found[0]}"
