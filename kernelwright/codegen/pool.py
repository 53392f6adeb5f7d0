"""The pool family's renderer: prints the `PoolSpec` that `fuse/pool.py` chose into
`cuda/kw_pool_kernel.cu.in`, with the group's prologue as the function that reads one input element
(`input_at`) and its epilogue as the function that finishes one output (`output_at`).

Every tensor the prologue or epilogue reads is addressed by strides over the pool's input (or output) dims,
0 where it is broadcast, split into a per-plane base (computed once per output) and a spatial part (d, h, w
times compile-time strides, which vanish where they are 0). Tensors arrive contiguous (the runtime makes
them so), and a reshape inside the group only inserts or removes size-1 dims, so these strides are known
when the kernel is generated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from kernelwright.codegen.kernel import KernelSource, cpp_bool, source_template
from kernelwright.codegen.pointwise import INT32_LIMIT, describe_group, emit_statements
from kernelwright.codegen.reduction_entry import contiguous_entry
from kernelwright.codegen.reduction_index import broadcast_strides, contiguous_strides
from kernelwright.errors import UnsupportedOp
from kernelwright.fuse.plan import FusedGroup
from kernelwright.fuse.pool import POOL_OPS, PoolSpec
from kernelwright.ir.graph import Node

TEMPLATE = source_template("kw_pool_kernel.cu.in")


@dataclass(frozen=True)
class Access:
    """A tensor read by the prologue or epilogue: strides over the pool's input (or output) dims, the
    index of its per-plane base in `Bases`, and its stride along W (0: broadcast, 1: contiguous)."""

    node: Node
    strides: tuple[int, ...]
    base: int
    w_stride: int


def render(group: FusedGroup) -> KernelSource:
    return _PoolKernel(group, group.config[0]).source()


class _PoolKernel:
    def __init__(self, group: FusedGroup, spec: PoolSpec):
        if len(group.outputs) != 1 or group.outputs[0] is not group.nodes[-1]:
            raise UnsupportedOp("a pool group computes one value, its last node (the planner guarantees it)")
        self.group, self.spec = group, spec
        self.position = {id(n): k for k, n in enumerate(group.inputs)}
        at = next(k for k, n in enumerate(group.nodes) if n.op in POOL_OPS)
        self.pool = group.nodes[at]
        self.before, self.after = group.nodes[:at], group.nodes[at + 1:]
        self.in_bases: list[str] = []       # per-plane offset expressions, b.in[m] / b.out[m]
        self.out_bases: list[str] = []
        self.base_of: dict[tuple, int] = {}

    def source(self) -> KernelSource:
        spec, group = self.spec, self.group
        name = "kw_pool_" + hashlib.sha1((repr(spec) + describe_group(group)).encode()).hexdigest()[:10]
        input_body, chunk_body = self._input_body(), self._chunk_body()
        output_body = self._output_body()
        extents = [spec.outputs, self.pool.inputs[0].numel] + [i.numel for i in group.inputs]
        idx_t = "int" if max(extents) < INT32_LIMIT else "long long"
        ins = [f"const float* in{k}" for k in range(len(group.inputs))]
        holes = {
            "name": name, "summary": self._summary(), "idx_t": idx_t,
            "is_max": cpp_bool(spec.kind == "max"), "adaptive": cpp_bool(spec.adaptive),
            "warp": cpp_bool(spec.layout == "warp"), "vec": spec.vec, "threads": spec.threads,
            "rows": spec.rows,
            "planes": _int(spec.planes), "count_pad": cpp_bool(spec.count_include_pad),
            "divisor": spec.divisor_override or 0, "divide_per_dim": cpp_bool(spec.divide_per_dim),
            "fields": "\n".join([f"  const float* in{k};" for k in range(len(group.inputs))]
                                + ["  float* out;"]),
            "n_in": max(1, len(self.in_bases)), "n_out": max(1, len(self.out_bases)),
            "bases": "\n".join([f"  b.in[{m}] = {e};" for m, e in enumerate(self.in_bases)]
                               + [f"  b.out[{m}] = {e};" for m, e in enumerate(self.out_bases)]),
            "input_body": input_body, "chunk_body": chunk_body, "output_body": output_body,
            "wide_loads": cpp_bool(spec.wide_loads), "wide_aligned": self._wide_operands(),
            "launch_params": ", ".join(ins + ["float* out0"]),
            "args_init": ", ".join([f"in{k}" for k in range(len(group.inputs))] + ["out0"]),
        }
        for prefix, values in (("i", spec.in_size), ("o", spec.out_size), ("k", spec.kernel),
                               ("s", spec.stride), ("p", spec.padding), ("d", spec.dilation)):
            holes.update({prefix + axis: v for axis, v in zip("dhw", values, strict=True)})
        cuda = TEMPLATE.substitute(holes)
        entry, kernel_spec = contiguous_entry(name, group.inputs, group.outputs)
        return KernelSource(name, cuda + entry, kernel_spec, describe_group(group))

    # ------------------------------------------------------------------ prologue and epilogue

    def _prologue(self) -> tuple[list[Node], Node, list[Access]]:
        """The prologue's pointwise nodes, the value the pool reads (before a unit reshape, if the group
        has one), and the tensors they read."""
        nodes = [n for n in self.before if n.op != "reshape"]
        source = self.pool.inputs[0]
        if source.op == "reshape" and self.before and source is self.before[-1]:
            source = source.inputs[0]      # the prologue computes in the shape before the reshape
        reads = nodes if nodes else [self.pool]
        return nodes, source, self._accesses(reads, source.shape, self.pool.inputs[0].shape, self.in_bases)

    def _input_body(self) -> str:
        """Loads of the prologue's operands at (d, h, w), its statements, the value the pool reads."""
        nodes, source, accesses = self._prologue()
        env: dict[int, str] = {}
        lines = []
        for access in accesses:
            env[id(access.node)] = f"x{access.base}"
            lines.append(f"const float x{access.base} = ld({self._address(access, 'in')});")
        lines += emit_statements(nodes, env, prefix="p")
        lines.append(f"return {env[id(source)]};")
        return "\n".join("  " + line for line in lines)

    def _chunk_body(self) -> str:
        """Input columns w .. w + 3: one 16-byte load per tensor that varies along W, one scalar load per
        tensor broadcast along it, then the prologue per column."""
        if not self.spec.wide_loads:
            return "  (void)a; (void)b; (void)d; (void)h; (void)w; (void)v;"
        nodes, source, accesses = self._prologue()
        env: dict[int, str] = {}
        lines = []
        for access in accesses:
            if access.w_stride == 1:
                env[id(access.node)] = f"x{access.base}.v[j]"
                lines.append(f"const kw::Vec<float, 4> x{access.base} = ld4({self._address(access, 'in')});")
            elif access.w_stride == 0:
                env[id(access.node)] = f"x{access.base}"
                lines.append(f"const float x{access.base} = ld({self._address(access, 'in')});")
            else:
                raise UnsupportedOp(f"{access.node!r}: stride {access.w_stride} along W, expected 0 or 1")
        statements = emit_statements(nodes, env, prefix="p")
        lines += ["#pragma unroll", "for (int j = 0; j < 4; ++j) {", *("  " + s for s in statements),
                  f"  v[j] = {env[id(source)]};", "}"]
        return "\n".join("  " + line for line in lines)

    def _wide_operands(self) -> str:
        """The launcher's run-time condition for the 16-byte loads: those pointers aligned."""
        if not self.spec.wide_loads:
            return "false"
        _, _, accesses = self._prologue()
        checks = sorted({f"kw::is_aligned<float4>(in{self.position[id(a.node)]})"
                         for a in accesses if a.w_stride == 1})
        return " && ".join(checks) or "true"

    def _output_body(self) -> str:
        space = self.pool.shape
        env: dict[int, str] = {id(self.pool): "y"}
        lines: list[str] = []
        context = space
        segment: list[Node] = []
        for node in [*self.after, None]:
            if node is None or node.op == "reshape":
                for access in self._accesses(segment, context, space, self.out_bases):
                    if env.get(id(access.node)) != f"e{access.base}":   # not loaded yet by an earlier segment
                        env[id(access.node)] = f"e{access.base}"
                        lines.append(f"const float e{access.base} = ld({self._address(access, 'out')});")
                lines += emit_statements(segment, env, prefix="q")
                if node is not None:
                    env[id(node)] = env[id(node.inputs[0])]
                    context, segment = node.shape, []
            else:
                segment.append(node)
        lines.append(f"return {env[id(self.group.nodes[-1])]};")
        return "\n".join("  " + line for line in lines)

    def _accesses(self, nodes: Sequence[Node], context: tuple[int, ...], space: tuple[int, ...],
                  bases: list[str]) -> list[Access]:
        """One access per tensor the nodes read from outside the group: its strides over `space` (the
        pool's input or output shape; the nodes compute in `context`, `space` up to size-1 dims) and its
        per-plane base, registered in `bases` the first time it is seen."""
        found: list[Access] = []
        for node in nodes:
            for inp in node.inputs:
                if id(inp) not in self.position or any(a.node is inp for a in found):
                    continue
                strides = _through_unit_reshape(broadcast_strides(inp.shape, len(context)), context, space)
                key = (id(inp), strides, id(bases))
                if key not in self.base_of:
                    self.base_of[key] = len(bases)
                    bases.append(self._lead_offset(strides))
                w_dim = self.spec.slots[2]
                w_stride = strides[w_dim] if w_dim is not None else 0
                found.append(Access(inp, strides, self.base_of[key], w_stride))
        return found

    def _address(self, access: Access, side: str) -> str:
        pointer = f"a.in{self.position[id(access.node)]}"
        return f"{pointer} + b.{side}[{access.base}]{self._spatial_offset(access.strides)}"

    # ------------------------------------------------------------------ index arithmetic

    def _lead_offset(self, strides: tuple[int, ...]) -> str:
        """The offset of plane `plane` for a tensor with these strides over the pool's dims."""
        lead = self.spec.lead
        own = strides[:len(lead)]
        live = [j for j, size in enumerate(lead) if size != 1 and own[j] != 0]
        if not live:
            return "0"
        inner = contiguous_strides(lead)
        j = live[-1]
        unit = own[j] // inner[j]
        if own[j] % inner[j] == 0 and all(own[i] == inner[i] * unit for i, s in enumerate(lead) if s != 1):
            return "plane" if unit == 1 else f"plane * {_int(unit)}"
        terms = []
        for j in live:
            coord = "plane" if inner[j] == 1 else f"plane / {_int(inner[j])}"
            if any(s != 1 for s in lead[:j]):
                coord = f"{coord if inner[j] == 1 else f'({coord})'} % {_int(lead[j])}"
            terms.append(coord if own[j] == 1 else f"({coord}) * {_int(own[j])}")
        return " + ".join(terms)

    def _spatial_offset(self, strides: tuple[int, ...]) -> str:
        text = ""
        for axis, dim in zip("dhw", self.spec.slots, strict=True):
            stride = strides[dim] if dim is not None else 0
            if stride:
                text += f" + static_cast<idx_t>({axis})" + (f" * {_int(stride)}" if stride != 1 else "")
        return text

    def _summary(self) -> str:
        spec = self.spec
        ops = " → ".join(n.op for n in self.group.nodes if n.op != "reshape")
        if spec.adaptive:
            window = "adaptive"
        else:
            window = (f"kernel {list(spec.kernel)} stride {list(spec.stride)} padding {list(spec.padding)} "
                      f"dilation {list(spec.dilation)}")
        return (f"{ops}: {spec.planes} planes {list(spec.in_size)} → {list(spec.out_size)}, {window} "
                f"({spec.layout}, vec {spec.vec}" + (f", {spec.rows} rows" if spec.rows > 1 else "") + ")")


def _through_unit_reshape(strides: Sequence[int], source: Sequence[int], target: Sequence[int]
                          ) -> tuple[int, ...]:
    """The same strides over `target`, which has `source`'s sizes with size-1 dims inserted or removed."""
    kept = iter(s for s, size in zip(strides, source, strict=True) if size != 1)
    return tuple(next(kept) if size != 1 else 0 for size in target)


def _int(value: int) -> str:
    return str(value) if value < 2**31 else f"{value}LL"
