"""Facts the rewrite stage finds for later stages without changing the graph: they go in the log."""

from __future__ import annotations

from kernelwright.ir.graph import Graph, Node
from kernelwright.rewrite.engine import RewriteEvent, describe

REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "prod", "var", "std", "logsumexp", "argmax", "argmin",
                        "softmax", "log_softmax"})


def fusion_notes(graph: Graph) -> list[RewriteEvent]:
    notes = []
    users = graph.users()
    for node in graph.nodes():
        readers = [u for u in users[id(node)] if u.op in REDUCTIONS]
        if len({id(u) for u in readers}) >= 2:
            ops = ", ".join(sorted({u.op for u in readers}))
            notes.append(RewriteEvent("shared_reduction_input", describe(node),
                                      f"{ops} all read it: one pass over it can compute them together"))
        producer = node.inputs[0] if node.inputs else node
        if node.op in ("tril", "triu") and producer.op in ("mm", "bmm") and len(users[id(producer)]) == 1:
            half = "lower" if node.op == "tril" else "upper"
            notes.append(RewriteEvent("triangular_gemm", describe(node),
                                      f"only the {half} triangle of the {producer.op} is kept: "
                                      "the GEMM can skip the other blocks"))
        if node.op in ("mm", "bmm") and all(_triangle(i) == _triangle(node.inputs[0]) for i in node.inputs) \
                and _triangle(node.inputs[0]):
            notes.append(RewriteEvent("triangular_gemm", describe(node),
                                      f"both operands are {_triangle(node.inputs[0])} triangular: so is the "
                                      "product, and each output block needs only part of the K range"))
    return notes


def _triangle(node: Node) -> str:
    """"upper"/"lower" for a triu/tril keeping the main diagonal and one side of it, else ""."""
    if node.op in ("triu", "tril") and node.attr("diagonal") == 0:
        return "upper" if node.op == "triu" else "lower"
    return ""
