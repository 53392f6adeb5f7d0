"""The pointwise family: IR elementwise ops → CUDA expressions, and the fused pointwise kernel.

`EXPRESSIONS` is the one table from IR op to CUDA expression. `emit_statements` turns a pointwise IR
subgraph into C statements; other families reuse it for their prologues and epilogues.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, MutableMapping, Sequence

import numpy as np
import torch

from kernelwright.errors import UnsupportedOp
from kernelwright.ir.graph import Node

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
    "rsqrt": "rsqrt({0})", "reciprocal": "({T}(1) / {0})", "sin": "sin({0})", "cos": "cos({0})",
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
    "cast": "{0}",
    "add": "({0} + {1})", "add_alpha": "({0} + {alpha} * {1})", "sub": "({0} - {1})",
    "sub_alpha": "({0} - {alpha} * {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
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
                -1.0: "({T}(1) / {0})", -2.0: "({T}(1) / ({0} * {0}))"}

COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
LOGICAL = frozenset({"logical_and", "logical_or", "logical_not"})


def c_type(dtype: torch.dtype) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise UnsupportedOp(f"no CUDA type for {dtype} in the pointwise family") from None


def c_literal(value: float | int | bool, dtype: torch.dtype) -> str:
    """`value` as a literal of `dtype`'s C type, with the rounding ATen applies to a Python scalar."""
    if dtype == torch.bool:
        return "true" if value else "false"
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
    the source type for casts, the output type otherwise (ATen's opmath for FP32 is float too)."""
    if node.op in COMPARISONS:
        return _promoted(node.inputs)
    if node.op in LOGICAL:
        return torch.bool
    if node.op == "cast":
        return node.inputs[0].dtype
    return node.dtype


def _promoted(nodes: Sequence[Node]) -> torch.dtype:
    def as_arg(n: Node):
        if n.op == "const":
            return n.attr("value")
        return torch.empty(n.shape, dtype=n.dtype, device="meta")

    return torch.result_type(as_arg(nodes[0]), as_arg(nodes[1]))


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
    if node.op == "pow" and node.inputs[1].op == "const" and ct.is_floating_point \
            and float(node.inputs[1].attr("value")) in POW_BY_CONST:
        template = POW_BY_CONST[float(node.inputs[1].attr("value"))]
    elif not (ct.is_floating_point or ct == torch.bool) and key in INTEGER_EXPRESSIONS:
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
