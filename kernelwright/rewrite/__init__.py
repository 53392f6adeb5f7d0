"""The rewrite stage: algebraic rules (pattern -> replacement, with a precondition) applied to a fixpoint
between capture and fusion, plus CSE and DCE. See docs/rewrites.md."""

from kernelwright.rewrite.engine import RewriteContext, RewriteEvent, RewriteLog, Rule, graph_rewrite, rule
from kernelwright.rewrite.hoist import hoist_sources, hoistable_nodes
from kernelwright.rewrite.pipeline import RULES, rewrite_graph

__all__ = ["RULES", "RewriteContext", "RewriteEvent", "RewriteLog", "Rule", "graph_rewrite", "hoist_sources",
           "hoistable_nodes", "rewrite_graph", "rule"]
