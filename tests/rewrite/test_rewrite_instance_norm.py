"""Instance norm as GroupNorm (rules_norm.instance_norm_as_group_norm): ATen's BatchNorm over a
[1, N*C, *spatial] view of x becomes group_norm(x, groups=C), checked by the interpreter against the
original, against the eager module through capture, and through the layout pass (NHWC GroupNorm)."""

from __future__ import annotations

import warnings

import pytest
import torch
from rewrite_checks import KINDS, apply, assert_honest, fired, graph_of, p, x_in

from kernelwright.capture import capture
from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import make_node
from kernelwright.problem import load_problem
from kernelwright.rewrite import rewrite_graph
from kernelwright.rewrite.layout import channels_last
from kernelwright.rewrite.rules_norm import instance_norm_as_group_norm


def repeated(vector, times: int):
    """`vector.repeat(times)` as capture writes it."""
    size = vector.shape[0]
    row = make_node("reshape", [vector], shape=(1, size))
    return make_node("reshape", [make_node("expand", [row], shape=(times, size))], shape=(times * size,))


def instance_norm(x, *, affine: bool = False, eps: float = 1e-5, training: bool = True,
                  running: bool = False, back_to=None):
    """InstanceNorm as ATen computes it: BatchNorm with batch statistics over x viewed as [1, N*C, *S]."""
    n, c, *spatial = x.shape
    flat = make_node("reshape", [x], shape=(1, n * c, *spatial))
    params = [repeated(p("in.weight", (c,)), n), repeated(p("in.bias", (c,)), n)] if affine else []
    stats = [p("in.running_mean", (n * c,)), p("in.running_var", (n * c,))] if running else []
    bn = make_node("batch_norm", [flat, *params, *stats], training=training, momentum=0.1, eps=eps,
                   has_weight=affine, has_bias=affine, has_running=running)
    return make_node("reshape", [bn], shape=back_to or x.shape)


@pytest.mark.parametrize("shape", [(3, 5, 7, 6), (2, 4, 9), (2, 3, 3, 4, 5), (1, 1, 5, 3)])
@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm_becomes_group_norm_with_one_channel_per_group(shape, affine):
    norm = instance_norm(x_in(shape), affine=affine, eps=1e-3)
    before = graph_of([make_node("mul", [norm, x_in(shape, 1)])])
    after, log = apply(before, instance_norm_as_group_norm)
    assert fired(log, instance_norm_as_group_norm) == 1
    (norm,) = [n for n in after.nodes() if n.op in ("group_norm", "batch_norm")]
    assert norm.op == "group_norm" and norm.attr("groups") == shape[1] and norm.attr("eps") == 1e-3
    assert norm.inputs[0] is before.inputs[0] and norm.attr("has_weight") == affine
    if affine:
        assert [i.name for i in norm.inputs[1:]] == ["in.weight", "in.bias"]
    assert_honest(before, after, kinds=KINDS)


def test_other_batch_norms_over_reshapes_stay():
    x = x_in((2, 3, 5, 4))
    flat = make_node("reshape", [x], shape=(1, 6, 5, 4))
    cases = {
        "running stats": instance_norm(x, running=True),
        "eval mode": instance_norm(x, training=False, running=True),
        "another output shape": instance_norm(x, back_to=(6, 5, 4)),
        "channels not N*C": make_node("reshape", [make_node(
            "batch_norm", [make_node("reshape", [x], shape=(1, 2, 15, 4))], training=True, momentum=0.1,
            eps=1e-5, has_weight=False, has_bias=False, has_running=False)], shape=(2, 3, 5, 4)),
        "weight not a repeat": make_node("reshape", [make_node(
            "batch_norm", [flat, p("w6", (6,))], training=True, momentum=0.1, eps=1e-5, has_weight=True,
            has_bias=False, has_running=False)], shape=(2, 3, 5, 4)),
    }
    for name, out in cases.items():
        after, log = apply(graph_of([out]), instance_norm_as_group_norm)
        assert not log.events, name
    # the normalized [1, N*C, ...] value is also an output: rewriting would compute the norm twice
    out = instance_norm(x)
    shared = graph_of([out, out.inputs[0]])
    assert not apply(shared, instance_norm_as_group_norm)[1].events


MODULE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        self.norm = nn.InstanceNorm2d(6, affine={affine}, eps=1e-4)

    def forward(self, x):
        return self.norm(self.conv(x)) / 2.0


def get_inputs():
    return [torch.randn(3, 3, 9, 8)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("affine", [False, True])
@torch.no_grad()
def test_captured_instance_norm_is_a_group_norm_and_runs_channels_last(tmp_path, affine):
    """Through capture: the rewritten graph, and its channels-last form (conv -> GroupNorm over the NHWC
    data -> divide, one permute at the end), equal the eager module."""
    path = tmp_path / "instance_norm.py"
    path.write_text(MODULE.format(affine=affine))
    problem = load_problem(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = capture(problem)
    rewritten, log = rewrite_graph(graph)
    assert fired(log, instance_norm_as_group_norm) == 1
    layout, _ = channels_last(rewritten)
    norm = next(n for n in layout.nodes() if n.op == "group_norm")
    assert norm.attr("channel_dim") == 3 and norm.inputs[0].op == "add"
    assert [n.op for n in layout.nodes() if n.op == "permute" and not n.inputs[0].is_leaf] == ["permute"]
    assert layout.outputs[0].op == "permute" and layout.outputs[0].inputs[0].op == "div"
    model, inputs = problem.build_model(), problem.inputs()
    want = model(*inputs)
    for candidate in (rewritten, layout):
        (got,), _ = interpret(candidate, inputs, model)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
