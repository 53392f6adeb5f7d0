"""The op table: one entry per IR op (see docs/ir.md for the vocabulary).

Each op has a category (what kind of kernel family could own it) and one piece of semantics: its ATen
source, a Python expression calling `torch` (`torch.softmax(x, dim=1)`). That one expression is what the
emitter writes into a ModelNew file, what the reference interpreter executes on the CPU, and — evaluated on
meta tensors — the op's shape and dtype inference. Three uses, one definition: they cannot disagree.

Nodes are built with `make_node`, which normalizes the attributes (non-negative sorted dims, concrete
shapes for `reshape`/`expand`) and infers the output type; leaves with `input_node`, `param_node`,
`buffer_node` and `const_node`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelwright.ir.graph import Node, freeze_attrs

CATEGORIES = ("pointwise", "reduction", "softmax", "norm", "scan", "matmul", "conv", "pool", "view", "other")

Source = Callable[[Sequence[str], Mapping[str, Any]], str]
Normalize = Callable[[Sequence[Node], dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class OpDef:
    name: str
    category: str
    source: Source
    normalize: Normalize | None = None

    def infer(self, inputs: Sequence[Node], attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], torch.dtype]:
        """Output shape and dtype, by running the op's ATen source on meta tensors (no memory, no time)."""
        return infer_type(self.name, inputs, attrs)[:2]


def literal(value: Any) -> str:
    """A Python expression for an attribute value, valid in a file that imports only torch."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, tuple):
        return (
            f"({literal(value[0])},)" if len(value) == 1 else "(" + ", ".join(literal(v) for v in value) + ")"
        )
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    return repr(value)


# ----------------------------------------------------------------------------------------- normalization


def _rank(node: Node) -> int:
    return len(node.shape)


def _wrap(dim: int, rank: int) -> int:
    rank = max(rank, 1)  # a 0-d tensor accepts dim 0 and -1, as in torch
    if not -rank <= dim < rank:
        raise ValueError(f"dim {dim} out of range for a tensor of rank {rank}")
    return dim % rank


def _norm_dims(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    """`dims` as a sorted tuple of non-negative ints; None or () means every dim."""
    rank = _rank(inputs[0])
    dims = attrs.get("dims")
    if dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0):
        dims = tuple(range(rank))
    elif isinstance(dims, int):
        dims = (dims,)
    attrs["dims"] = tuple(sorted({_wrap(d, rank) for d in dims}))
    attrs.setdefault("keepdim", False)
    return attrs


def _norm_dim(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    if attrs.get("dim") is not None:
        attrs["dim"] = _wrap(attrs["dim"], _rank(inputs[0]))
    return attrs


def _norm_arg_reduce(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    attrs.setdefault("dim", None)
    attrs.setdefault("keepdim", False)
    return _norm_dim(inputs, attrs)


def _norm_permute(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    attrs["dims"] = tuple(_wrap(d, _rank(inputs[0])) for d in attrs["dims"])
    return attrs


def _norm_flip(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    attrs["dims"] = tuple(sorted({_wrap(d, _rank(inputs[0])) for d in attrs["dims"]}))
    return attrs


def _norm_slice(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    """Python slice semantics made explicit: non-negative `start <= end` within the dim's size."""
    dim = _wrap(attrs["dim"], _rank(inputs[0]))
    size = inputs[0].shape[dim]
    start, end, _ = slice(attrs.get("start"), attrs.get("end")).indices(size)
    attrs.update(dim=dim, start=start, end=max(start, end), step=int(attrs.get("step", 1)))
    return attrs


def _norm_select(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    dim = _wrap(attrs["dim"], _rank(inputs[0]))
    attrs.update(dim=dim, index=_wrap(attrs["index"], inputs[0].shape[dim]))
    return attrs


def _norm_cat(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    attrs["dim"] = _wrap(attrs.get("dim", 0), max(_rank(n) for n in inputs))
    return attrs


def _norm_softmax(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    return _norm_dim(inputs, attrs)


def _norm_channel_dim(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    """`channel_dim` non-negative, and dropped when it is 1 (PyTorch's channel dim): a norm the layout pass
    never moved keeps exactly the attributes it always had, so its graph and cache keys are unchanged."""
    if "channel_dim" in attrs:
        dim = _wrap(attrs.pop("channel_dim"), _rank(inputs[0]))
        if dim != 1:
            attrs["channel_dim"] = dim
    return attrs


def _norm_group_norm(inputs: Sequence[Node], attrs: dict[str, Any]) -> dict[str, Any]:
    attrs = _norm_channel_dim(inputs, attrs)
    if attrs.get("channel_dim") == 0:
        raise ValueError("group_norm normalizes each sample: its channel_dim cannot be the batch dim 0")
    return attrs


# ------------------------------------------------------------------------------------------------ sources


def _fn(template: str) -> Source:
    """A source from a format string: `{0}`, `{1}` are the inputs, `{name}` the literal of an attr."""
    return lambda a, k: template.format(*a, **{key: literal(v) for key, v in k.items()})


def _reduce(fn: str) -> Source:
    return lambda a, k: f"torch.{fn}({a[0]}, dim={literal(k['dims'])}, keepdim={k['keepdim']})"


def _var_like(fn: str) -> Source:
    return lambda a, k: (
        f"torch.{fn}({a[0]}, dim={literal(k['dims'])}, correction={literal(k['correction'])}, "
        f"keepdim={k['keepdim']})"
    )


def _arg_reduce(fn: str) -> Source:
    return lambda a, k: f"torch.{fn}({a[0]}, dim={k['dim']}, keepdim={k['keepdim']})"


def _optional_inputs(a: Sequence[str], k: Mapping[str, Any], flags: Sequence[str]) -> list[str]:
    """Expressions for optional inputs in order, `None` where the flag says the input is absent."""
    present = iter(a[1:])
    out = []
    for flag in flags:
        out.append(next(present) if k.get(flag) else "None")
    return out


def _layer_norm(a: Sequence[str], k: Mapping[str, Any]) -> str:
    w, b = _optional_inputs(a, k, ("has_weight", "has_bias"))
    shape = literal(k["normalized_shape"])
    return f"torch.nn.functional.layer_norm({a[0]}, {shape}, {w}, {b}, {literal(k['eps'])})"


def _group_norm(a: Sequence[str], k: Mapping[str, Any]) -> str:
    w, b = _optional_inputs(a, k, ("has_weight", "has_bias"))
    return f"torch.nn.functional.group_norm({a[0]}, {k['groups']}, {w}, {b}, {literal(k['eps'])})"


def _batch_norm(a: Sequence[str], k: Mapping[str, Any]) -> str:
    present = iter(a[1:])
    w = next(present) if k.get("has_weight") else "None"
    b = next(present) if k.get("has_bias") else "None"
    rm, rv = (next(present), next(present)) if k.get("has_running") else ("None", "None")
    # Training-mode batch_norm reads no running stats here (their updates are separate IR nodes), so the
    # functional call never mutates anything.
    return (
        f"torch.nn.functional.batch_norm({a[0]}, {rm}, {rv}, {w}, {b}, training={k['training']}, "
        f"momentum={literal(k['momentum'])}, eps={literal(k['eps'])})"
    )


def _at_channel_dim(source: Source) -> Source:
    """A norm whose channels are dim `channel_dim` (absent: 1): the PyTorch op on the view with that dim
    moved to position 1 (the other dims keep their order), its result moved back. The layout pass sets it
    on norms it runs on channels-last data (`rewrite/layout.py`); as ATen source, these two views make the
    interpreter, shape inference and an ATen fallback exact for it."""

    def moved(a: Sequence[str], k: Mapping[str, Any]) -> str:
        dim = k.get("channel_dim", 1)
        if dim == 1:
            return source(a, k)
        return f"{source([f'{a[0]}.movedim({dim}, 1)', *a[1:]], k)}.movedim(1, {dim})"

    return moved


def _linear(a: Sequence[str], k: Mapping[str, Any]) -> str:
    return f"torch.nn.functional.linear({a[0]}, {a[1]}, {a[2] if len(a) > 2 else 'None'})"


# The comparison ops: bool results of two operands (the pointwise codegen's predicates, the rewrites' masks).
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def _conv(a: Sequence[str], k: Mapping[str, Any]) -> str:
    n = len(k["stride"])
    bias = a[2] if len(a) > 2 else "None"
    x, w = a[0], a[1]
    geometry = {key: k.get(key) for key in ("stride", "padding", "output_padding", "dilation")}
    suffix = ""
    if k.get("channels_last") and n == 1:
        # A 1-D convolution on [N, L, C] data runs as the 2-D one of height 1 on its [N, 1, L, C] view:
        # cuDNN has NHWC kernels, none of its own for NLC (about 2x faster than NCL on an H100:
        # [16, 256, 16381] * 5 taps 0.465 vs 0.906 ms); its result is viewed back as [N, L', O].
        x, w = f"{x}.unsqueeze(1)", f"{w}.unsqueeze(1)"
        geometry = {key: (int(key in ("stride", "dilation")), v[0]) for key, v in geometry.items()
                    if v is not None}
        n, suffix = 2, ".squeeze(1)"
    if k.get("channels_last"):
        # Input [N, *spatial, C] and weight [O, *kernel, C/groups] ([C, *kernel, O/groups] transposed), both
        # contiguous: their NC* views are channels_last, which selects cuDNN's NHWC kernels (the faster
        # ones on Hopper); the result is viewed back as [N, *spatial, O], contiguous (`rewrite/layout.py`).
        to_nc, fmt = channels_first_dims(n + 2), _CHANNELS_LAST_FORMAT[n]
        x = f"{x}.permute({literal(to_nc)}).contiguous(memory_format={fmt})"
        w = f"{w}.permute({literal(to_nc)})"
        suffix = f".permute({literal(channels_last_dims(n + 2))})" + suffix
    stride, padding, dilation = (literal(geometry[key]) for key in ("stride", "padding", "dilation"))
    if k["transposed"]:
        call = (
            f"torch.nn.functional.conv_transpose{n}d({x}, {w}, {bias}, stride={stride}, "
            f"padding={padding}, output_padding={literal(geometry['output_padding'])}, "
            f"groups={k['groups']}, dilation={dilation})"
        )
    else:
        call = (
            f"torch.nn.functional.conv{n}d({x}, {w}, {bias}, stride={stride}, "
            f"padding={padding}, dilation={dilation}, groups={k['groups']})"
        )
    return call + suffix


def row_op_dims(node: Node) -> tuple[int, ...] | None:
    """The dims a row-wise op normalizes over (softmax, log_softmax: its dim; layer_norm: its last
    normalized_ndim dims), its result keeping the input's shape; None for any other op."""
    if node.op in ("softmax", "log_softmax"):
        return (node.attr("dim"),)
    if node.op == "layer_norm":
        rank = len(node.inputs[0].shape)
        return tuple(range(rank - node.attr("normalized_ndim"), rank))
    return None


def channels_last_dims(rank: int) -> tuple[int, ...]:
    """The permutation taking [N, C, *spatial] to [N, *spatial, C]."""
    return (0, *range(2, rank), 1)


def channels_first_dims(rank: int) -> tuple[int, ...]:
    """The permutation taking [N, *spatial, C] to [N, C, *spatial]."""
    return (0, rank - 1, *range(1, rank - 1))


# Spatial rank -> the memory format of a [N, C, *spatial] view of contiguous [N, *spatial, C] data.
_CHANNELS_LAST_FORMAT = {2: "torch.channels_last", 3: "torch.channels_last_3d"}


def _pool_layout(call: Callable[[str], str], x: str, k: Mapping[str, Any], n: int) -> str:
    """`call(x)`, or with `channels_last` (set by the layout pass) on [N, *spatial, C] data: the pool of its
    NC* view (channels-last strides, which select ATen's NHWC pooling kernels), viewed back as
    [N, *spatial', C] (`rewrite/layout.py`)."""
    if not k.get("channels_last"):
        return call(x)
    return (f"{call(f'{x}.permute({literal(channels_first_dims(n + 2))})')}"
            f".permute({literal(channels_last_dims(n + 2))})")


def _max_pool(a: Sequence[str], k: Mapping[str, Any]) -> str:
    n = len(k["kernel"])
    return _pool_layout(lambda x: (
        f"torch.nn.functional.max_pool{n}d({x}, {literal(k['kernel'])}, {literal(k['stride'])}, "
        f"{literal(k['padding'])}, {literal(k['dilation'])}, ceil_mode={k['ceil_mode']})"), a[0], k, n)


def _avg_pool(a: Sequence[str], k: Mapping[str, Any]) -> str:
    n = len(k["kernel"])
    divisor = f", divisor_override={k['divisor_override']}" if k.get("divisor_override") is not None else ""
    return _pool_layout(lambda x: (
        f"torch.nn.functional.avg_pool{n}d({x}, {literal(k['kernel'])}, {literal(k['stride'])}, "
        f"{literal(k['padding'])}, ceil_mode={k['ceil_mode']}, count_include_pad={k['count_include_pad']}"
        f"{divisor})"), a[0], k, n)


def _adaptive(kind: str) -> Source:
    def source(a: Sequence[str], k: Mapping[str, Any]) -> str:
        size = k["output_size"]
        return _pool_layout(
            lambda x: f"torch.nn.functional.adaptive_{kind}_pool{len(size)}d({x}, {literal(size)})",
            a[0], k, len(size))

    return source


def _slice(a: Sequence[str], k: Mapping[str, Any]) -> str:
    return f"torch.ops.aten.slice.Tensor({a[0]}, {k['dim']}, {k['start']}, {k['end']}, {k['step']})"


def _cat(a: Sequence[str], k: Mapping[str, Any]) -> str:
    return f"torch.cat([{', '.join(a)}], dim={k['dim']})"


def _fallback(a: Sequence[str], k: Mapping[str, Any]) -> str:
    """`torch.ops.aten.gather.default(x, 1, idx)`: the original op with its arguments, tensors substituted."""

    def render(value: Any) -> str:
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "$in":
            return a[value[1]]
        if isinstance(value, tuple) and value == ("$device",):
            return _DEVICE
        if isinstance(value, tuple):
            return "[" + ", ".join(render(v) for v in value) + "]"
        return literal(value)

    args = [render(v) for v in k.get("args", ())]
    args += [f"{name}={render(v)}" for name, v in k.get("kwargs", ())]
    return f"torch.ops.{k['target']}({', '.join(args)})"


# Factory ops place their result on the device of the surrounding code: the emitted forward binds `device`
# (e.g. `device = x.device`); the interpreter binds it to the CPU, inference to meta.
_DEVICE = "device"

# --------------------------------------------------------------------------------------------------- table

_UNARY = {
    "neg": "torch.neg({0})",
    "abs": "torch.abs({0})",
    "exp": "torch.exp({0})",
    "exp2": "torch.exp2({0})",
    "log": "torch.log({0})",
    "log2": "torch.log2({0})",
    "log1p": "torch.log1p({0})",
    "expm1": "torch.expm1({0})",
    "sqrt": "torch.sqrt({0})",
    "rsqrt": "torch.rsqrt({0})",
    "reciprocal": "torch.reciprocal({0})",
    "sin": "torch.sin({0})",
    "cos": "torch.cos({0})",
    "tan": "torch.tan({0})",
    "tanh": "torch.tanh({0})",
    "sigmoid": "torch.sigmoid({0})",
    "erf": "torch.erf({0})",
    "relu": "torch.relu({0})",
    "floor": "torch.floor({0})",
    "ceil": "torch.ceil({0})",
    "round": "torch.round({0})",
    "trunc": "torch.trunc({0})",
    "sign": "torch.sign({0})",
    "logical_not": "torch.logical_not({0})",
    "isnan": "torch.isnan({0})",
    "isinf": "torch.isinf({0})",
    "silu": "torch.nn.functional.silu({0})",
    "mish": "torch.nn.functional.mish({0})",
    "hardswish": "torch.nn.functional.hardswish({0})",
    "hardsigmoid": "torch.nn.functional.hardsigmoid({0})",
    "gelu": "torch.nn.functional.gelu({0}, approximate={approximate})",
    "softplus": "torch.nn.functional.softplus({0}, beta={beta}, threshold={threshold})",
    "elu": "torch.ops.aten.elu.default({0}, {alpha}, {scale}, {input_scale})",
    "leaky_relu": "torch.nn.functional.leaky_relu({0}, {negative_slope})",
    "clamp": "torch.clamp({0}, {min}, {max})",
    "cast": "{0}.to({dtype})",
}
# Binary ops use Python operators where torch has them, so a const (a Python scalar) may sit on either side
# with torch's own promotion rules for Python numbers.
_BINARY = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "pow": "({0} ** {1})",
    "maximum": "torch.maximum({0}, {1})",
    "minimum": "torch.minimum({0}, {1})",
    "fmod": "torch.fmod({0}, {1})",
    "remainder": "torch.remainder({0}, {1})",
    "atan2": "torch.atan2({0}, {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "logical_and": "torch.logical_and({0}, {1})",
    "logical_or": "torch.logical_or({0}, {1})",
}


def _div(a: Sequence[str], k: Mapping[str, Any]) -> str:
    mode = k.get("rounding_mode")
    if mode is None:
        return f"({a[0]} / {a[1]})"
    if mode == "floor":
        return f"({a[0]} // {a[1]})"
    return f"torch.div({a[0]}, {a[1]}, rounding_mode='trunc')"


def _build_table() -> dict[str, OpDef]:
    table: dict[str, OpDef] = {}

    def add(name: str, category: str, source: Source, normalize: Normalize | None = None) -> None:
        table[name] = OpDef(name, category, source, normalize)

    for name, template in {**_UNARY, **_BINARY}.items():
        add(name, "pointwise", _fn(template))
    add("div", "pointwise", _div)
    add("where", "pointwise", _fn("torch.where({0}, {1}, {2})"))

    for name in ("sum", "mean", "amax", "amin", "logsumexp"):
        add(name, "reduction", _reduce(name), _norm_dims)
    add("prod", "reduction", _prod, _norm_dims)
    for name in ("var", "std"):
        add(name, "reduction", _var_like(name), _norm_dims)
    for name in ("argmax", "argmin"):
        add(name, "reduction", _arg_reduce(name), _norm_arg_reduce)

    add("softmax", "softmax", _fn("torch.softmax({0}, dim={dim})"), _norm_softmax)
    add("log_softmax", "softmax", _fn("torch.log_softmax({0}, dim={dim})"), _norm_softmax)

    add("layer_norm", "norm", _layer_norm)
    add("group_norm", "norm", _at_channel_dim(_group_norm), _norm_group_norm)
    add("batch_norm", "norm", _at_channel_dim(_batch_norm), _norm_channel_dim)

    add("cumsum", "scan", _fn("torch.cumsum({0}, dim={dim})"), _norm_dim)
    add("cumprod", "scan", _fn("torch.cumprod({0}, dim={dim})"), _norm_dim)

    add("mm", "matmul", _fn("torch.mm({0}, {1})"))
    add("bmm", "matmul", _fn("torch.bmm({0}, {1})"))
    add("addmm", "matmul", _fn("torch.addmm({0}, {1}, {2}, beta={beta}, alpha={alpha})"))
    add("linear", "matmul", _linear)

    add("conv", "conv", _conv)

    add("max_pool", "pool", _max_pool)
    add("avg_pool", "pool", _avg_pool)
    add("adaptive_avg_pool", "pool", _adaptive("avg"))
    add("adaptive_max_pool", "pool", _adaptive("max"))

    add("reshape", "view", _fn("{0}.reshape({shape})"))
    add("permute", "view", _fn("{0}.permute({dims})"), _norm_permute)
    add("expand", "view", _fn("{0}.expand({shape})"))
    add("slice", "view", _slice, _norm_slice)
    add("select", "view", _fn("torch.select({0}, {dim}, {index})"), _norm_select)
    add("cat", "view", _cat, _norm_cat)
    add("flip", "view", _fn("torch.flip({0}, {dims})"), _norm_flip)
    add("copy", "view", _fn("{0}.clone(memory_format=torch.contiguous_format)"))

    add("tril", "other", _fn("torch.tril({0}, {diagonal})"))
    add("triu", "other", _fn("torch.triu({0}, {diagonal})"))
    add(
        "full",
        "other",
        lambda a, k: (
            f"torch.full({literal(k['shape'])}, {literal(k['value'])}, "
            f"dtype={literal(k['dtype'])}, device={_DEVICE})"
        ),
    )
    add(
        "arange",
        "other",
        lambda a, k: (
            f"torch.arange({literal(k['start'])}, {literal(k['end'])}, "
            f"{literal(k['step'])}, dtype={literal(k['dtype'])}, device={_DEVICE})"
        ),
    )
    add(
        "literal",
        "other",
        lambda a, k: (
            f"torch.tensor({literal(_nested_list(k['value']))}, "
            f"dtype={literal(k['dtype'])}, device={_DEVICE})"
        ),
    )
    add("const", "other", lambda a, k: literal(k["value"]))
    add("getitem", "other", _fn("{0}[{index}]"))
    add("aten_fallback", "other", _fallback)
    return table


def _prod(a: Sequence[str], k: Mapping[str, Any]) -> str:
    # torch.prod reduces one dim at a time: chain it over the (sorted) dims, last first so indices stay valid.
    expr = a[0]
    dims = k["dims"]
    if not dims:
        return f"torch.prod({expr})"
    for d in sorted(dims, reverse=True):
        expr = f"torch.prod({expr}, dim={d}, keepdim={k['keepdim']})"
    return expr


def _nested_list(value: Any) -> Any:
    return [_nested_list(v) for v in value] if isinstance(value, tuple) else value


OPS: dict[str, OpDef] = _build_table()


# --------------------------------------------------------------------------------------- public functions


def op_def(op: str) -> OpDef:
    try:
        return OPS[op]
    except KeyError:
        raise ValueError(f"unknown IR op {op!r} (docs/ir.md lists the vocabulary)") from None


def category(op: str) -> str:
    """The op's category; leaves (`input`, `param`, `buffer`) are `other`."""
    return OPS[op].category if op in OPS else "other"


def aten_source(op: str, arg_exprs: Sequence[str], attrs: Mapping[str, Any] | tuple = ()) -> str:
    """The op as a Python expression calling torch, with `arg_exprs` as its inputs. Factory ops (`full`,
    `arange`, `literal`, fallbacks taking a device) refer to a variable `device` the caller binds."""
    attr_map = dict(attrs) if not isinstance(attrs, Mapping) else attrs
    return op_def(op).source(list(arg_exprs), attr_map)


@functools.lru_cache(maxsize=4096)
def compiled(op: str, attrs: tuple, n_inputs: int) -> Callable[..., Any]:
    """The op's ATen source compiled to `f(device, *inputs)`; memoized because graphs repeat ops."""
    names = [f"a{i}" for i in range(n_inputs)]
    source = aten_source(op, names, attrs)
    return eval(f"lambda device, {', '.join(names)}: {source}", {"torch": torch})  # noqa: S307 (our own source)


def infer_type(
    op: str, inputs: Sequence[Node], attrs: Mapping[str, Any] | tuple
) -> tuple[tuple[int, ...], Any, Any]:
    """(shape, dtype, output_types) of an op applied to `inputs`; `output_types` is None for a single
    tensor, else a tuple of (shape, dtype) per output of a multi-output fallback (shape (), dtype None)."""
    frozen = freeze_attrs(attrs) if isinstance(attrs, Mapping) else attrs
    args = [meta_value(node) for node in inputs]
    result = compiled(op, frozen, len(inputs))(torch.device("meta"), *args)
    if isinstance(result, torch.Tensor):
        return tuple(result.shape), result.dtype, None
    if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in result):
        return (), None, tuple((tuple(r.shape), r.dtype) for r in result)
    raise ValueError(f"{op}: expected a tensor result, got {type(result).__name__}")


def meta_value(node: Node) -> Any:
    """What a node stands for during inference: consts are Python scalars, tensors are meta tensors."""
    if node.op == "const":
        return node.attr("value")
    if node.dtype is None:  # a multi-output fallback, read through getitem
        return tuple(
            torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in node.attr("output_types")
        )
    return torch.empty(node.shape, dtype=node.dtype, device="meta")


def make_node(op: str, inputs: Sequence[Node] = (), name: str = "", **attrs: Any) -> Node:
    """A correctly typed node: attributes normalized, shape and dtype inferred by the op table."""
    definition = op_def(op)
    inputs = tuple(inputs)
    attrs = dict(attrs)
    if definition.normalize is not None:
        attrs = definition.normalize(inputs, attrs)
    shape, dtype, output_types = infer_type(op, inputs, attrs)
    if op in ("reshape", "expand"):
        attrs["shape"] = shape  # -1 entries made concrete
    if output_types is not None:
        attrs["output_types"] = output_types
    return Node.make(op, inputs, attrs, shape=shape, dtype=dtype, name=name)


# ------------------------------------------------------------------------------------------------- leaves


def input_node(
    name: str,
    index: int,
    shape: Sequence[int] = (),
    dtype: torch.dtype = torch.float32,
    kind: str = "tensor",
    value: Any = None,
) -> Node:
    """A forward argument. Scalar arguments (kind "scalar") record the value seen at capture."""
    attrs: dict[str, Any] = {"index": index, "kind": kind}
    if kind != "tensor":
        attrs["value"] = value
    return Node.make("input", (), attrs, shape=shape, dtype=dtype, name=name)


def param_node(fqn: str, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> Node:
    return Node.make("param", (), {}, shape=shape, dtype=dtype, name=fqn)


def buffer_node(fqn: str, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> Node:
    return Node.make("buffer", (), {}, shape=shape, dtype=dtype, name=fqn)


def const_node(value: bool | int | float) -> Node:
    """A Python scalar: float32 for floats, int64 for ints, bool (the dtypes torch gives Python numbers)."""
    if isinstance(value, bool):
        dtype = torch.bool
    elif isinstance(value, int):
        dtype = torch.int64
    elif isinstance(value, float):
        dtype = torch.float32
    else:
        raise ValueError(f"a const is a Python bool/int/float, got {type(value).__name__}")
    return Node.make("const", (), {"value": value}, shape=(), dtype=dtype)
