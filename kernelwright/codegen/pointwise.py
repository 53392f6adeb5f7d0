"""The pointwise family: IR elementwise ops → CUDA expressions, and the fused pointwise kernel.

`EXPRESSIONS` is the one table from IR op to CUDA expression. `emit_statements` turns a pointwise IR
subgraph into C statements; other families reuse it for their prologues and epilogues. The kernel prints
them into `cuda/kw_pointwise_kernel.cu.in`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from kernelwright.codegen.kernel import (
    KernelSource,
    KernelSpec,
    cpp_bool,
    entry_points,
    source_template,
    typed,
    typed_inputs,
)
from kernelwright.errors import UnsupportedOp
from kernelwright.fuse.plan import VIEW_OPS, FusedGroup
from kernelwright.ir.graph import Node
from kernelwright.ir.ops import COMPARISONS

# The flat kernel's defaults, the one place to change them (bench/kernels/bench_pointwise.py measures each
# knob; PointwiseConfig below says what they mean). Set from its H100 run of 2026-11-25 (bench/results/
# 2026-11-25-h100-80gb-hbm3-pointwise/): one pass of 512-thread blocks, one vector per thread, read-only
# loads and broadcast bands ranked first of 41 settings, 100.0% of the same-process copy in geomean over 7
# workloads (worst 99.0%), where the old persistent grid-stride loop made 86.0% (worst 73.9%: a bias add
# read element by element on the strided path).
DEFAULT_BLOCK = 512
DEFAULT_UNROLL = 1
DEFAULT_GRID = "one_pass"
DEFAULT_CACHE = "read_only"
DEFAULT_BROADCAST = True

# The fused kernel and its launcher; the holes are upper case.
TEMPLATE = source_template("kw_pointwise_kernel.cu.in")

C_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.int64: "long long", torch.int32: "int",
    torch.int16: "short", torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool",
}

# IR op → CUDA expression. Holes: {0} {1} {2} the operands (already converted to the compute type), {T}
# the compute type, and attribute names (rendered as literals of the compute type). Overloaded math
# names (exp, tanh, ...) pick the float versions for float operands.
EXPRESSIONS = {
    "neg": "(-{0})", "abs": "fabs({0})", "exp": "exp({0})", "exp2": "exp2({0})", "log": "log({0})",
    "log2": "log2({0})", "log1p": "log1p({0})", "expm1": "expm1({0})", "sqrt": "sqrt({0})",
    "rsqrt": "rsqrt({0})", "reciprocal": "kw::divide({T}(1), {0})", "sin": "sin({0})", "cos": "cos({0})",
    "tan": "tan({0})", "tanh": "tanh({0})", "sigmoid": "kw::sigmoid({0})", "erf": "erf({0})",
    "relu": "kw::relu({0})", "floor": "floor({0})", "ceil": "ceil({0})", "round": "rint({0})",
    "trunc": "trunc({0})", "sign": "kw::sign({0})", "logical_not": "(!{0})", "isnan": "kw::is_nan({0})",
    "isinf": "isinf({0})", "silu": "kw::silu({0})", "mish": "kw::mish({0})",
    "hardswish": "kw::hardswish({0})", "hardsigmoid": "kw::hardsigmoid({0})",
    "gelu": "kw::gelu_erf({0})", "gelu_tanh": "kw::gelu_tanh({0})",
    "softplus": "kw::softplus({0}, {beta}, {threshold})",
    "elu": "kw::elu({0}, {alpha}, {scale}, {input_scale})",
    "leaky_relu": "kw::leaky_relu({0}, {negative_slope})",
    "clamp": "kw::clamp({0}, {min}, {max})", "clamp_min": "kw::clamp_min({0}, {min})",
    "clamp_max": "kw::clamp_max({0}, {max})",
    "cast": "{0}", "copy": "{0}",
    "add": "({0} + {1})", "add_alpha": "({0} + {alpha} * {1})", "sub": "({0} - {1})",
    "sub_alpha": "({0} - {alpha} * {1})", "mul": "({0} * {1})", "div": "kw::divide({0}, {1})",
    "div_trunc": "trunc({0} / {1})", "div_floor": "kw::div_floor({0}, {1})", "pow": "pow({0}, {1})",
    "maximum": "kw::maximum({0}, {1})", "minimum": "kw::minimum({0}, {1})", "fmod": "fmod({0}, {1})",
    "remainder": "kw::remainder({0}, {1})", "atan2": "atan2({0}, {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "logical_and": "({0} && {1})", "logical_or": "({0} || {1})", "where": "({0} ? {1} : {2})",
}

# Integer compute types: C's own operators where the float function has no integer meaning.
INTEGER_EXPRESSIONS = {
    "abs": "kw::iabs({0})", "floor": "{0}", "ceil": "{0}", "round": "{0}", "trunc": "{0}",
    "isnan": "false", "isinf": "false", "div_trunc": "({0} / {1})", "div_floor": "kw::idiv_floor({0}, {1})",
    "fmod": "({0} % {1})", "remainder": "kw::iremainder({0}, {1})", "pow": "kw::ipow({0}, {1})",
}

# ATen's pow special-cases these exponents (exactly rounded products instead of powf).
POW_BY_CONST = {2.0: "({0} * {0})", 3.0: "({0} * {0} * {0})", 0.5: "sqrt({0})", -0.5: "rsqrt({0})",
                -1.0: "kw::divide({T}(1), {0})",
                -2.0: "kw::divide({T}(1), {0} * {0})"}

LOGICAL = frozenset({"logical_and", "logical_or", "logical_not"})
# Bool results that test the operand in its own type: converting a float to bool first would turn NaN
# and inf into `true` before the test sees them.
PREDICATES = frozenset({"isnan", "isinf"})


def c_type(dtype: torch.dtype) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise UnsupportedOp(f"no CUDA type for {dtype} in the pointwise family") from None


def c_literal(value: float | int | bool, dtype: torch.dtype) -> str:
    """`value` as a literal of `dtype`'s C type, with the rounding ATen applies to a Python scalar."""
    if dtype == torch.bool:
        return cpp_bool(value)
    if not dtype.is_floating_point:
        text = f"{int(value)}LL" if dtype == torch.int64 else str(int(value))
        return f"({text})" if int(value) < 0 else text
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        bits = ("__int_as_float(0x7fffffff)", "__int_as_float(0x7f800000)") if dtype == torch.float32 else \
            ("__longlong_as_double(0x7fffffffffffffffLL)", "__longlong_as_double(0x7ff0000000000000LL)")
        text = bits[0] if math.isnan(value) else bits[1]
        return f"(-{text})" if value < 0 else text
    text = str(np.float32(value)) if dtype == torch.float32 else repr(value)
    if not any(c in text for c in ".e"):
        text += ".0"
    text += "f" if dtype == torch.float32 else ""
    return f"({text})" if value < 0 or text.startswith("-") else text


def compute_dtype(node: Node) -> torch.dtype:
    """The type the op computes in: the promoted input type for comparisons, bool for logical ops,
    the source type for casts and predicates, the output type otherwise (ATen's opmath for FP32 is float
    too)."""
    if node.op in COMPARISONS:
        return _promoted(node.inputs)
    if node.op in LOGICAL:
        return torch.bool
    if node.op == "cast" or node.op in PREDICATES:
        return node.inputs[0].dtype
    return node.dtype


def _promoted(nodes: Sequence[Node]) -> torch.dtype:
    def as_arg(n: Node):
        if n.op == "const":
            return n.attr("value")
        return torch.empty(n.shape, dtype=n.dtype, device="meta")

    return torch.result_type(as_arg(nodes[0]), as_arg(nodes[1]))


def reciprocal_literal(divisor: float | int, dtype: torch.dtype) -> str:
    """1 / divisor as ATen's CUDA division by a scalar computes it (BinaryDivTrueKernel.cu: opmath's one
    over the scalar converted to opmath, then a multiply): the literal that `x / divisor` multiplies by."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = np.float32(1) / np.float32(divisor) if dtype == torch.float32 else 1 / np.float64(divisor)
    return c_literal(float(inverse), dtype)


def op_expression(node: Node, operands: Sequence[str]) -> str:
    """CUDA expression computing `node` from its operands' C expressions (each of its own input's type;
    consts may be given as None and are then inlined as literals of the compute type)."""
    ct = compute_dtype(node)
    key, attrs = _expression_key(node)
    args = []
    for index, (inp, text) in enumerate(zip(node.inputs, operands, strict=True)):
        want = torch.bool if (node.op == "where" and index == 0) else ct
        if inp.op == "const":
            args.append(c_literal(inp.attr("value"), want))
        elif inp.dtype != want:
            args.append(f"static_cast<{c_type(want)}>({text})")
        else:
            args.append(text)
    if key == "div" and ct.is_floating_point and node.inputs[1].op == "const":
        # by a scalar: times its reciprocal, as ATen's CUDA kernel does (one multiply, and its very bits)
        template = "({0} * {1})"
        args[1] = reciprocal_literal(node.inputs[1].attr("value"), ct)
    elif node.op == "pow" and node.inputs[1].op == "const" and ct.is_floating_point \
            and float(node.inputs[1].attr("value")) in POW_BY_CONST:
        template = POW_BY_CONST[float(node.inputs[1].attr("value"))]
    elif not ct.is_floating_point and (ct != torch.bool or key in PREDICATES) and key in INTEGER_EXPRESSIONS:
        template = INTEGER_EXPRESSIONS[key]
    else:
        template = EXPRESSIONS[key]
    literals = {name: c_literal(value, ct) for name, value in attrs.items()}
    expression = template.format(*args, T=c_type(ct), **literals)
    if node.op == "cast":
        out = node.dtype
        return f"({expression} != 0)" if out == torch.bool else f"static_cast<{c_type(out)}>({expression})"
    return expression


def _expression_key(node: Node) -> tuple[str, dict]:
    """The EXPRESSIONS entry for a node and the attributes its template reads."""
    op = node.op
    if op not in EXPRESSIONS and op not in ("gelu",):
        raise UnsupportedOp(f"the pointwise family has no CUDA expression for op {op!r}")
    if op == "gelu":
        return ("gelu_tanh" if node.attr("approximate") == "tanh" else "gelu"), {}
    if op == "softplus":
        return op, {"beta": node.attr("beta", 1.0), "threshold": node.attr("threshold", 20.0)}
    if op == "elu":
        return op, {k: node.attr(k, 1.0) for k in ("alpha", "scale", "input_scale")}
    if op == "leaky_relu":
        return op, {"negative_slope": node.attr("negative_slope", 0.01)}
    if op == "clamp":
        lo, hi = node.attr("min"), node.attr("max")
        if lo is None and hi is None:
            return "cast", {}
        bounds = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        return ("clamp" if len(bounds) == 2 else f"clamp_{next(iter(bounds))}"), bounds
    if op in ("add", "sub") and node.attr("alpha", 1) != 1:
        return f"{op}_alpha", {"alpha": node.attr("alpha")}
    if op == "div" and node.attr("rounding_mode") in ("trunc", "floor"):
        return f"div_{node.attr('rounding_mode')}", {}
    return op, {}


def emit_statements(nodes: Iterable[Node], env: MutableMapping[int, str], prefix: str = "v") -> list[str]:
    """C statements computing each pointwise node (in topological order) from `env`, which maps the id of
    every value read from outside to a C expression of its type; consts are inlined. Each computed node
    is added to `env` as a new variable `<prefix><n>`."""
    lines = []
    for node in nodes:
        operands = [None if i.op == "const" else env[id(i)] for i in node.inputs]
        name = f"{prefix}{len(env)}"
        while name in env.values():
            name += "_"
        lines.append(f"const {c_type(node.dtype)} {name} = {op_expression(node, operands)};")
        env[id(node)] = name
    return lines


# ============================================================================================ the kernel
# A fused pointwise group iterates over one domain (its outputs' shape). Views and broadcasts inside the
# group are pushed down to its inputs: each (input, chain of views) pair becomes one operand, a strided
# view that the runtime (kw_runtime.cpp) builds with ATen metadata ops, so the kernel only sees pointers
# and strides over the domain. Each operand also gets a band (kw::Band): the layout a contiguous input
# has after its views, contiguous over some dims of the domain and broadcast over the others. At run time
# the launcher picks the flat kernel (16-byte vector loads/stores; U vectors per thread in flight; a scalar
# tail) when every operand has its band's strides and is aligned, else the strided kernel (32-bit offsets
# unless the strides need 64).

INT32_LIMIT = 2**31 - 2**26   # leaves room for the grid stride past the last index


RESIDENT_THREADS_PER_SM = 2048     # sm_80 / sm_90: the persistent grid fills every SM with this many threads
GRIDS = ("persistent", "one_pass")
# `cache` knob → the kw::Cache policy of the flat kernel's loads and stores (kw_common.cuh says which PTX).
CACHE_POLICIES = {"read_only": "kw::Cache::ReadOnly", "streaming": "kw::Cache::Streaming",
                  "no_allocate": "kw::Cache::NoAllocate"}


@dataclass(frozen=True)
class PointwiseConfig:
    """Launch knobs of the flat kernel (the strided kernel uses `block` and the persistent grid)."""

    block: int = DEFAULT_BLOCK           # threads per block
    unroll: int = DEFAULT_UNROLL         # vectors per operand a thread loads before computing (U)
    grid: str = DEFAULT_GRID             # "persistent": grid-stride loop; "one_pass": one block per tile
    cache: str = DEFAULT_CACHE           # a key of CACHE_POLICIES
    broadcast: bool = DEFAULT_BROADCAST  # broadcast operands (a bias [C] over [N, C], ...) stay on the flat
                                         # kernel; if False only contiguous and single-value operands do

    def __post_init__(self):
        if self.block % 32 or not 32 <= self.block <= 1024 or self.unroll < 1 or self.grid not in GRIDS \
                or self.cache not in CACHE_POLICIES:
            raise ValueError(f"invalid pointwise config {self}")

    @property
    def blocks_per_sm(self) -> int:
        return max(1, RESIDENT_THREADS_PER_SM // self.block)

    @staticmethod
    def from_tuple(config: tuple) -> PointwiseConfig:
        return PointwiseConfig(**dict(config))

    def as_tuple(self) -> tuple:
        return tuple(sorted(self.__dict__.items()))


@dataclass(frozen=True)
class Operand:
    input_index: int                  # position in group.inputs
    views: tuple[tuple, ...]          # ATen view calls, in order, taking the input to the domain shape
    dtype: torch.dtype


class _Body:
    """Builds the per-element C body: one variable per (node, view chain) pair, so a value read through two
    different views is computed twice and a value read twice through the same view once."""

    def __init__(self, group: FusedGroup):
        self.group = group
        self.members = {id(n) for n in group.nodes}
        self.input_pos = {id(n): i for i, n in enumerate(group.inputs)}
        self.operands: list[Operand] = []
        self.lines: list[str] = []
        self.memo: dict[tuple, str] = {}

    def value(self, node: Node, chain: tuple[tuple, ...]) -> str:
        key = (id(node), chain)
        if key in self.memo:
            return self.memo[key]
        if id(node) not in self.members:
            operand = Operand(self.input_pos[id(node)], chain, node.dtype)
            if operand not in self.operands:
                self.operands.append(operand)
            text = f"a{self.operands.index(operand)}"
        elif node.op in VIEW_OPS:
            text = self.value(node.inputs[0], (_view_call(node),) + chain)
        else:
            args = []
            for inp in node.inputs:
                if inp.op == "const":
                    args.append(None)
                    continue
                inner = chain if inp.shape == node.shape else (("expand", node.shape),) + chain
                args.append(self.value(inp, inner))
            text = f"v{len(self.lines)}"
            self.lines.append(f"const {c_type(node.dtype)} {text} = {op_expression(node, args)};")
        self.memo[key] = text
        return text


def _view_call(node: Node) -> tuple:
    if node.op == "slice":
        return ("slice", node.attr("dim"), node.attr("start"), node.attr("end"), node.attr("step"))
    if node.op == "select":
        return ("select", node.attr("dim"), node.attr("index"))
    if node.op == "permute":
        return ("permute", tuple(node.attr("dims")))
    return (node.op, tuple(node.attr("shape")))    # reshape, expand


def _step(call: tuple) -> tuple:
    """A view call as a runtime operand step: the op name, then its integers flat."""
    op, *args = call
    if op in ("reshape", "expand", "permute"):
        return (op, *(int(v) for v in args[0]))
    return (op, *(int(a) for a in args))


def render(group: FusedGroup) -> KernelSource:
    config = PointwiseConfig.from_tuple(group.config)
    domain = group.outputs[0].shape
    if any(o.shape != domain for o in group.outputs):
        raise UnsupportedOp("a pointwise group's outputs must share one shape (the planner guarantees it)")
    body = _Body(group)
    results = [body.value(out, ()) for out in group.outputs]
    # A rank-0 domain runs as rank 1 with one element.
    kernel_shape = domain or (1,)
    operands = [o if domain else Operand(o.input_index, o.views + (("reshape", (1,)),), o.dtype)
                for o in body.operands]
    name = kernel_name(group)
    numel = math.prod(kernel_shape)
    types = [c_type(o.dtype) for o in operands] + [c_type(o.dtype) for o in group.outputs]
    width = max(torch.empty((), dtype=o.dtype).element_size() for o in list(operands) + list(group.outputs))
    inputs, outputs = types[:len(operands)], types[len(operands):]
    bands = [_band(o, group, kernel_shape, config.broadcast) for o in operands]
    holes = {
        "NAME": name,
        "RANK": len(kernel_shape),
        "NUMEL": f"{numel}LL",
        "SIZES": ", ".join(str(s) for s in kernel_shape),
        "OPERANDS": len(operands),
        "VEC": max(1, 16 // width),
        "BLOCK": config.block,
        "UNROLL": config.unroll,
        "ONE_PASS": cpp_bool(config.grid == "one_pass"),
        "BLOCKS_PER_SM": config.blocks_per_sm,
        "CACHE": CACHE_POLICIES[config.cache],
        "FLAT_INDEX": "int" if numel < INT32_LIMIT else "long long",
        "STRIDED_INT32": cpp_bool(numel < INT32_LIMIT),
        "BANDS": "\n".join(f"using Band{k} = {b.template()};  // {b.kind}" for k, b in enumerate(bands)),
        "FLAT_STRIDES": ", ".join("{" + ", ".join(str(x) for x in band.strides) + "}" for band in bands),
        "ALIGNMENT": ", ".join(f"Band{k}::alignment<{t}, kVec>()" for k, t in enumerate(inputs)),
        "POINTER_FIELDS": "\n".join(
            [f"  const {t}* in{k};" for k, t in enumerate(inputs)]
            + [f"  {t}* out{k};" for k, t in enumerate(outputs)]),
        "POINTER_INIT": ", ".join(
            [f"static_cast<const {t}*>(in[{k}])" for k, t in enumerate(inputs)]
            + [f"static_cast<{t}*>(out[{k}])" for k, t in enumerate(outputs)]),
        "COMPUTE_PARAMS": ", ".join(
            [f"const {t} a{k}" for k, t in enumerate(inputs)]
            + [f"{t}& r{k}" for k, t in enumerate(outputs)]),
        "COMPUTE_BODY": "\n".join(f"  {line}" for line in body.lines)
                        + "\n" + "\n".join(f"  r{k} = {res};" for k, res in enumerate(results)),
        "VEC_DECLS": "\n".join([f"  kw::Vec<{t}, kVec> x{k}[U];" for k, t in enumerate(inputs)]
                               + [f"  kw::Vec<{t}, kVec> y{k}[U];" for k, t in enumerate(outputs)]),
        "VEC_LOADS": "\n".join(f"    x{k}[u] = Band{k}::load_vec<{t}, kVec, kCache>(p.in{k}, i);"
                               for k, t in enumerate(inputs)),
        "VEC_CALL": ", ".join([f"x{k}[u].v[j]" for k in range(len(inputs))]
                              + [f"y{k}[u].v[j]" for k in range(len(outputs))]),
        "VEC_STORES": "\n".join(f"    kw::store_vec<{t}, kVec, kCache>(p.out{k} + i, y{k}[u]);"
                                for k, t in enumerate(outputs)),
        "FLAT_CALL": ", ".join([f"kw::load<{t}, kCache>(p.in{k} + Band{k}::offset(i))"
                                for k, t in enumerate(inputs)]
                               + [f"p.out{k}[i]" for k in range(len(outputs))]),
        "STRIDED_CALL": ", ".join([f"kw::load(p.in{k} + off[{k}])" for k in range(len(inputs))]
                                  + [f"p.out{k}[i]" for k in range(len(outputs))]),
    }
    holes.update(_tiled_holes(group, operands, kernel_shape, inputs, len(outputs)))
    cuda = TEMPLATE.substitute(holes)
    entry = entry_points(name, f"  return kw::strided_entry<{len(operands)}, {len(kernel_shape)}>("
                               f"{name}_launch, in, out, stream);")
    # The inputs as the kernel sees them: views and broadcasts folded into strides over the domain.
    spec = KernelSpec(typed_inputs(group.inputs),
                      tuple((o.input_index, tuple(_step(v) for v in o.views), None) for o in operands),
                      typed(group.outputs))
    return KernelSource(name=name, cuda=cuda + entry, spec=spec, ir_comment=describe_group(group))


# Static shared memory a block may declare (more needs a dynamic allocation and an opt-in attribute; ptxas
# refuses it for sm_80). Each tiled operand takes TILE * (TILE + 1) elements.
TILE_SMEM_LIMIT, TILE = 48 * 1024, 64  # TILE: the tiled kernel's kTileSize
C_SIZES = {name: dtype.itemsize for dtype, name in C_TYPES.items()}


def _tiles_that_fit(transposing: list[int], inputs: list[str]) -> set[int]:
    """The transposed operands that get a shared-memory tile, in order while the tiles fit the static
    limit (three float tiles are 49,920 bytes); the others are read through their strides directly."""
    tiled, used = set(), 0
    for k in transposing:
        size = TILE * (TILE + 1) * C_SIZES[inputs[k]]
        if used + size <= TILE_SMEM_LIMIT:
            tiled.add(k)
            used += size
    return tiled


def _tiled_holes(group: FusedGroup, operands: list[Operand], sizes: tuple[int, ...], inputs: list[str],
                 n_outputs: int) -> dict[str, object]:
    """The tiled (transposing) kernel's holes. It exists when some operand is unit-stride along a domain
    dim T other than the innermost live dim L and strided along L (a permuted input): those operands go
    through a shared-memory tile read along T; the other operands (coalesced where unit-stride or broadcast
    along L) and the outputs are read and written along L. Strides are those of contiguous inputs through the
    views; the launcher takes this kernel only when the operands have them at run time."""
    rank = len(sizes)
    strides = [_view_strides(group.inputs[o.input_index].shape, o.views) for o in operands]
    live = [d for d in range(rank) if sizes[d] != 1]
    out_strides = _band_strides(sizes, 0, rank)
    numels = [math.prod(sizes)] + [group.inputs[o.input_index].numel for o in operands]
    dim_t, dim_l, tile = 0, (live or [0])[-1], set()
    if len(live) >= 2:
        transposing = [k for k, st in enumerate(strides) if st[dim_l] not in (0, 1)]
        unit = [[d for d in live if d != dim_l and st[d] == 1] for st in strides]
        first = unit[transposing[0]] if transposing else []
        if first and all(first[0] in unit[k] for k in transposing):
            dim_t, tile = first[0], _tiles_that_fit(transposing, inputs)

    untiled = [k for k in range(len(inputs)) if k not in tile]

    def load(k: int) -> str:
        return (f"kw::load<{inputs[k]}, kCache>(p.in{k} + base[{k}] + t * kTiledStrides[{k}][kDimT] + "
                f"l * kTiledStrides[{k}][kDimL])")

    return {
        "TILED": cpp_bool(tile), "DIM_T": dim_t, "DIM_L": dim_l, "TILE_SIZE": TILE,
        "TILED_STRIDES": ", ".join("{" + ", ".join(map(str, st)) + "}" for st in strides),
        "OUT_STRIDES": ", ".join(map(str, out_strides)),
        "TILED_INDEX": "int" if max(numels, default=0) < INT32_LIMIT else "long long",
        "TILE_DECLS": "\n".join(f"  __shared__ {inputs[k]} tile{k}[kTileSize][kTileSize + 1];"
                                for k in sorted(tile)),
        "TILE_LOADS": "\n".join(f"      tile{k}[r][lane] = {load(k)};" for k in sorted(tile)),
        "TILED_REG_DECLS": "\n".join(f"  {inputs[k]} x{k}[kPer];" for k in untiled),
        "TILED_REG_LOADS": "\n".join(f"      x{k}[i] = {load(k)};" for k in untiled),
        "TILED_CALL": ", ".join([f"tile{k}[lane][r]" if k in tile else f"x{k}[i]" for k in range(len(inputs))]
                                + [f"p.out{k}[o]" for k in range(n_outputs)]),
    }


@dataclass(frozen=True)
class Band:
    """How the flat kernel reads an operand: element i of the domain at (i / inner) % extent (kw::Band),
    which holds when the operand has `strides` over the domain (size-1 dims aside)."""

    inner: int
    extent: int
    strides: tuple[int, ...]
    kind: str       # a few words for the generated source
    inner2: int = 1     # a second, outer band: + ((i / inner2) % extent2) * extent
    extent2: int = 1

    def template(self) -> str:
        """The kw::Band type's arguments."""
        outer = f", {self.inner2}LL, {self.extent2}LL" if self.extent2 > 1 else ""
        return f"kw::Band<{self.inner}LL, {self.extent}LL, kNumel{outer}>"


def _band(operand: Operand, group: FusedGroup, sizes: tuple[int, ...], broadcast: bool) -> Band:
    """The band a contiguous input becomes through the operand's views: contiguous over dims [a, c) of the
    domain and broadcast over the others, or over two such runs of dims with broadcast dims between them
    (the outer run's stride the inner run's extent). Views that make no band (a permute, a strided slice),
    and any broadcast but a single value when `broadcast` is off, get the contiguous band: the flat kernel
    then runs only if the operand happens to be contiguous at run time."""
    numel = math.prod(sizes)
    contiguous = Band(1, numel, _band_strides(sizes, 0, len(sizes)), "contiguous")
    strides = _view_strides(group.inputs[operand.input_index].shape, operand.views)
    runs = _kept_runs(sizes, strides)
    if not runs:
        return Band(1, 1, (0,) * len(sizes), "one value")
    if len(runs) > 2:
        return contiguous
    (a, c), (a1, c1) = runs[-1], runs[0]
    inner, extent = math.prod(sizes[c:]), math.prod(sizes[a:c])
    expected = _band_strides(sizes, a, c)
    if len(runs) == 2:
        expected = tuple(e + s * extent for e, s in zip(expected, _band_strides(sizes, a1, c1), strict=True))
    if any(size != 1 and stride != want for size, stride, want in zip(sizes, strides, expected, strict=True)):
        return contiguous
    if extent == numel or not broadcast:
        return contiguous
    if len(runs) == 1:
        return Band(inner, extent, expected, f"dims [{a}, {c}), broadcast over the others")
    return Band(inner, extent, expected, f"dims [{a1}, {c1}) and [{a}, {c}), broadcast over the others",
                math.prod(sizes[c1:]), math.prod(sizes[a1:c1]))


def _kept_runs(sizes: tuple[int, ...], strides: tuple[int, ...]) -> list[tuple[int, int]]:
    """The runs [a, c) of dims an operand is read along (stride not 0), split where a broadcast dim (size
    above 1, stride 0) lies between; size-1 dims join either."""
    runs: list[tuple[int, int]] = []
    start = end = None
    for d, size in enumerate(sizes):
        if size == 1:
            continue
        if strides[d] != 0:
            start = d if start is None else start
            end = d + 1
        elif start is not None:
            runs.append((start, end))
            start = None
    if start is not None:
        runs.append((start, end))
    return runs


def _band_strides(sizes: tuple[int, ...], a: int, c: int) -> tuple[int, ...]:
    return tuple(math.prod(sizes[d + 1:c]) if a <= d < c else 0 for d in range(len(sizes)))


def _view_strides(shape: tuple[int, ...], views: tuple[tuple, ...]) -> tuple[int, ...]:
    """Strides of a contiguous tensor of `shape` after the runtime's view steps (ATen's own rules, on
    meta tensors: a reshape that cannot be a view copies, as it does in the runtime)."""
    t = torch.empty(shape, device="meta")
    for op, *args in views:
        t = getattr(torch.ops.aten, op)(t, *args)
    return tuple(t.stride())


def kernel_name(group: FusedGroup) -> str:
    """A C identifier that says what the kernel computes and is unique per group content (and config,
    where it is not the default)."""
    ops = "_".join(dict.fromkeys(n.op for n in group.nodes if n.op not in VIEW_OPS))[:48]
    config = PointwiseConfig.from_tuple(group.config)
    text = describe_group(group) + ("" if config == PointwiseConfig() else f"\n{config.as_tuple()}")
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"pw_{ops}_{digest}"


def describe_group(group: FusedGroup) -> str:
    """The group's IR, one node per line, naming inputs `in0..` and values `%0..` (the ir_comment)."""
    names = {id(n): f"in{k}" for k, n in enumerate(group.inputs)}
    lines = [f"in{k}: {_type_text(n)}  ({n.op} {n.name})".rstrip() for k, n in enumerate(group.inputs)]
    for index, node in enumerate(group.nodes):
        names[id(node)] = f"%{index}"
        args = ", ".join(names[id(i)] if i.op != "const" else repr(i.attr("value")) for i in node.inputs)
        attrs = " ".join(f"{k}={v}" for k, v in node.attrs)
        lines.append(f"%{index}: {_type_text(node)} = {node.op}({args}) {attrs}".rstrip())
    lines.append("returns " + ", ".join(names[id(n)] for n in group.outputs))
    return "\n".join(lines)


def _type_text(node: Node) -> str:
    return f"{str(node.dtype).replace('torch.', '')}{list(node.shape)}"
