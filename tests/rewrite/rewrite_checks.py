"""Shared checks for the rewrite tests: build small graphs, generate random and adversarial leaf values,
and compare a graph before and after rewriting against the float64 oracle of the original."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.interpret import interpret
from kernelwright.ir.ops import input_node, param_node
from kernelwright.rewrite import RewriteLog, Rule, graph_rewrite

# The FP32 tolerance of the precision policy, relative to the oracle's scale (its largest magnitude).
ATOL = RTOL = 1e-4
# Value distributions: ordinary, large magnitudes, massive cancellation (alternating +-1000 with small
# noise, so sums of neighbours cancel), and magnitudes spread over six decades.
KINDS = ("normal", "large", "cancel", "spread")
# Rules that claim IEEE exactness are also run with nan and +-inf sprinkled in.
EXACT_KINDS = (*KINDS, "nonfinite")


def graph_of(outputs: Sequence[Node], *, training: bool = False) -> Graph:
    """A graph whose inputs and params are the leaves reachable from `outputs`, in first-seen order."""
    probe = Graph(inputs=(), params=(), outputs=tuple(outputs))
    leaves = [n for n in probe.nodes() if n.op in ("input", "param", "buffer")]
    inputs = tuple(sorted((n for n in leaves if n.op == "input"), key=lambda n: n.attr("index")))
    params = tuple(n for n in leaves if n.op != "input")
    return Graph(inputs=inputs, params=params, outputs=tuple(outputs), training=training,
                 output_kind="tensor" if len(outputs) == 1 else "tuple")


def x_in(shape: Sequence[int], index: int = 0, name: str | None = None) -> Node:
    return input_node(name or f"x{index}", index, shape)


def p(name: str, shape: Sequence[int]) -> Node:
    return param_node(name, shape)


def values(shape: Sequence[int], kind: str, gen: torch.Generator) -> torch.Tensor:
    base = torch.randn(tuple(shape), generator=gen)
    if kind == "large":
        return base * 1e4
    if kind == "cancel":
        sign = torch.ones(base.numel())
        sign[1::2] = -1
        return sign.reshape(tuple(shape)) * 1e3 + base * 1e-2
    if kind == "spread":
        return base * torch.pow(10.0, torch.empty(tuple(shape)).uniform_(-3, 3, generator=gen))
    if kind == "nonfinite":
        flat = base.flatten()
        specials = (float("nan"), float("inf"), -float("inf"))
        for i, position in enumerate(range(0, flat.numel(), 5)):
            flat[position] = specials[i % 3]
        return flat.reshape(tuple(shape))
    return base


def leaf_values(graph: Graph, kind: str, seed: int, positive: Iterable[str] = ()) -> tuple[list, dict]:
    """Forward arguments and parameters for `graph`; parameters named in `positive` are made > 0
    (variances)."""
    gen = torch.Generator().manual_seed(seed)
    by_index = {n.attr("index"): values(n.shape, kind, gen) for n in graph.inputs}
    inputs = [by_index.get(i, torch.zeros(())) for i in range(max(by_index, default=-1) + 1)]
    params = {n.name: values(n.shape, kind, gen) for n in graph.params}
    for name in positive:
        params[name] = params[name].abs() + 0.5
    return inputs, params


def apply(graph: Graph, *rules: Rule, assume_finite: bool = False,
          allow_reassociation: bool = False) -> tuple[Graph, RewriteLog]:
    return graph_rewrite(graph, rules, assume_finite=assume_finite, allow_reassociation=allow_reassociation)


def fired(log: RewriteLog, rule: Rule | str) -> int:
    return log.counts().get(rule if isinstance(rule, str) else rule.name, 0)


def _error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest error left after subtracting the relative part of the tolerance (finite oracle values)."""
    finite = torch.isfinite(ref)
    diff = (out.double() - ref).abs() - RTOL * ref.abs()
    return float(diff[finite].max()) if finite.any() else 0.0


def assert_same_nonfinite(a: torch.Tensor, b: torch.Tensor) -> None:
    assert torch.equal(torch.isnan(a), torch.isnan(b)), "nan positions differ"
    assert torch.equal(torch.isinf(a), torch.isinf(b)), "inf positions differ"
    assert torch.equal(a[torch.isinf(a)], b[torch.isinf(a)]), "inf signs differ"


def assert_close_to_oracle(before: Graph, after: Graph, inputs: list, params: dict) -> None:
    """Every output (and buffer update) of `after` is within the FP32 tolerance of the float64 oracle of
    `before`, or no more than 4x further from it than `before` itself is (cancellation can put the
    original beyond the tolerance too; a rewrite must not make that materially worse)."""
    oracle, oracle_updates = interpret(before, inputs, params, dtype=torch.float64)
    got_before, before_updates = interpret(before, inputs, params)
    got_after, after_updates = interpret(after, inputs, params)
    pairs = list(zip(oracle, got_before, got_after, strict=True))
    pairs += [(oracle_updates[k], before_updates[k], after_updates[k]) for k in oracle_updates]
    for ref, b, a in pairs:
        assert a.shape == ref.shape and a.dtype == b.dtype, f"type changed: {a.dtype}{list(a.shape)}"
        if not ref.is_floating_point():
            assert torch.equal(a, b), "non-float output changed"
            continue
        assert_same_nonfinite(b, a)
        scale = float(ref[torch.isfinite(ref)].abs().max()) if torch.isfinite(ref).any() else 0.0
        err_after, err_before = _error(a, ref), _error(b, ref)
        assert err_after <= ATOL * scale or err_after <= 4 * err_before + 1e-30, (
            f"rewritten error {err_after:.3g} vs original {err_before:.3g} at oracle scale {scale:.3g}")


def assert_honest(before: Graph, after: Graph, *, seeds: Sequence[int] = (0, 1), kinds: Sequence[str] = KINDS,
                  positive: Iterable[str] = ()) -> None:
    """The property check: `after` matches the float64 oracle of `before` on every value distribution."""
    for kind in kinds:
        for seed in seeds:
            inputs, params = leaf_values(before, kind, seed, positive)
            try:
                assert_close_to_oracle(before, after, inputs, params)
            except AssertionError as exc:
                raise AssertionError(f"{kind} inputs, seed {seed}: {exc}") from exc
