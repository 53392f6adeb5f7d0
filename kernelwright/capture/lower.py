"""Lower an ExportedProgram (core ATen, after our decompositions) to an IR Graph.

Placeholders become leaves (forward arguments, parameters/buffers by FQN, constants); each ATen call is
lowered by the table in `capture/aten.py`, or becomes an `aten_fallback` node carrying the original op
and its arguments. Every lowered node is checked against the shape and dtype export recorded for it;
a lowering that fails or disagrees is replaced by a fallback and reported in `graph.meta`, so capture
never loses a model to one bad lowering.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch.export.graph_signature import InputKind, OutputKind

from kernelwright.capture.aten import IGNORED_OPS, LOWERINGS, bind_arguments
from kernelwright.errors import CaptureError
from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import buffer_node, const_node, input_node, make_node, param_node


def lower_program(
    program: torch.export.ExportedProgram, model: torch.nn.Module, arguments: list, problem_id: str
) -> Graph:
    lowering = _Lowering(program, model, arguments, problem_id)
    return lowering.run()


class _Lowering:
    def __init__(
        self, program: torch.export.ExportedProgram, model: torch.nn.Module, arguments: list, problem_id: str
    ) -> None:
        self.program = program
        self.model = model
        self.arguments = arguments
        self.problem_id = problem_id
        self.values: dict[torch.fx.Node, Any] = {}
        self.failures: list[str] = []

    def run(self) -> Graph:
        self._check_static_shapes()
        signature = self.program.graph_signature
        placeholders = [n for n in self.program.graph.nodes if n.op == "placeholder"]
        inputs, params = self._leaves(placeholders, signature.input_specs)
        output_node = next(n for n in self.program.graph.nodes if n.op == "output")
        for node in self.program.graph.nodes:
            if node.op == "call_function":
                self.values[node] = self._lower_call(node)
            elif node.op == "get_attr":
                raise CaptureError(
                    f"{self.problem_id}: the exported graph uses a submodule call "
                    f"({node.target}): control flow (torch.cond/while_loop) is not supported"
                )
        results = output_node.args[0]
        outputs, mutations = [], []
        for spec, value in zip(signature.output_specs, results, strict=True):
            node = self._as_node(self.values.get(value, value) if isinstance(value, torch.fx.Node) else value)
            if spec.kind == OutputKind.USER_OUTPUT:
                outputs.append(node)
            elif spec.kind == OutputKind.BUFFER_MUTATION:
                mutations.append((spec.target, node))
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                raise CaptureError(
                    f"{self.problem_id}: forward modifies its argument `{spec.target}` in place; "
                    "capture supports in-place updates of buffers only"
                )
            else:
                raise CaptureError(
                    f"{self.problem_id}: unsupported output kind {spec.kind.name} in the export"
                )
        used = {id(n) for n in Graph((), (), tuple(outputs), tuple(mutations)).nodes()}
        meta = (("lowering_failures", tuple(self.failures)),) if self.failures else ()
        return Graph(
            inputs=tuple(inputs),
            params=tuple(p for p in params if id(p) in used),
            outputs=tuple(outputs),
            mutations=tuple(mutations),
            output_kind=self._output_kind(),
            training=self.model.training,
            meta=meta,
        )

    def _check_static_shapes(self) -> None:
        """Export succeeds on ops whose output size depends on the data (`x[x > 0]`, `nonzero`) by giving
        them symbolic sizes; the IR has static shapes only."""
        for node in self.program.graph.nodes:
            val = node.meta.get("val")
            for tensor in val if isinstance(val, (tuple, list)) else [val]:
                if isinstance(tensor, torch.Tensor) and not all(isinstance(s, int) for s in tensor.shape):
                    where = node.meta.get("stack_trace", "").strip().splitlines()[-1:] or [str(node.target)]
                    raise CaptureError(
                        f"{self.problem_id}: data-dependent output shape ({node.target} gives a size that "
                        f"depends on the values: {where[0].strip()}); the IR needs static shapes"
                    )

    # -------------------------------------------------------------------------------------------- leaves

    def _leaves(self, placeholders: list[torch.fx.Node], specs: list) -> tuple[list[Node], list[Node]]:
        inputs: list[Node] = []
        params: list[Node] = []
        user_index = 0
        for fx_node, spec in zip(placeholders, specs, strict=True):
            val = fx_node.meta.get("val")
            if spec.kind == InputKind.USER_INPUT:
                node = self._user_input(spec, val, user_index)
                user_index += 1
                inputs.append(node)
            elif spec.kind == InputKind.PARAMETER:
                node = param_node(spec.target, val.shape, val.dtype)
                params.append(node)
            elif spec.kind == InputKind.BUFFER:
                node = buffer_node(spec.target, val.shape, val.dtype)
                params.append(node)
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                node = self._constant_tensor(spec.target, val)
                if node.op == "buffer":
                    params.append(node)
            else:
                raise CaptureError(
                    f"{self.problem_id}: unsupported graph input {spec.kind.name} ({spec.target})"
                )
            self.values[fx_node] = node
        return inputs, params

    def _user_input(self, spec: Any, val: Any, index: int) -> Node:
        name = spec.arg.name
        if isinstance(val, torch.Tensor):
            return input_node(name, index, val.shape, val.dtype)
        value = self.arguments[index]
        if isinstance(value, bool):
            return input_node(name, index, (), torch.bool, kind="scalar", value=value)
        if isinstance(value, int):
            return input_node(name, index, (), torch.int64, kind="scalar", value=value)
        if isinstance(value, float):
            return input_node(name, index, (), torch.float64, kind="scalar", value=value)
        return input_node(name, index, (), None, kind="constant", value=value)

    def _constant_tensor(self, target: str, val: Any) -> Node:
        """A tensor attribute of the model (not a registered buffer) is read by FQN like a buffer; a tensor
        created in forward from Python data becomes a `literal`."""
        value: Any = self.model
        try:
            for part in target.split("."):
                value = getattr(value, part)
        except AttributeError:
            value = self.program.constants.get(target)
            real = _real_value(value)
            if real is None:
                raise CaptureError(
                    f"{self.problem_id}: forward creates a tensor constant ({target}) whose "
                    "values are unknown on fake tensors"
                ) from None
            return make_node("literal", value=_to_tuple(real.tolist()), dtype=real.dtype)
        return buffer_node(target, val.shape, val.dtype)

    def _output_kind(self) -> str:
        spec = self.program.call_spec.out_spec
        if spec is None or spec.num_children == 0:
            return "tensor"
        kind = {tuple: "tuple", list: "list"}.get(spec.type)
        if kind is None or any(child.num_children for child in _tree_children(spec)):
            what = "nested tuple or list" if kind else getattr(spec.type, "__name__", str(spec.type))
            raise CaptureError(
                f"{self.problem_id}: forward returns a {what}; capture supports a tensor, or a flat tuple "
                "or list of tensors"
            )
        return kind

    # ------------------------------------------------------------------------------------------ calls

    def _lower_call(self, fx_node: torch.fx.Node) -> Any:
        target = fx_node.target
        if target is operator.getitem:
            source, index = fx_node.args
            return self.values[source][index]
        if not isinstance(target, torch._ops.OpOverload):
            raise CaptureError(
                f"{self.problem_id}: the exported graph calls {target}, which capture cannot "
                "represent (control flow or a Python-level operation)"
            )
        name = str(target)
        if name in IGNORED_OPS:
            return None
        args = [self._map(a) for a in fx_node.args]
        kwargs = {k: self._map(v) for k, v in fx_node.kwargs.items()}
        lowering = LOWERINGS.get(name)
        if lowering is not None:
            try:
                result = lowering(bind_arguments(target, args, kwargs))
                if result is not None and not _matches(result, fx_node.meta.get("val")):
                    self.failures.append(f"{name}: lowered type differs from export's")
                elif isinstance(result, tuple) and any(r is None for r in result):
                    # Outputs without a native form (e.g. max-pool indices) come from a fallback node,
                    # which stays out of the graph unless one of them is actually used.
                    spare = fallback(name, args, kwargs)
                    return tuple(spare[i] if r is None else r for i, r in enumerate(result))
                elif result is not None:
                    return result
            except Exception as exc:  # a lowering bug must not lose the model: fall back, and say so
                self.failures.append(f"{name}: {type(exc).__name__}: {exc}")
        return fallback(name, args, kwargs)

    def _map(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return self.values[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self._map(v) for v in value)
        return value

    def _as_node(self, value: Any) -> Node:
        if isinstance(value, Node):
            return value
        if isinstance(value, (bool, int, float)):
            return const_node(value)
        raise CaptureError(
            f"{self.problem_id}: forward returns a {type(value).__name__}; capture supports tensors"
        )


def fallback(name: str, args: list, kwargs: dict) -> Node | tuple[Node, ...]:
    """An `aten_fallback` node: the original op with its tensor arguments as inputs, everything else as
    literal attributes. Multi-output ops are followed by one `getitem` per output."""
    inputs: list[Node] = []

    def encode(value: Any) -> Any:
        if isinstance(value, Node):
            inputs.append(value)
            return ("$in", len(inputs) - 1)
        if isinstance(value, torch.device):
            return ("$device",)
        if isinstance(value, (list, tuple)):
            return tuple(encode(v) for v in value)
        return value

    encoded_args = tuple(encode(a) for a in args)
    encoded_kwargs = tuple((k, encode(v)) for k, v in kwargs.items())
    node = make_node("aten_fallback", inputs, target=name, args=encoded_args, kwargs=encoded_kwargs)
    if node.dtype is None:
        return tuple(make_node("getitem", [node], index=i) for i in range(len(node.attr("output_types"))))
    return node


def _matches(result: Any, val: Any) -> bool:
    if isinstance(result, Node):
        if isinstance(val, torch.Tensor):
            return tuple(val.shape) == result.shape and val.dtype == result.dtype
        return val is None or isinstance(val, (int, float, bool))
    if isinstance(result, tuple) and isinstance(val, (tuple, list)):
        return all(r is None or v is None or _matches(r, v) for r, v in zip(result, val, strict=True))
    return False


def _tree_children(spec: Any) -> list:
    """A pytree spec's children: `children()` in newer torch, the `children_specs` list in older ones."""
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def _real_value(value: Any) -> torch.Tensor | None:
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, FakeTensor):
        return value.constant if value.constant is not None else None
    return value if isinstance(value, torch.Tensor) else None


def _to_tuple(value: Any) -> Any:
    return tuple(_to_tuple(v) for v in value) if isinstance(value, list) else value
