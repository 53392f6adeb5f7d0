"""Capture of constructs the bundled suite does not (yet) exercise: scalar arguments, tensor constants,
eval mode, tuple outputs, multi-output fallbacks, constructors that read tensor values."""

from __future__ import annotations

import copy
import textwrap

import torch

from kernelwright.capture import capture
from kernelwright.capture.export import export_problem, needs_decomposition
from kernelwright.capture.lower import lower_program
from kernelwright.ir.graph import format_graph
from kernelwright.ir.interpret import interpret
from kernelwright.problem import load_problem, load_shrunk
from kernelwright.problem_files import bundled_problem_ids


def _problem(tmp_path, name: str, body: str, inputs: str, init: str = "[]"):
    path = tmp_path / f"{name}.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
        + textwrap.dedent(body)
        + f"\n\ndef get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init}\n"
    )
    return load_problem(path)


def _check_against_model(problem, graph):
    model = problem.build_model()  # the seed capture used: constructor-computed Python values match
    inputs = problem.inputs(3)
    pristine = copy.deepcopy(model)
    with torch.no_grad():
        expected = model(*inputs)
    outputs, updated = interpret(graph, inputs, pristine)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    for got, want in zip(outputs, expected, strict=True):
        torch.testing.assert_close(got, want)
    buffers = dict(model.named_buffers())
    for fqn, value in updated.items():
        torch.testing.assert_close(value, buffers[fqn])
    return outputs


def test_scalar_arguments_and_tensor_constants(tmp_path):
    problem = _problem(
        tmp_path,
        "scalars",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.offsets = torch.arange(4.0)  # a plain tensor attribute, not a registered buffer

            def forward(self, x, scale, n):
                return x * scale + self.offsets + torch.tensor([1.0, 2.0, 3.0, 4.0]), x.sum(n)
        """,
        "[torch.randn(3, 4), 2.5, 1]",
    )
    graph = capture(problem)
    assert graph.output_kind == "tuple"
    kinds = [(n.name, n.attr("kind"), n.attr("value")) for n in graph.inputs]
    assert kinds == [("x", "tensor", None), ("scale", "scalar", 2.5), ("n", "scalar", 1)]
    assert [p.name for p in graph.params] == ["offsets"] and graph.params[0].op == "buffer"
    assert any(n.op == "literal" for n in graph.nodes())
    _check_against_model(problem, graph)


def test_eval_mode_batch_norm_reads_running_stats_and_updates_nothing(tmp_path):
    problem = _problem(
        tmp_path,
        "bn_eval",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = nn.BatchNorm1d(6)
                self.bn.running_mean.fill_(0.5)
                self.eval()

            def forward(self, x):
                return self.bn(x)
        """,
        "[torch.randn(5, 6)]",
    )
    graph = capture(problem)
    assert not graph.training and graph.mutations == ()
    norm = next(n for n in graph.nodes() if n.op == "batch_norm")
    assert norm.attr("training") is False and norm.attr("has_running") is True
    _check_against_model(problem, graph)


def test_multi_output_fallback_and_constructor_reading_values(tmp_path):
    problem = _problem(
        tmp_path,
        "sort",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.shift = float(torch.randn(1))  # reads a value: cannot run on fake tensors

            def forward(self, x):
                values, indices = torch.sort(x, dim=1)
                return values + self.shift, indices
        """,
        "[torch.randn(4, 7)]",
    )
    graph = capture(problem)
    fallback = next(n for n in graph.nodes() if n.op == "aten_fallback")
    assert fallback.attr("target") == "aten.sort.default" and fallback.dtype is None
    assert [n.op for n in graph.outputs] == ["add", "getitem"]
    assert graph.outputs[1].dtype == torch.int64
    _check_against_model(problem, graph)


def test_skipping_decomposition_gives_the_same_graph():
    """The fast path (no run_decompositions when every op has a lowering) must not change the IR."""
    checked = 0
    for problem_id in bundled_problem_ids()[::6]:
        problem = load_shrunk(problem_id)
        program, model, arguments = export_problem(problem, decompose=False)
        if needs_decomposition(program):
            continue
        fast = lower_program(program, model, arguments, problem_id)
        program, model, arguments = export_problem(problem, decompose=True)
        assert format_graph(fast) == format_graph(lower_program(program, model, arguments, problem_id))
        checked += 1
    assert checked >= 5
