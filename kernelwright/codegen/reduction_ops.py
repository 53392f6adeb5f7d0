"""What each reduction, softmax and normalization op accumulates over a row, and how its results are
computed from the combined accumulator: one table, used by the reduction family's renderer.

Names in the templates: `{a}` the combined accumulator of the node, `{x}` its (per-element) input,
`{w}`, `{b}` its weight and bias operands, `{n}` the row length as a float literal, `{s0}`, `{s1}` the row
scalars the entry defines (in order). Reductions define one row value, their result; softmax and the norms
define row scalars and an elementwise expression.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelwright.codegen.pointwise import c_literal
from kernelwright.ir.graph import Node


@dataclass(frozen=True)
class Accumulation:
    acc: str                        # accumulator type in kw_reduce.cuh
    indexed: bool                   # update(x, index along the row) instead of update(x)
    scalars: tuple[str, ...]        # per-row values, computed once after the pass that accumulates
    elem: str | None = None         # elementwise result (softmax, norms); None for reductions


def accumulation(node: Node, length: int) -> Accumulation:
    op = node.op
    if op in ("sum", "mean", "prod", "amax", "amin"):
        acc = {"sum": "kw::SumAcc", "mean": "kw::SumAcc", "prod": "kw::ProdAcc", "amax": "kw::MaxAcc",
               "amin": "kw::MinAcc"}[op]
        return Accumulation(acc, False, ("{a}.v / {n}" if op == "mean" else "{a}.v",))
    if op in ("var", "std"):
        # torch clamps the divisor at 0 (var of one element with correction 1 is NaN = 0 / 0)
        divisor = c_literal(float(max(0, length - node.attr("correction", 1))), torch.float32)
        var = f"{{a}}.m2 / {divisor}"
        return Accumulation("kw::WelfordAcc", False, (var if op == "var" else f"sqrtf({var})",))
    if op == "logsumexp":
        return Accumulation("kw::SoftmaxAcc", False, ("{a}.m + logf({a}.s)",))
    if op in ("argmax", "argmin"):
        return Accumulation("kw::ArgMaxAcc" if op == "argmax" else "kw::ArgMinAcc", True, ("{a}.i",))
    if op == "softmax":
        # one reciprocal per row instead of a division per element (at most 1 ulp more); a row of -inf
        # only still gives NaN (exp(-inf - -inf) * (1 / 0)), and a row holding +inf NaN throughout
        # (kw::softmax_shift), as torch does. x - max from x rounded (__fsub_rn, as kw::exp_shift in the
        # accumulator), never an FMA with the product that computed x
        return Accumulation("kw::SoftmaxAcc", False, ("kw::softmax_shift({a})", "1.f / {a}.s"),
                            "(expf(__fsub_rn({x}, {s0})) * {s1})")
    if op == "log_softmax":
        return Accumulation("kw::SoftmaxAcc", False, ("kw::softmax_shift({a})", "logf({a}.s)"),
                            "(__fsub_rn({x}, {s0}) - {s1})")
    if op in ("layer_norm", "group_norm", "batch_norm"):
        eps = c_literal(float(node.attr("eps")), torch.float32)
        elem = "(({x} - {s0}) * {s1})"
        if node.attr("has_weight"):
            elem = f"({elem} * {{w}})"
        if node.attr("has_bias"):
            elem = f"({elem} + {{b}})"
        # normalized with the biased variance, as ATen's layer/group/batch norm
        return Accumulation("kw::WelfordAcc", False, ("{a}.mean", f"rsqrtf({{a}}.m2 / {{n}} + {eps})"), elem)
    raise ValueError(f"{op} is not a reduction-family op")


def render_scalars(entry: Accumulation, acc: str, length: int) -> list[str]:
    n = c_literal(float(length), torch.float32)
    return [s.format(a=acc, n=n) for s in entry.scalars]


def param_operands(node: Node) -> dict[str, int]:
    """Which inputs of a norm are its weight and bias (they are present only when the attrs say so)."""
    found, position = {}, 1
    for name, flag in (("w", "has_weight"), ("b", "has_bias")):
        if node.attr(flag):
            found[name] = position
            position += 1
    return found
