"""Writes the self-contained ModelNew file (DESIGN.md §1).

Layout of the file: a header comment (kernelwright version, flags, what was fused, how it was verified),
the problem file verbatim (imports, `Model`, constants, `get_inputs`, `get_init_inputs`), then the
generated part: each kernel's CUDA source and call spec under the IR it implements, the shared runtime's
source, the build recipe and one build, and `class ModelNew(Model)` with a generated `forward`.
Subclassing the
copied `Model` keeps the constructor, parameters and buffers (names, order, shapes) identical.

When to build: at import, when a CUDA GPU is present (the first import compiles, later ones load the
cached library). Without one, importing still works (so the file can be inspected and its model built)
and `forward` raises a RuntimeError saying a GPU is needed. A plan without kernels (its gain is derived
weights alone) has no sources, builds nothing and runs anywhere.

Derived weights (the plan's `derived_steps`, docs/rewrites.md): ATen calls at the top of forward, computed
on every call. A cache could be fooled: a write through `param.data` (`.data.copy_`, `.data.mul_`, slice
assignment) leaves `_version` and `data_ptr` as they were, so only the values could tell, and reading
them back for a check would cost a host sync per call.

KernelBench's static checker (`judge/kernelbench.py`) accepts every file that has kernels: the copied
problem is made checker-safe (`emit/kernelbench.py`), and the generated text avoids its trigger words
outside comments. A file without a kernel says so in its first lines."""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from dataclasses import dataclass

import kernelwright
from kernelwright.codegen.assemble import RUNTIME_SOURCE, ExtensionSources
from kernelwright.codegen.build import BUILD_SOURCE, extension_name
from kernelwright.codegen.kernel import KernelSource
from kernelwright.emit.kernelbench import checker_safe_source
from kernelwright.emit.replay import REPLAY_SOURCE
from kernelwright.fuse.plan import AtenStep, FusedGroup, FusionPlan
from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import aten_source, literal
from kernelwright.rewrite.match import view_of_leaf

FACTORY_OPS = frozenset({"full", "arange", "literal", "aten_fallback"})


@dataclass(frozen=True)
class EmitInfo:
    """What the header records besides the plan."""

    problem_id: str
    allow_tf32: bool = False
    verification: str = "not verified"
    notes: tuple[str, ...] = ()
    replay: bool = False    # forward replays a CUDA graph (emit/replay.py) where one is safe


def emit_module(problem_source: str, info: EmitInfo, plan: FusionPlan, sources: ExtensionSources,
                called: Sequence[KernelSource] | None = None) -> str:
    """The ModelNew file for `plan`. `called` are the kernels of `plan.groups`, in order (default: all of
    `sources.kernels`); the extension may hold more (kernels that were built and measured but lost to ATen:
    the file keeps the very extension that was verified, so it loads from the cache instead of a rebuild)."""
    groups = plan.groups
    called = list(sources.kernels if called is None else called)
    if len(groups) != len(called):
        raise ValueError(f"{len(groups)} fused groups but {len(called)} kernel sources")
    kernels = {id(g): k for g, k in zip(groups, called, strict=True)}
    uncalled = [k.name for k in sources.kernels if k.name not in {c.name for c in called}]
    summary = () if groups else (f"{NO_KERNEL}: its gain is the derived weights, computed with ATen",)
    header = _header(info, [
        f"fused: {len(groups)} kernel(s), {sum(isinstance(s, AtenStep) for s in plan.steps)} ATen step(s)",
        *(f"  {k.name}: {' -> '.join(n.op for n in g.nodes)}" for g, k in zip(groups, called, strict=True)),
        *([f"built but not called (measured slower than ATen or than another launch of its group): "
            f"{', '.join(uncalled)}"]
          if uncalled else []),
        *([f"derived weights: {len(plan.derived)} value(s) from "
           f"{', '.join(_derived_sources(plan)) or 'constants'}, computed by ATen on every call"]
          if plan.derived else []),
    ], builds=bool(sources.kernels), summary=summary)
    parts = [header, _copied(problem_source), GENERATED_BANNER]
    if sources.kernels:
        parts += [_sources_block(sources), BUILD_SOURCE.strip() + "\n", _build_block(sources)]
    if info.replay:
        parts.append(REPLAY_SOURCE.strip() + "\n")
    parts.append(_model_new(plan.graph, plan, kernels, info.replay))
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def emit_fallback(problem_source: str, info: EmitInfo, reason: str) -> str:
    """A ModelNew that keeps Model's forward (capture failed, or nothing beat eager). Its first lines say
    that it holds no custom kernel, and why; the reason stays in comments (it may quote any text)."""
    header = _header(info, [], builds=False, summary=(f"{NO_KERNEL}: ModelNew runs Model's own forward",
                                                      f"whole-model fallback: {reason}"))
    body = ("class ModelNew(Model):\n"
            '    """Model unchanged: the whole-model fallback (the header says why)."""\n')
    return "\n\n".join([header, _copied(problem_source), GENERATED_BANNER, body]) + "\n"


GENERATED_BANNER = "# " + "=" * 40 + " generated by kernelwright " + "=" * 40 + "\nimport torch"
NO_KERNEL = "no custom kernel in this file"


def _copied(problem_source: str) -> str:
    return checker_safe_source(problem_source).rstrip() + "\n"


def _header(info: EmitInfo, lines: Sequence[str], builds: bool = True, summary: Sequence[str] = ()) -> str:
    """The header comment; `summary` lines come right after the title (what a reader must see first)."""
    flags = f"--allow-tf32 {'on' if info.allow_tf32 else 'off'} (FP32 semantics)"
    text = [f"kernelwright {kernelwright.__version__}: ModelNew for {info.problem_id}", *summary,
            f"flags: {flags}", f"verification: {info.verification}", *lines, *info.notes]
    if builds:
        text += ["built when imported on a CUDA machine (cached under $KERNELWRIGHT_CACHE/builds,",
                 "default ~/.cache/kernelwright); without a GPU the import works and forward raises."]
    # A note may span lines (a CUDA error message): every line of it stays a comment.
    return "\n".join(f"# {line}".rstrip() for entry in text for line in str(entry).splitlines() or [""])


# ------------------------------------------------------------------------------------------- sources


def _sources_block(sources: ExtensionSources) -> str:
    """Each source string under a readable name, each kernel's under the IR it implements and beside its
    spec (how the runtime calls it); then each launcher compiled apart (its own library, shared with
    other models), then the runtime extension's source, the same in every file."""
    cuda = sources.cuda_sources
    blocks = [f"_KW_DEVICE_HEADERS = {_raw(cuda[0])}"]
    for index, kernel in enumerate(sources.kernels, start=1):
        comment = "\n".join(f"# {line}" for line in kernel.ir_comment.splitlines())
        blocks.append(f"# ---- kernel {kernel.name}, implementing:\n{comment}\n"
                      f"_KW_CUDA_{kernel.name} = {_raw(cuda[index])}\n"
                      f"_KW_SPEC_{kernel.name} = {kernel.spec.literal()!r}")
    for launcher, text in sources.launchers:
        blocks.append(f"# ---- launcher {launcher} (a library of its own, shared with other models)\n"
                      f"_KW_LAUNCHER_{launcher} = {_raw(text)}")
    blocks.append("# The runtime every kernelwright file shares (built once per torch version, then\n"
                  "# cached): it checks the inputs, prepares the operands, allocates the outputs and\n"
                  f"# calls each kernel's C entry.\n_KW_RUNTIME = {_raw(RUNTIME_SOURCE)}")
    return "\n\n".join(blocks)


def _raw(text: str) -> str:
    if '"""' in text:
        raise ValueError("generated source cannot be embedded as a raw string")
    return f'r"""{text}"""'


def _build_block(sources: ExtensionSources) -> str:
    name = extension_name(sources)
    cuda = ", ".join(["_KW_DEVICE_HEADERS"] + [f"_KW_CUDA_{k.name}" for k in sources.kernels])
    specs = ", ".join(f'"{k.name}": _KW_SPEC_{k.name}' for k in sources.kernels)
    call = f'_kw_build("{name}", [{cuda}], {{{specs}}}, _KW_RUNTIME'
    if sources.launchers:
        call += ", None, [" + ", ".join(f'("{n}", _KW_LAUNCHER_{n})' for n, _ in sources.launchers) + "]"
    return (f"_kw_ext = None\nKW_BUILD_SECONDS = None\n"
            f"if torch.cuda.is_available() or _kw_compile_only():\n"
            f"    _kw_ext, KW_BUILD_SECONDS = {call})\n")


# ------------------------------------------------------------------------------------ derived weights


def _derived_sources(plan: FusionPlan) -> list[str]:
    """FQNs of the parameters and buffers the derived steps read, in the graph's order."""
    read = {id(i) for step in plan.derived_steps for i in step.node.inputs}
    return [n.name for n in plan.graph.params if id(n) in read]


# ------------------------------------------------------------------------------------------- forward


def _value(node: Node, names: dict[int, str]) -> str:
    return literal(node.attr("value")) if node.op == "const" else names[id(node)]


def _own_outputs(graph: Graph, value) -> list[str]:
    """Each output's source, cloned where it would otherwise share memory with an earlier output or be an
    argument or parameter itself: CSE and copy elimination may merge `y, y.clone()` into one node, and
    the caller is owed distinct tensors it may write to."""
    seen: set[int] = set()
    sources = []
    for node in graph.outputs:
        source = value(node)
        if id(node) in seen or node.op in ("input", "param", "buffer"):
            source = f"{source}.clone()"
        seen.add(id(node))
        sources.append(source)
    return sources


def _buffer_updates(graph: Graph, value) -> list[str]:
    """The in-place buffer updates. A value that is a buffer or parameter itself (or a view of one) is
    cloned first: the updates all read the values from before the forward, and another update may
    overwrite that buffer (`prev.copy_(cur); cur.copy_(x)` in either order). Then the updates of buffers
    of one dtype by values of that dtype go in one `torch._foreach_copy_` (one multi-tensor kernel where a
    `copy_` each is a copy each: on an H100 level3/08's seven copies took 0.049 of 0.660 ms; the fast path
    of older PyTorch releases takes every destination for the first one's dtype); a lone one, one that
    converts, or one to a buffer the forward never reads (its dtype unknown here) by `copy_`."""
    dtypes = {p.name: p.dtype for p in graph.params}
    lines: list[str] = []
    groups: dict[object, list[tuple[str, str]]] = {}
    for k, (fqn, node) in enumerate(graph.mutations):
        source = value(node)
        if view_of_leaf(node):
            lines.append(f"_kw_old{k} = {source}.clone()")
            source = f"_kw_old{k}"
        key = node.dtype if dtypes.get(fqn) == node.dtype else ("alone", k)
        groups.setdefault(key, []).append((_self_path(fqn), source))
    for pairs in groups.values():
        if len(pairs) == 1:
            lines.append(f"{pairs[0][0]}.copy_({pairs[0][1]})")
        else:
            lines.append(f"torch._foreach_copy_([{', '.join(d for d, _ in pairs)}], "
                         f"[{', '.join(v for _, v in pairs)}])")
    return lines


def _model_new(graph: Graph, plan: FusionPlan, kernels: dict[int, KernelSource], replay: bool = False) -> str:
    names: dict[int, str] = {}
    args = []
    for node in sorted(graph.inputs, key=lambda n: n.attr("index", 0)):
        name = _identifier(node.name or f"arg{node.attr('index', 0)}")
        names[id(node)] = name
        args.append(name)
    for node in graph.params:
        names[id(node)] = _self_path(node.name)
    body: list[str] = []
    if any(n.op in FACTORY_OPS for n in graph.nodes()):
        body.append(f"device = {_device_source(graph, names)}")
    if plan.derived_steps:
        body.append("# derived weights (parameter-only values), recomputed on every call: never stale")
    counter = 0

    def value(node: Node) -> str:
        return _value(node, names)

    for step in plan.derived_steps + plan.steps:
        if isinstance(step, FusedGroup):
            kernel = kernels[id(step)]
            outs = []
            for node in step.outputs:
                names[id(node)] = f"t{counter}"
                outs.append(f"t{counter}")
                counter += 1
            call = f"_kw_ext.{kernel.name}([{', '.join(value(i) for i in step.inputs)}])"
            body.append(f"{outs[0]}, = {call}" if len(outs) == 1 else f"{', '.join(outs)} = {call}")
        else:
            node = step.node
            names[id(node)] = f"t{counter}"
            counter += 1
            source = aten_source(node.op, [value(i) for i in node.inputs], node.attrs)
            body.append(f"{names[id(node)]} = {source}")
    if graph.mutations:
        body.append("with torch.no_grad():")
        body += [f"    {line}" for line in _buffer_updates(graph, value)]
    outputs = _own_outputs(graph, value)
    if graph.output_kind == "tensor":
        body.append(f"return {outputs[0]}")
    elif graph.output_kind == "list":
        body.append(f"return [{', '.join(outputs)}]")
    else:
        body.append(f"return {_tuple_source(outputs)}")
    signature = ", ".join(["self", *args])
    lines = []
    if _mode_dependent(graph):
        lines.append(f"if {'not ' if graph.training else ''}self.training:\n"
                     f"    # compiled for {'training' if graph.training else 'eval'} mode; the other mode "
                     f"runs Model's own forward\n"
                     f"    return super().forward({', '.join(args)})")
    if kernels:
        lines.append("if _kw_ext is None:\n"
                     '    raise RuntimeError("this ModelNew runs custom CUDA kernels and needs a CUDA GPU; '
                     'none is available")')
    doc = ('    """Model with its forward compiled by kernelwright: custom kernels for the fused groups, '
           'ATen for the rest."""\n\n')
    if not replay:
        return (f"class ModelNew(Model):\n{doc}"
                f"    def forward({signature}):\n{_indented(lines + body)}\n")
    lines.append(f"return _kw_replay(self, ModelNew._kw_forward, ModelNew._kw_state, {_tuple_source(args)})")
    state = _tuple_source([_self_path(n.name) for n in graph.params])
    return (f"class ModelNew(Model):\n{doc}"
            f"    def forward({signature}):\n{_indented(lines)}\n\n"
            f"    def _kw_forward({signature}):\n"
            f'        """The forward step by step (what a CUDA graph records)."""\n{_indented(body)}\n\n'
            f"    def _kw_state(self):\n"
            f'        """The parameters and buffers the forward reads or writes (in each graph key)."""\n'
            f"        return {state}\n")


def _tuple_source(items: list[str]) -> str:
    """A tuple display of `items` (`(a,)` for one)."""
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _indented(lines: list[str]) -> str:
    return "\n".join("        " + line.replace("\n", "\n        ") for line in lines)


def _mode_dependent(graph: Graph) -> bool:
    """Whether train/eval changes what forward computes (batch norm statistics, dropout)."""
    return bool(graph.mutations) or any(
        n.attr("training") is not None or "dropout" in str(n.attr("target", "")) for n in graph.nodes())


def _identifier(name: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not name or name[0].isdigit() or keyword.iskeyword(name) or name == "self":
        name = f"arg_{name}"
    return name


def _self_path(fqn: str) -> str:
    """`self.layers[0].weight` for `layers.0.weight`."""
    path = "self"
    for part in fqn.split("."):
        if part.isidentifier() and not keyword.iskeyword(part):
            path += f".{part}"
        elif part.isdigit():
            path += f"[{part}]"
        else:
            path += f"[{part!r}]"
    return path


def _device_source(graph: Graph, names: dict[int, str]) -> str:
    for node in list(graph.inputs) + list(graph.params):
        if node.attr("kind", "tensor") == "tensor":
            return f"{names[id(node)]}.device"
    return 'torch.device("cuda")'
