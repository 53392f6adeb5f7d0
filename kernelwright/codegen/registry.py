"""Family name → the module that renders it. Each module defines `render(group: FusedGroup) -> KernelSource`
and is imported only when a group of its family is rendered, so a family under construction cannot break
the others."""

from __future__ import annotations

import importlib

from kernelwright.codegen.kernel import KernelSource
from kernelwright.errors import UnsupportedOp
from kernelwright.fuse.plan import FusedGroup

RENDERERS = {
    "conv": "kernelwright.codegen.conv",
    "gemm": "kernelwright.codegen.gemm",
    "pointwise": "kernelwright.codegen.pointwise",
    "pool": "kernelwright.codegen.pool",
    "reduction": "kernelwright.codegen.reduction",
    "scan": "kernelwright.codegen.scan",
}


def render_group(group: FusedGroup) -> KernelSource:
    module_path = RENDERERS.get(group.family)
    if module_path is None:
        raise UnsupportedOp(f"no renderer registered for kernel family {group.family!r} "
                            f"(known: {', '.join(sorted(RENDERERS))})")
    return importlib.import_module(module_path).render(group)
