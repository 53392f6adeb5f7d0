"""The scan family's renderer: prints the `ScanSpec` that `fuse/scan.py` chose into
`cuda/kw_scan_kernel.cu.in` (block scan with a carried total along contiguous rows; a sequential walk per
column otherwise)."""

from __future__ import annotations

import hashlib

from kernelwright.codegen.kernel import KernelSource, cpp_bool, source_template
from kernelwright.codegen.reduction_entry import contiguous_entry
from kernelwright.codegen.reduction_index import index_type
from kernelwright.fuse.plan import FusedGroup
from kernelwright.fuse.scan import ScanSpec
from kernelwright.ir.graph import Graph, format_graph

TEMPLATE = source_template("kw_scan_kernel.cu.in")


def render(group: FusedGroup) -> KernelSource:
    spec: ScanSpec = group.config[0]
    name = "kw_scan_" + hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    kind = ("exclusive " if spec.exclusive else "") + ("reverse " if spec.reverse else "") + spec.op
    cuda = TEMPLATE.substitute(
        name=name, summary=f"{kind} over [{spec.outer}, {spec.length}, {spec.inner}] ({spec.layout})",
        idx_t=index_type(spec.outer * spec.length * spec.inner + spec.threads * spec.vec),
        op="kw::ScanSum" if spec.op == "cumsum" else "kw::ScanProd",
        outer=spec.outer, length=spec.length, inner=spec.inner, reverse=cpp_bool(spec.reverse),
        exclusive=cpp_bool(spec.exclusive), threads=spec.threads, vec=spec.vec)
    entry, kernel_spec = contiguous_entry(name, group.inputs, group.outputs)
    comment = format_graph(Graph(inputs=(), params=(), outputs=group.outputs))
    return KernelSource(name, cuda + entry, kernel_spec, comment)

