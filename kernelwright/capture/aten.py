"""The lowering table: one small function per ATen overload, from its bound arguments to IR nodes.

Arguments arrive bound by name from the op's schema (defaults filled in), with tensors already lowered to
IR nodes and everything else as Python values. A lowering returns a node, a tuple of nodes for a
multi-output op (`None` where an output has no native form: the driver takes it from a fallback), or
None to make the whole call an `aten_fallback`. Ops missing here become fallbacks too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelwright.ir.graph import Node
from kernelwright.ir.ops import const_node, make_node

Lowering = Callable[[dict[str, Any]], Any]
LOWERINGS: dict[str, Lowering] = {}

# Ops export inserts to check shapes at runtime; they compute nothing and are dropped.
IGNORED_OPS = frozenset(
    {
        "aten._assert_tensor_metadata.default",
        "aten._assert_scalar.default",
        "aten.sym_constrain_range.default",
        "aten._assert_async.msg",
        "aten.sym_constrain_range_for_size.default",
    }
)


def bind_arguments(
    target: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Arguments by schema name, defaults filled in: `aten.sum.dim_IntList(x, [1])` gives self, dim,
    keepdim and dtype."""
    bound: dict[str, Any] = {}
    for position, argument in enumerate(target._schema.arguments):
        if position < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[position]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
        else:
            bound[argument.name] = None
    return bound


def lowers(*names: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[f"aten.{name}"] = fn
        return fn

    return register


def t(value: Any) -> Node:
    """A tensor argument as a node; Python scalars become consts."""
    return value if isinstance(value, Node) else const_node(value)


def _self(a: dict[str, Any]) -> Node:
    return a["self"] if "self" in a else a["input"]


def _rank(node: Node) -> int:
    return len(node.shape)


def _spatial(value: Sequence[int] | int, n: int) -> tuple[int, ...]:
    """A pooling/conv size given as one int or one per spatial dim, as one per spatial dim."""
    values = (value,) if isinstance(value, int) else tuple(value)
    return values * n if len(values) == 1 else values


# ------------------------------------------------------------------------------------------------ pointwise

_UNARY = (
    "abs neg exp exp2 log log2 log1p expm1 sqrt rsqrt reciprocal sin cos tan tanh sigmoid erf relu floor "
    "ceil trunc sign logical_not isnan isinf silu mish hardswish hardsigmoid"
).split()
for _op in _UNARY:
    LOWERINGS[f"aten.{_op}.default"] = lambda a, _op=_op: make_node(_op, [_self(a)])
lowers("round.default")(lambda a: make_node("round", [_self(a)]))


@lowers("bitwise_not.default")
def _bitwise_not(a):
    return make_node("logical_not", [a["self"]]) if a["self"].dtype == torch.bool else None


lowers("gelu.default")(lambda a: make_node("gelu", [a["self"]], approximate=a["approximate"]))
lowers("softplus.default")(
    lambda a: make_node("softplus", [a["self"]], beta=a["beta"], threshold=a["threshold"])
)
lowers("elu.default")(
    lambda a: make_node("elu", [a["self"]], alpha=a["alpha"], scale=a["scale"], input_scale=a["input_scale"])
)
lowers("leaky_relu.default")(
    lambda a: make_node("leaky_relu", [a["self"]], negative_slope=a["negative_slope"])
)
lowers("hardtanh.default")(lambda a: make_node("clamp", [a["self"]], min=a["min_val"], max=a["max_val"]))
lowers("clamp.default")(lambda a: make_node("clamp", [a["self"]], min=a["min"], max=a["max"]))
lowers("clamp_min.default")(lambda a: make_node("clamp", [a["self"]], min=a["min"], max=None))
lowers("clamp_max.default")(lambda a: make_node("clamp", [a["self"]], min=None, max=a["max"]))


@lowers("clamp.Tensor")
def _clamp_tensor(a):
    x = a["self"]
    if a["min"] is not None:
        x = make_node("maximum", [x, t(a["min"])])
    if a["max"] is not None:
        x = make_node("minimum", [x, t(a["max"])])
    return x


@lowers("_to_copy.default")
def _to_copy(a):
    x, dtype = a["self"], a["dtype"]
    return (
        make_node("copy", [x]) if dtype is None or dtype == x.dtype else make_node("cast", [x], dtype=dtype)
    )


lowers("clone.default")(lambda a: make_node("copy", [a["self"]]))
lowers("alias.default", "detach.default", "lift_fresh_copy.default")(lambda a: a["self"])


def _scaled(value: Any, alpha: Any) -> Node:
    return t(value) if alpha in (None, 1) else make_node("mul", [t(value), const_node(alpha)])


lowers("add.Tensor", "add.Scalar")(
    lambda a: make_node("add", [t(a["self"]), _scaled(a["other"], a["alpha"])])
)
lowers("sub.Tensor", "sub.Scalar")(
    lambda a: make_node("sub", [t(a["self"]), _scaled(a["other"], a["alpha"])])
)
lowers("rsub.Tensor", "rsub.Scalar")(
    lambda a: make_node("sub", [t(a["other"]), _scaled(a["self"], a["alpha"])])
)
lowers("mul.Tensor", "mul.Scalar")(lambda a: make_node("mul", [t(a["self"]), t(a["other"])]))
lowers("div.Tensor", "div.Scalar")(lambda a: make_node("div", [t(a["self"]), t(a["other"])]))
lowers("div.Tensor_mode", "div.Scalar_mode")(
    lambda a: make_node("div", [t(a["self"]), t(a["other"])], rounding_mode=a["rounding_mode"])
)
lowers("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar")(
    lambda a: make_node("pow", [t(a["self"]), t(a["exponent"])])
)
for _op in ("maximum", "minimum", "atan2"):
    LOWERINGS[f"aten.{_op}.default"] = lambda a, _op=_op: make_node(_op, [a["self"], a["other"]])
for _op in ("fmod", "remainder", "eq", "ne", "lt", "le", "gt", "ge"):
    for _overload in ("Tensor", "Scalar"):
        LOWERINGS[f"aten.{_op}.{_overload}"] = lambda a, _op=_op: make_node(
            _op, [t(a["self"]), t(a["other"])]
        )
for _op in ("logical_and", "logical_or"):
    LOWERINGS[f"aten.{_op}.default"] = lambda a, _op=_op: make_node(_op, [a["self"], a["other"]])
lowers("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")(
    lambda a: make_node("where", [a["condition"], t(a["self"]), t(a["other"])])
)


# ----------------------------------------------------------------------------------------------- reductions


def _with_dtype(x: Node, dtype: torch.dtype | None) -> Node:
    """Reductions and scans taking `dtype=` cast their input first, as torch does."""
    return x if dtype is None or dtype == x.dtype else make_node("cast", [x], dtype=dtype)


def _reduction(op: str) -> Lowering:
    def lower(a):
        x = _with_dtype(a["self"], a.get("dtype"))
        return make_node(op, [x], dims=a.get("dim"), keepdim=bool(a.get("keepdim", False)))

    return lower


lowers("sum.dim_IntList", "sum.default")(_reduction("sum"))
lowers("mean.dim", "mean.default")(_reduction("mean"))
for _op in ("amax", "amin", "logsumexp"):
    LOWERINGS[f"aten.{_op}.default"] = _reduction(_op)
lowers("prod.dim_int", "prod.default")(_reduction("prod"))
lowers("max.default")(_reduction("amax"))
lowers("min.default")(_reduction("amin"))


def _var_like(op: str) -> Lowering:
    def lower(a):
        correction = a.get("correction")
        if "unbiased" in a:
            correction = 1 if a["unbiased"] else 0
        return make_node(
            op,
            [a["self"]],
            dims=a["dim"],
            correction=1 if correction is None else correction,
            keepdim=bool(a["keepdim"]),
        )

    return lower


lowers("var.correction", "var.dim")(_var_like("var"))
lowers("std.correction", "std.dim")(_var_like("std"))


@lowers("var_mean.correction")
def _var_mean(a):
    mean = make_node("mean", [a["self"]], dims=a["dim"], keepdim=bool(a["keepdim"]))
    return _var_like("var")(a), mean


for _op in ("argmax", "argmin"):
    LOWERINGS[f"aten.{_op}.default"] = lambda a, _op=_op: make_node(
        _op, [a["self"]], dim=a["dim"], keepdim=a["keepdim"]
    )


def _values_indices(values: str, indices: str) -> Lowering:
    """`max.dim`/`min.dim` return (values, indices): an amax/amin and an argmax/argmin node."""

    def lower(a):
        x, dim, keepdim = a["self"], a["dim"], a["keepdim"]
        return make_node(values, [x], dims=dim, keepdim=keepdim), make_node(
            indices, [x], dim=dim, keepdim=keepdim
        )

    return lower


lowers("max.dim")(_values_indices("amax", "argmax"))
lowers("min.dim")(_values_indices("amin", "argmin"))


@lowers("linalg_vector_norm.default")
def _vector_norm(a):
    x = _with_dtype(a["self"], a["dtype"])
    order, dims, keepdim = float(a["ord"]), a["dim"], a["keepdim"]
    magnitude = make_node("abs", [x])
    if order == 2:
        squares = make_node("mul", [x, x])
        return make_node("sqrt", [make_node("sum", [squares], dims=dims, keepdim=keepdim)])
    if order == 1:
        return make_node("sum", [magnitude], dims=dims, keepdim=keepdim)
    if order == float("inf"):
        return make_node("amax", [magnitude], dims=dims, keepdim=keepdim)
    if order == float("-inf"):
        return make_node("amin", [magnitude], dims=dims, keepdim=keepdim)
    if order == 0:
        return None
    powered = make_node("pow", [magnitude, const_node(order)])
    total = make_node("sum", [powered], dims=dims, keepdim=keepdim)
    return make_node("pow", [total, const_node(1.0 / order)])


# ------------------------------------------------------------------------------------------ softmax, scans


def _softmax(op: str) -> Lowering:
    def lower(a):
        x = _with_dtype(a["self"], a.get("dtype"))
        return make_node(op, [x], dim=a["dim"])

    return lower


lowers("softmax.int", "_softmax.default")(_softmax("softmax"))
lowers("log_softmax.int", "_log_softmax.default")(_softmax("log_softmax"))
lowers("cumsum.default")(lambda a: make_node("cumsum", [_with_dtype(a["self"], a["dtype"])], dim=a["dim"]))
lowers("cumprod.default")(lambda a: make_node("cumprod", [_with_dtype(a["self"], a["dtype"])], dim=a["dim"]))


# ---------------------------------------------------------------------------------------------------- norms


def _optional(*nodes: Node | None) -> list[Node]:
    return [n for n in nodes if n is not None]


@lowers("layer_norm.default")
def _layer_norm(a):
    out = make_node(
        "layer_norm",
        _optional(a["input"], a["weight"], a["bias"]),
        normalized_ndim=len(a["normalized_shape"]),
        normalized_shape=tuple(a["normalized_shape"]),
        eps=a["eps"],
        has_weight=a["weight"] is not None,
        has_bias=a["bias"] is not None,
    )
    return out


lowers("native_layer_norm.default")(lambda a: (_layer_norm(a), None, None))


@lowers("group_norm.default")
def _group_norm(a):
    return make_node(
        "group_norm",
        _optional(a["input"], a["weight"], a["bias"]),
        groups=a["num_groups"],
        eps=a["eps"],
        has_weight=a["weight"] is not None,
        has_bias=a["bias"] is not None,
    )


def _batch_norm(
    x: Node,
    weight: Node | None,
    bias: Node | None,
    running: tuple[Node, Node] | None,
    training: bool,
    momentum: float,
    eps: float,
) -> Node:
    return make_node(
        "batch_norm",
        _optional(x, weight, bias, *(running or ())),
        training=training,
        momentum=momentum,
        eps=eps,
        has_weight=weight is not None,
        has_bias=bias is not None,
        has_running=running is not None,
    )


def _reduced_dims(x: Node) -> tuple[int, ...]:
    """BatchNorm statistics run over every dim but the channels (dim 1)."""
    return tuple(d for d in range(_rank(x)) if d != 1)


@lowers("_native_batch_norm_legit_functional.default")
def _batch_norm_functional(a):
    x, momentum, eps = a["input"], a["momentum"], a["eps"]
    if not a["training"]:
        running = (a["running_mean"], a["running_var"])
        return _batch_norm(x, a["weight"], a["bias"], running, False, momentum, eps), None, None, *running
    out = _batch_norm(x, a["weight"], a["bias"], None, True, momentum, eps)
    dims = _reduced_dims(x)
    # Running statistics use the unbiased batch variance; the normalization itself uses the biased one.
    mean = make_node("mean", [x], dims=dims)
    new_mean = _blend(a["running_mean"], mean, momentum)
    new_var = _blend(a["running_var"], make_node("var", [x], dims=dims, correction=1), momentum)
    return out, None, None, new_mean, new_var


def _blend(running: Node, batch: Node, momentum: float) -> Node:
    """(1 - momentum) * running + momentum * batch: the running-stat update of BatchNorm."""
    kept = make_node("mul", [running, const_node(1.0 - momentum)])
    return make_node("add", [kept, make_node("mul", [batch, const_node(momentum)])])


@lowers("_native_batch_norm_legit_no_training.default")
def _batch_norm_eval(a):
    running = (a["running_mean"], a["running_var"])
    return (
        _batch_norm(a["input"], a["weight"], a["bias"], running, False, a["momentum"], a["eps"]),
        None,
        None,
    )


@lowers("_native_batch_norm_legit.no_stats")
def _batch_norm_no_stats(a):
    # Instance norm arrives here (as batch_norm over a [1, N*C, ...] view); no running stats exist.
    return _batch_norm(a["input"], a["weight"], a["bias"], None, True, a["momentum"], a["eps"]), None, None


# ----------------------------------------------------------------------------------------- matmul and conv

lowers("mm.default")(lambda a: make_node("mm", [a["self"], a["mat2"]]))
lowers("bmm.default")(lambda a: make_node("bmm", [a["self"], a["mat2"]]))
lowers("addmm.default")(
    lambda a: make_node("addmm", [t(a["self"]), a["mat1"], a["mat2"]], beta=a["beta"], alpha=a["alpha"])
)
lowers("linear.default")(
    lambda a: make_node(
        "linear", _optional(a["input"], a["weight"], a["bias"]), has_bias=a["bias"] is not None
    )
)


@lowers("mv.default")
def _mv(a):
    column = make_node("reshape", [a["vec"]], shape=(-1, 1))
    return make_node("reshape", [make_node("mm", [a["self"], column])], shape=(-1,))


@lowers("convolution.default", "conv1d.default", "conv2d.default", "conv3d.default")
def _convolution(a):
    x, weight, bias = a["input"], a["weight"], a["bias"]
    n = _rank(weight) - 2
    if isinstance(a["padding"], str):
        return None
    return make_node(
        "conv",
        _optional(x, weight, bias),
        stride=_spatial(a["stride"], n),
        padding=_spatial(a["padding"], n),
        dilation=_spatial(a["dilation"], n),
        transposed=bool(a.get("transposed", False)),
        output_padding=_spatial(a.get("output_padding") or 0, n),
        groups=a["groups"],
        has_bias=bias is not None,
    )


lowers("conv_transpose1d.input", "conv_transpose2d.input", "conv_transpose3d.input")(
    lambda a: _convolution({**a, "transposed": True})
)


# -------------------------------------------------------------------------------------------------- pooling


def _pool_window(a: dict[str, Any], n: int) -> dict[str, Any]:
    kernel = _spatial(a["kernel_size"], n)
    stride = _spatial(a["stride"], n) if a["stride"] else kernel  # an empty stride means "the kernel size"
    return {
        "kernel": kernel,
        "stride": stride,
        "padding": _spatial(a["padding"], n),
        "ceil_mode": a["ceil_mode"],
    }


def _max_pool(n: int) -> Lowering:
    def lower(a):
        window = _pool_window(a, n)
        return make_node("max_pool", [a["self"]], dilation=_spatial(a["dilation"], n), **window), None

    return lower


lowers("max_pool2d_with_indices.default")(_max_pool(2))
lowers("max_pool3d_with_indices.default")(_max_pool(3))
lowers("max_pool2d.default")(lambda a: _max_pool(2)(a)[0])
lowers("max_pool3d.default")(lambda a: _max_pool(3)(a)[0])


def _avg_pool(n: int) -> Lowering:
    def lower(a):
        return make_node(
            "avg_pool",
            [a["self"]],
            count_include_pad=a["count_include_pad"],
            divisor_override=a.get("divisor_override"),
            **_pool_window(a, n),
        )

    return lower


lowers("avg_pool1d.default")(_avg_pool(1))
lowers("avg_pool2d.default")(_avg_pool(2))
lowers("avg_pool3d.default")(_avg_pool(3))


@lowers(
    "_adaptive_avg_pool2d.default",
    "_adaptive_avg_pool3d.default",
    "adaptive_avg_pool1d.default",
    "adaptive_avg_pool2d.default",
    "adaptive_avg_pool3d.default",
)
def _adaptive_avg_pool(a):
    x, size = a["self"], tuple(a["output_size"])
    if all(s == 1 for s in size):
        # Global pooling is a mean over the spatial dims (what torch's own decomposition gives, too).
        return make_node("mean", [x], dims=tuple(range(_rank(x) - len(size), _rank(x))), keepdim=True)
    return make_node("adaptive_avg_pool", [x], output_size=size)


lowers("adaptive_max_pool2d.default", "adaptive_max_pool3d.default", "adaptive_max_pool1d.default")(
    lambda a: (make_node("adaptive_max_pool", [a["self"]], output_size=tuple(a["output_size"])), None)
)


# ------------------------------------------------------------------------------------------- layout, views


def _reshape_to(x: Node, shape: Sequence[int]) -> Node:
    return make_node("reshape", [x], shape=tuple(shape))


lowers("view.default", "_unsafe_view.default", "reshape.default")(lambda a: _reshape_to(a["self"], a["size"]))


@lowers("unsqueeze.default")
def _unsqueeze(a):
    x = a["self"]
    dim = a["dim"] % (_rank(x) + 1)
    return _reshape_to(x, x.shape[:dim] + (1,) + x.shape[dim:])


@lowers("squeeze.dims", "squeeze.dim", "squeeze.default")
def _squeeze(a):
    x = a["self"]
    dims = a.get("dim")
    dims = range(_rank(x)) if dims is None else ([dims] if isinstance(dims, int) else dims)
    drop = {d % max(_rank(x), 1) for d in dims}
    return _reshape_to(x, [s for d, s in enumerate(x.shape) if not (d in drop and s == 1)])


@lowers("flatten.using_ints")
def _flatten(a):
    x = a["self"]
    if _rank(x) == 0:
        return _reshape_to(x, (1,))
    start, end = a["start_dim"] % _rank(x), a["end_dim"] % _rank(x)
    return _reshape_to(x, x.shape[:start] + (-1,) + x.shape[end + 1 :])


lowers("permute.default")(lambda a: make_node("permute", [a["self"]], dims=tuple(a["dims"])))


@lowers("transpose.int")
def _transpose(a):
    x = a["self"]
    dims = list(range(_rank(x)))
    d0, d1 = a["dim0"] % max(_rank(x), 1), a["dim1"] % max(_rank(x), 1)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return make_node("permute", [x], dims=tuple(dims))


lowers("numpy_T.default")(
    lambda a: make_node("permute", [a["self"]], dims=tuple(reversed(range(_rank(a["self"])))))
)
lowers("t.default")(
    lambda a: a["self"] if _rank(a["self"]) < 2 else make_node("permute", [a["self"]], dims=(1, 0))
)
lowers("expand.default")(lambda a: make_node("expand", [a["self"]], shape=tuple(a["size"])))


@lowers("repeat.default")
def _repeat(a):
    """Tiling as views: insert a size-r dim before each dim, expand it, and merge the pairs."""
    x, repeats = a["self"], tuple(a["repeats"])
    shape = (1,) * (len(repeats) - _rank(x)) + x.shape
    interleaved = [v for s in shape for v in (1, s)]
    expanded = [v for r, s in zip(repeats, shape, strict=True) for v in (r, s)]
    tiled = make_node("expand", [_reshape_to(x, interleaved)], shape=tuple(expanded))
    return _reshape_to(tiled, [r * s for r, s in zip(repeats, shape, strict=True)])


@lowers("slice.Tensor")
def _slice(a):
    return make_node("slice", [a["self"]], dim=a["dim"], start=a["start"], end=a["end"], step=a["step"])


lowers("select.int")(lambda a: make_node("select", [a["self"]], dim=a["dim"], index=a["index"]))
lowers("cat.default")(lambda a: make_node("cat", list(a["tensors"]), dim=a["dim"]))
lowers("flip.default")(lambda a: make_node("flip", [a["self"]], dims=tuple(a["dims"])))
lowers("tril.default")(lambda a: make_node("tril", [a["self"]], diagonal=a["diagonal"]))
lowers("triu.default")(lambda a: make_node("triu", [a["self"]], diagonal=a["diagonal"]))


def _split_at(x: Node, dim: int, sizes: Sequence[int]) -> tuple[Node, ...]:
    pieces, start = [], 0
    for size in sizes:
        pieces.append(make_node("slice", [x], dim=dim, start=start, end=start + size, step=1))
        start += size
    return tuple(pieces)


@lowers("split_with_sizes.default")
def _split_with_sizes(a):
    return _split_at(a["self"], a["dim"], a["split_sizes"])


@lowers("split.Tensor")
def _split(a):
    x, size = a["self"], a["split_size"]
    length = x.shape[a["dim"]]
    return _split_at(x, a["dim"], [min(size, length - s) for s in range(0, length, size)] or [0])


@lowers("chunk.default")
def _chunk(a):
    x, dim = a["self"], a["dim"]
    length = x.shape[dim]
    size = -(-length // a["chunks"])  # torch.chunk: pieces of ceil(length / chunks)
    return _split_at(x, dim, [min(size, length - s) for s in range(0, length, size)] or [0])


@lowers("stack.default")
def _stack(a):
    # As torch decomposes it: concatenate, then split the concatenated dim into (count, size).
    tensors = list(a["tensors"])
    first = tensors[0]
    dim = a["dim"] % (_rank(first) + 1)
    if dim == _rank(first):
        return make_node("cat", [_reshape_to(x, x.shape + (1,)) for x in tensors], dim=dim)
    joined = make_node("cat", tensors, dim=dim)
    return _reshape_to(joined, first.shape[:dim] + (len(tensors),) + first.shape[dim:])


@lowers("unbind.int")
def _unbind(a):
    x, dim = a["self"], a["dim"]
    return tuple(make_node("select", [x], dim=dim, index=i) for i in range(x.shape[dim]))


# ---------------------------------------------------------------------------------------------- factories


def _factory_dtype(dtype: torch.dtype | None, value: Any) -> torch.dtype:
    if dtype is not None:
        return dtype
    if isinstance(value, bool):
        return torch.bool
    return torch.int64 if isinstance(value, int) else torch.get_default_dtype()


lowers("full.default")(
    lambda a: make_node(
        "full",
        shape=tuple(a["size"]),
        value=a["fill_value"],
        dtype=_factory_dtype(a["dtype"], a["fill_value"]),
    )
)
lowers("zeros.default")(
    lambda a: make_node(
        "full", shape=tuple(a["size"]), value=0, dtype=a["dtype"] or torch.get_default_dtype()
    )
)
lowers("ones.default")(
    lambda a: make_node(
        "full", shape=tuple(a["size"]), value=1, dtype=a["dtype"] or torch.get_default_dtype()
    )
)
lowers("scalar_tensor.default")(
    lambda a: make_node("full", shape=(), value=a["s"], dtype=a["dtype"] or torch.get_default_dtype())
)


@lowers("arange.default", "arange.start", "arange.start_step")
def _arange(a):
    start, end, step = a.get("start", 0), a["end"], a.get("step", 1)
    values = (start, end, step)
    dtype = a["dtype"] or (
        torch.int64 if all(isinstance(v, int) for v in values) else torch.get_default_dtype()
    )
    return make_node("arange", start=start, end=end, step=step, dtype=dtype)


@lowers("native_dropout.default")
def _dropout(a):
    # Only an inactive dropout is deterministic; an active one stays a (random) fallback.
    if a["p"] == 0 or a["train"] is False:
        return a["input"], None
    return None
