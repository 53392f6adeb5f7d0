"""The scan family's renderer: prints the `ScanSpec` that `fuse/scan.py` chose into
`cuda/kw_scan_kernel.cu.in` (block scan with a carried total along contiguous rows; a sequential walk per
column otherwise). The scanned values come from a `Load` functor: the group's inputs, typed, and its
pointwise prologue (`cumsum(x * mask)`), computed per element as the kernel reads it."""

from __future__ import annotations

import hashlib

import torch

from kernelwright.codegen.kernel import KernelSource, cpp_bool, source_template, typed, typed_inputs
from kernelwright.codegen.pointwise import c_type, emit_statements
from kernelwright.codegen.reduction_entry import contiguous_entry
from kernelwright.codegen.reduction_index import index_type
from kernelwright.fuse.plan import FusedGroup
from kernelwright.fuse.scan import SCAN_OPS, ScanSpec
from kernelwright.ir.graph import Graph, Node, format_graph

TEMPLATE = source_template("kw_scan_kernel.cu.in")


def render(group: FusedGroup) -> KernelSource:
    spec: ScanSpec = group.config[0]
    prologue, value = _prologue(group)
    load = _load_functor(group, prologue, value)
    # everything the kernel and its spec (contiguous_entry's) depend on: two scans of one [outer, length,
    # inner] but of other ranks have other specs, and one name for both would not assemble
    typed_io = repr((typed_inputs(group.inputs, names=False), typed(group.outputs)))
    name = "kw_scan_" + hashlib.sha1((repr(spec) + load + typed_io).encode()).hexdigest()[:10]
    kind = ("exclusive " if spec.exclusive else "") + ("reverse " if spec.reverse else "") + spec.op
    kind += " of a pointwise prologue" if prologue else ""
    params = ", ".join(f"const {c_type(i.dtype)}* in{k}" for k, i in enumerate(group.inputs))
    cuda = TEMPLATE.substitute(
        name=name, summary=f"{kind} over [{spec.outer}, {spec.length}, {spec.inner}] ({spec.layout})",
        idx_t=index_type(spec.outer * spec.length * spec.inner + spec.threads * spec.vec),
        op="kw::ScanSum" if spec.op == "cumsum" else "kw::ScanProd",
        outer=spec.outer, length=spec.length, inner=spec.inner, reverse=cpp_bool(spec.reverse),
        exclusive=cpp_bool(spec.exclusive), threads=spec.threads, vec=spec.vec, load=load, params=params,
        args=", ".join(f"in{k}" for k in range(len(group.inputs))))
    entry, kernel_spec = contiguous_entry(name, group.inputs, group.outputs)
    comment = format_graph(Graph(inputs=(), params=(), outputs=group.outputs))
    return KernelSource(name, cuda + entry, kernel_spec, comment)


def _prologue(group: FusedGroup) -> tuple[list[Node], Node]:
    """The group's prologue nodes (graph order) and the value the scan reads: what is left of the group
    without the scan, its flips (a reverse scan) and the exclusive scan's subtraction, which read the scan
    or are read by it."""
    (scan,) = [n for n in group.nodes if n.op in SCAN_OPS]
    first = scan.inputs[0] if scan.inputs[0].op == "flip" and any(scan.inputs[0] is n for n in group.nodes) \
        else scan
    after = {id(scan)}
    for node in group.nodes:   # graph order: the flip and the subtraction after the scan read it
        if any(id(i) in after for i in node.inputs):
            after.add(id(node))
    core = after | {id(first)}
    return [n for n in group.nodes if id(n) not in core], first.inputs[0]


def _load_functor(group: FusedGroup, prologue: list[Node], value: Node) -> str:
    """The C++ `Load` of a scan kernel: the group's inputs as typed pointers, `at(i)` the scanned value at
    flat index i, `vec<N>(i)` N consecutive ones (float inputs as one vector load, a mask's four bytes as
    one 32-bit word), and the host-side `aligned()` check of its vector loads. `prologue`, `value`:
    `_prologue`'s."""
    fields = [f"  const {c_type(i.dtype)}* __restrict__ in{k};" for k, i in enumerate(group.inputs)]
    floats = [k for k, i in enumerate(group.inputs) if i.dtype == torch.float32]

    def element(read, result: str) -> list[str]:
        """The value at one index: each input read by `read(k)`, the prologue, then `result` of it."""
        env = {id(i): f"a{k}" for k, i in enumerate(group.inputs)}
        lines = [f"const {c_type(i.dtype)} a{k} = {read(k)};" for k, i in enumerate(group.inputs)]
        return lines + emit_statements(prologue, env, prefix="p") + [result.format(env[id(value)])]

    def scalar(k: int) -> str:
        return f"kw::load(in{k} + i)"

    def lane(k: int) -> str:
        if k in floats:
            return f"r{k}.v[j]"
        # a mask's four bytes as one 32-bit load where N is 4 (else one byte at a time)
        return f"(N == 4 ? ((w{k} >> (8 * j)) & 0xffu) != 0u : kw::load(in{k} + i + j))"

    masks = [k for k, i in enumerate(group.inputs) if i.dtype == torch.bool]
    vector_loads = [f"    const kw::Vec<float, N> r{k} = kw::load_vec<float, N>(in{k} + i);" for k in floats]
    vector_loads += [f"    const unsigned w{k} = N == 4 ? "
                     f"kw::load(reinterpret_cast<const unsigned*>(in{k} + i)) : 0u;" for k in masks]
    aligned = " && ".join([f"kw::is_aligned<float4>(in{k})" for k in floats]
                          + [f"kw::is_aligned<unsigned>(in{k})" for k in masks]) or "true"
    return "\n".join([
        "struct Load {", *fields,
        "  __device__ __forceinline__ float at(idx_t i) const {",
        *(f"    {line}" for line in element(scalar, "return {};")),
        "  }",
        "  template <int N>",
        "  __device__ __forceinline__ kw::Vec<float, N> vec(idx_t i) const {",
        *vector_loads,
        "    kw::Vec<float, N> out;",
        "#pragma unroll",
        "    for (int j = 0; j < N; ++j) {",
        *(f"      {line}" for line in element(lane, "out.v[j] = {};")),
        "    }",
        "    return out;",
        "  }",
        f"  bool aligned() const {{ return {aligned}; }}",
        "};",
    ])
