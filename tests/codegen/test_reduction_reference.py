"""The reference of the reduction GPU tests is the CPU interpreter run on the case graphs: here, on the CPU,
that the graphs compute what the eager modules do, and that interpreting them leaves the parameters and
buffers alone (an in-place update would change the values that the graph's later nodes read)."""

from __future__ import annotations

import pytest
import torch
from reduction_cases import CASES, batch_norm_train, random_inputs

from kernelwright.ir.interpret import interpret


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreting_a_case_leaves_its_parameters_alone(case):
    graph = CASES[case]()
    inputs, params = random_inputs(graph, "cpu", seed=1)
    params = {k: v.double() for k, v in params.items()}
    before = {k: v.clone() for k, v in params.items()}
    interpret(graph, [x.double() for x in inputs], params)
    for name, value in params.items():
        assert torch.equal(value, before[name]), f"{case}: interpreting it changed {name}"


def test_batch_norm_train_case_is_what_batchnorm2d_computes():
    graph = batch_norm_train((8, 6, 13, 11), momentum=0.1)
    inputs, params = random_inputs(graph, "cpu", seed=1)
    module = torch.nn.BatchNorm2d(6, momentum=0.1).double().train()
    module.load_state_dict({k.removeprefix("bn."): v.double() for k, v in params.items()}, strict=False)
    with torch.no_grad():
        want = module(inputs[0].double())
    (got,), updated = interpret(graph, [inputs[0].double()], {k: v.double() for k, v in params.items()})
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(updated["bn.running_mean"], module.running_mean)
    torch.testing.assert_close(updated["bn.running_var"], module.running_var)
