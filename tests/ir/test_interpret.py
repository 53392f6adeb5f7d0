"""The reference interpreter: outputs, buffer updates, scalars, float64 mode, multi-output fallbacks."""

from __future__ import annotations

import torch

from kernelwright.ir.graph import Graph
from kernelwright.ir.interpret import interpret, run_node
from kernelwright.ir.ops import buffer_node, const_node, input_node, make_node, param_node


def test_outputs_and_mutations_leave_params_untouched():
    x = input_node("x", 0, (4, 3))
    weight = param_node("lin.weight", (2, 3))
    count = buffer_node("steps", (), torch.int64)
    out = make_node("relu", [make_node("linear", [x, weight], has_bias=False)])
    graph = Graph(
        (x,), (weight, count), (out,), mutations=(("steps", make_node("add", [count, const_node(1)])),)
    )
    params = {"lin.weight": torch.randn(2, 3), "steps": torch.tensor(5)}
    inputs = [torch.randn(4, 3)]
    (got,), updated = interpret(graph, inputs, params)
    torch.testing.assert_close(got, torch.relu(inputs[0] @ params["lin.weight"].T))
    assert updated == {"steps": torch.tensor(6)} and params["steps"] == 5


def test_params_from_a_module():
    module = torch.nn.Linear(3, 2)
    x = input_node("x", 0, (1, 3))
    graph = Graph(
        (x,),
        (),
        (make_node("linear", [x, param_node("weight", (2, 3)), param_node("bias", (2,))], has_bias=True),),
    )
    inputs = [torch.randn(1, 3)]
    torch.testing.assert_close(interpret(graph, inputs, module)[0][0], module(inputs[0]).detach())


def test_consts_on_the_left_and_scalar_inputs():
    x = input_node("x", 0, (5,))
    scale = input_node("scale", 1, kind="scalar", value=2.0, dtype=torch.float64)
    out = make_node("div", [const_node(1.0), make_node("sub", [const_node(3.0), x])])
    graph = Graph((x, scale), (), (out,))
    inputs = [torch.rand(5), 2.0]
    torch.testing.assert_close(interpret(graph, inputs, {})[0][0], 1.0 / (3.0 - inputs[0]))


def test_float64_mode_upcasts_inputs_params_and_dtype_attrs():
    x = input_node("x", 0, (3,))
    as_float = make_node("cast", [make_node("cast", [x], dtype=torch.float16)], dtype=torch.float32)
    filled = make_node("full", shape=(3,), value=0.1, dtype=torch.float32)
    graph = Graph((x,), (), (make_node("add", [as_float, filled]),))
    value = torch.tensor([1.0, 2.0, 3.0])
    (got,), _ = interpret(graph, [value], {}, dtype=torch.float64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, value.double() + 0.1, rtol=0, atol=0)
    (got32,), _ = interpret(graph, [value], {})
    assert got32.dtype == torch.float32


def test_multi_output_fallback_through_getitem():
    x = input_node("x", 0, (3, 5))
    sort = make_node("aten_fallback", [x], target="aten.sort.default", args=(("$in", 0), 1), kwargs=())
    assert sort.dtype is None and sort.shape == ()
    values = make_node("getitem", [sort], index=0)
    indices = make_node("getitem", [sort], index=1)
    assert values.dtype == torch.float32 and indices.dtype == torch.int64 and indices.shape == (3, 5)
    data = torch.randn(3, 5)
    (got_values, got_indices), _ = interpret(Graph((x,), (), (values, indices)), [data], {})
    expected = torch.sort(data, dim=1)
    assert torch.equal(got_values, expected.values) and torch.equal(got_indices, expected.indices)


def test_run_node_executes_one_node():
    node = make_node("softmax", [input_node("x", 0, (2, 4))], dim=-1)
    data = torch.randn(2, 4)
    torch.testing.assert_close(run_node(node, [data]), torch.softmax(data, dim=1))
