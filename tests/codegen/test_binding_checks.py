"""The bindings of the pointwise, reduction and scan families check what they are given before anything
touches it: the number of inputs, then every input as passed (CUDA device, dtype, shape, through the
prelude's `kw_check_input`), and only then contiguous copies, views, the device guard, allocations and the
launch. A wrong tensor is a RuntimeError naming the input, never a launch on the wrong memory."""

from __future__ import annotations

import re

import pytest
from reduction_cases import CASES as REDUCTION_CASES
from test_pointwise import CASES as POINTWISE_CASES
from test_pointwise import plan_of

from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion

# anything in a binding body that reads, copies or views an input, or launches
USES = re.compile(r"\.contiguous\(|data_ptr|CUDAGuard|at::empty|\.(reshape|expand|permute|slice|select)\(|"
                  r"kw_launch_strided|_launch\(")


def bindings():
    groups = [g for c in POINTWISE_CASES for g in plan_of(c).groups]
    groups += [g for make in REDUCTION_CASES.values() for g in plan_fusion(make()).groups
               if g.family in ("reduction", "scan")]
    return [(render_group(g), len(g.inputs)) for g in groups]


@pytest.mark.parametrize("kernel, n_inputs", bindings(), ids=lambda k: getattr(k, "name", ""))
def test_every_input_is_checked_before_it_is_used(kernel, n_inputs):
    signature = f"std::vector<at::Tensor> {kernel.name}(std::vector<at::Tensor> inputs)"
    lines = kernel.cpp[kernel.cpp.index(signature):].splitlines()[1:]
    assert re.match(rf"\s*KW_CHECK\(inputs\.size\(\) == {n_inputs},", lines[0]), lines[0]
    first_use = next(i for i, line in enumerate(lines) if USES.search(line))
    for k in range(n_inputs):
        check = next((i for i, line in enumerate(lines) if f"kw_check_input(inputs[{k}], " in line), None)
        assert check is not None, f"{kernel.name}: input {k} is never checked as passed"
        assert check < first_use, f"{kernel.name}: input {k} is checked after `{lines[first_use].strip()}`"
