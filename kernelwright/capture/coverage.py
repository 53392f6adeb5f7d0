"""Op coverage of a suite: which IR ops its captured graphs use, and how many node occurrences are native
(an IR op of the vocabulary) rather than `aten_fallback`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.capture import capture
from kernelwright.errors import KernelwrightError
from kernelwright.ir.graph import LEAF_OPS, Graph
from kernelwright.ir.ops import category
from kernelwright.problem import load_problem

# Not computations: leaves, and getitem, which only reads one output of a multi-output fallback.
_STRUCTURAL = LEAF_OPS | {"getitem"}


@dataclass(frozen=True)
class Coverage:
    native: Counter = field(default_factory=Counter)  # IR op -> node occurrences
    fallback: Counter = field(default_factory=Counter)  # ATen target -> node occurrences
    problems_using: dict = field(default_factory=dict)  # op or target -> number of problems using it
    captured: int = 0
    failures: tuple[tuple[str, str], ...] = ()  # (problem, message) for problems that did not capture

    @property
    def native_share(self) -> float:
        total = sum(self.native.values()) + sum(self.fallback.values())
        return sum(self.native.values()) / total if total else 1.0

    def to_json(self) -> dict:
        return {
            "captured": self.captured,
            "native_share": self.native_share,
            "native": [
                {"op": op, "category": category(op), "count": n, "problems": self.problems_using[op]}
                for op, n in self.native.most_common()
            ],
            "fallback": [
                {"target": target, "count": n, "problems": self.problems_using[target]}
                for target, n in self.fallback.most_common()
            ],
            "failures": [{"problem": p, "message": m} for p, m in self.failures],
        }


def count_ops(graph: Graph) -> tuple[Counter, Counter]:
    """(native op counts, fallback target counts) of one graph."""
    native, fallback = Counter(), Counter()
    for node in graph.nodes():
        if node.op == "aten_fallback":
            fallback[node.attr("target")] += 1
        elif node.op not in _STRUCTURAL:
            native[node.op] += 1
    return native, fallback


def suite_coverage(paths: Iterable[Path]) -> Coverage:
    """Capture every problem file (full size: fake tensors cost no memory) and count its ops."""
    native, fallback, using = Counter(), Counter(), Counter()
    failures = []
    captured = 0
    for path in paths:
        try:
            graph = capture(load_problem(path))
        except KernelwrightError as exc:
            failures.append((str(path), str(exc)))
            continue
        captured += 1
        graph_native, graph_fallback = count_ops(graph)
        native.update(graph_native)
        fallback.update(graph_fallback)
        using.update(set(graph_native) | set(graph_fallback))
    return Coverage(native, fallback, dict(using), captured, tuple(failures))


def problem_files(suite_dir: Path) -> list[Path]:
    """Problem files under a suite directory (recursively), in a stable order."""
    return sorted(p for p in Path(suite_dir).rglob("*.py") if not p.name.startswith("_"))
