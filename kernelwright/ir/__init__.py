"""kernelwright IR: immutable typed nodes, graphs, op definitions and the CPU reference interpreter."""

from kernelwright.ir.graph import Graph, Node, format_graph, substitute

__all__ = ["Graph", "Node", "format_graph", "substitute"]
