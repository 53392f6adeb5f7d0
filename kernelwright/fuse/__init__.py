"""The fusion planner: which IR nodes form one kernel, and which kernel family renders it.

`MATCHERS` lists each family's matcher in priority order: anchors first (convolutions and GEMMs with
epilogues, then reductions, normalizations, softmax, scans, pools), pointwise chains last, so they only
take what no anchor absorbed. A matcher is `match(graph, claimed_node_ids) -> list[FusedGroup]`;
`plan.Matching` holds what most of them work with (readers, outputs, claimed nodes, the convexity test).
"""

from kernelwright.fuse import conv, gemm, pointwise, pool, reduction, scan
from kernelwright.fuse.plan import AtenStep, FusedGroup, FusionPlan, Partition, make_group, plan_fusion

# Family -> other launches of one of its groups, which the GPU measures against the planner's own.
ALTERNATIVES = {"reduction": reduction.launch_alternatives, "gemm": gemm.launch_alternatives,
                "pointwise": pointwise.launch_alternatives}


def launch_alternatives(group: FusedGroup) -> list[FusedGroup]:
    """Other launches of `group` (same nodes, inputs and outputs; another config) worth measuring."""
    find = ALTERNATIVES.get(group.family)
    return find(group) if find else []


LABELS = {"reduction": reduction.launch_label, "gemm": gemm.launch_label, "pointwise": pointwise.launch_label}


def launch_label(group: FusedGroup) -> str:
    """How a launch differs from its alternatives, in a few words ("" for families that offer none)."""
    label = LABELS.get(group.family)
    return label(group) if label else ""


MATCHERS = [
    conv.match,
    gemm.match,
    reduction.match,
    scan.match,
    pool.match,
    pointwise.match,
]


def matchers_without(families: tuple[str, ...] = ()) -> list:
    """`MATCHERS` less those of the families named (a matcher's module is its family: `fuse/conv.py`)."""
    return [m for m in MATCHERS if m.__module__.rsplit(".", 1)[-1] not in families]


__all__ = ["ALTERNATIVES", "LABELS", "MATCHERS", "AtenStep", "FusedGroup", "FusionPlan", "Partition",
           "launch_alternatives", "launch_label", "make_group", "matchers_without", "plan_fusion"]
