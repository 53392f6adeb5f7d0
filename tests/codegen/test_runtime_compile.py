"""The shared runtime extension compiles on the host as `load_inline` builds it (g++, torch's headers; syntax
only, no GPU); every family's entry points match the spec the runtime follows; no kernel keeps state in a
device global. The CUDA sides have their nvcc tests."""

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

from kernelwright.codegen.assemble import RUNTIME_SOURCE
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
def test_the_runtime_compiles_on_the_host(tmp_path):
    source = tmp_path / "runtime.cpp"
    source.write_text(RUNTIME_SOURCE)
    # A CPU build of torch ships c10/cuda without the header its CMake generates; an empty one stands in.
    shim = tmp_path / "shim" / "c10" / "cuda" / "impl"
    shim.mkdir(parents=True)
    (shim / "cuda_cmake_macros.h").write_text("#pragma once\n")
    includes = [*include_paths(), sysconfig.get_paths()["include"], str(CUDA_INCLUDE), str(tmp_path / "shim")]
    command = ["g++", "-std=c++17", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=kw_check",
               *(f"-I{path}" for path in includes), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def all_groups():
    x = input_node("x", 0, (33, 1000))
    graphs = [build() for build in (*CASES.values(), *POOL_CASES.values())]
    graphs.append(Graph((x,), (), (make_node("gelu", [make_node("exp", [x])], approximate="none"),)))
    groups = [g for graph in graphs for g in plan_fusion(graph).groups]
    groups += [tf32x3_linear(), split_row_reduction()]
    assert {g.family for g in groups} >= {"pointwise", "reduction", "scan", "pool", "gemm"}
    return groups


STEPS = {"slice": 4, "select": 2, "permute": None, "reshape": None, "expand": None, "contiguous": 0,
         "inner_contiguous": 0, "matrix": 1, "dense": 1}


def test_every_kernel_has_both_entries_and_a_spec_of_its_group():
    """The entries the runtime looks up exist, and the spec says what the group takes and returns: its
    inputs' and outputs' dtypes and shapes, operands of real inputs through known steps."""
    for group in all_groups():
        kernel = render_group(group)
        assert f'extern "C" const char* kw_entry_{kernel.name}(' in kernel.cuda
        assert f'extern "C" size_t kw_workspace_{kernel.name}()' in kernel.cuda
        if group.family == "reduction" and group.config[0].split:
            assert f"kw_workspace_{kernel.name}() {{ return {kernel.name}_workspace(); }}" in kernel.cuda
        spec = kernel.spec
        assert [tuple(s) for _, s, _ in spec.inputs] == [tuple(n.shape) for n in group.inputs]
        assert [d for d, _, _ in spec.inputs] == [str(n.dtype).removeprefix("torch.") for n in group.inputs]
        labels = [label for _, _, label in spec.inputs]
        if group.family in ("pointwise", "gemm"):    # their kernel names hash the input names too
            assert all(label.endswith(n.name or n.op) for label, n in zip(labels, group.inputs, strict=True))
        else:
            assert labels == [""] * len(group.inputs)
        assert [tuple(s) for _, s in spec.outputs] == [tuple(n.shape) for n in group.outputs]
        for index, steps, cache in spec.operands:
            assert 0 <= index < len(group.inputs)
            for op, *args in steps:
                assert op in STEPS and STEPS[op] in (None, len(args)), (op, args)
                assert all(isinstance(a, int) for a in args)
            assert cache is None or (group.inputs[index].op == "param" and cache[0] > 0)
        # the spec is plain data: the emitted file holds it as a literal
        assert eval(repr(spec.literal())) == spec.literal()  # noqa: S307


# A namespace-scope `__device__` variable is shared by every launch of the kernel on the device, whatever
# their streams: scratch must come from the launch's workspace instead (issue 18 #7).
DEVICE_GLOBAL = re.compile(r"^\s*(static\s+)?__device__\s+(?!__forceinline__|inline|static)[^(;{]*;",
                           re.MULTILINE)


def test_no_kernel_keeps_device_globals():
    for group in all_groups():
        kernel = render_group(group)
        found = DEVICE_GLOBAL.search(kernel.cuda)
        assert found is None, f"{kernel.name}: {found[0]}"


def test_equal_groups_over_differently_named_inputs_share_one_kernel():
    """A network's repeated blocks (every BatchNorm of a ResNet stage) plan equal groups over inputs of
    different names: they render one kernel with one spec, so the extension defines it once."""
    from kernelwright.codegen.assemble import assemble

    kernels = []
    for name in ("a", "b"):
        x = input_node(name, 0, (32, 1000))
        (group,) = plan_fusion(Graph((x,), (), (make_node("softmax", [x], dim=1),))).groups
        kernels.append(render_group(group))
    assert kernels[0].name == kernels[1].name and kernels[0].spec == kernels[1].spec
    assert len(assemble(kernels).kernels) == 1
