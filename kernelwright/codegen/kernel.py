"""What every kernel family renders: the CUDA side of one fused group and the spec its call follows.

Convention (all families): the CUDA side includes only `cuda_runtime.h` and our device headers
(`#include "kw_common.cuh"` lines are replaced by the header text when the extension is assembled) and
exports two C functions, `kw_entry_NAME` and `kw_workspace_NAME` (signatures in kw_entry.h). The shared
runtime extension (`cuda/kw_runtime.cpp`, built once per torch version and Python ABI) calls them:
given the inputs in `group.inputs` order (const leaves are baked into the code, never passed) it checks
each against `spec.inputs`, makes the operands the entry reads (`spec.operands`: an input through a chain
of steps — views, contiguous or aligned copies — and optionally a parameter-derived buffer it keeps),
allocates `spec.outputs` and the workspace on the current stream and returns the outputs in
`group.outputs` order. No torch header reaches a model's own build, which is nvcc alone (about 1-2 s).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template

import torch

TEMPLATE_DIR = Path(__file__).parent / "cuda"

Typed = tuple                                        # (dtype name, shape), inputs also (.., label)
Step = tuple                                         # (op name, int...): see kw_runtime.cpp's Op
Cache = tuple[int, int, tuple[int, ...]]             # (bytes, fingerprint words, key)


@dataclass(frozen=True)
class KernelSpec:
    """How the runtime calls one kernel (plain data, written into the emitted file as a literal)."""

    inputs: tuple[Typed, ...]
    operands: tuple[tuple[int, tuple[Step, ...], Cache | None], ...]
    outputs: tuple[Typed, ...]

    def literal(self) -> tuple:
        return (self.inputs, self.operands, self.outputs)


@dataclass(frozen=True)
class Launcher:
    """A launcher built into a library of its own, cached by its text and shared by every kernel that calls
    it, in one model or many (a CUTLASS instantiation: 10-40 s of nvcc; the model's own library then only
    declares its functions and links to it)."""

    name: str          # kw_FAMILY_<hash of its text>
    cuda: str          # its text (`#include "x"` lines for our headers), include-guarded


@dataclass(frozen=True)
class KernelSource:
    name: str          # C identifier: the entry is kw_entry_NAME
    cuda: str          # kernels, a launcher (or its declarations), the two C entry points; no torch headers
    spec: KernelSpec   # the checks, operands and outputs of a call
    ir_comment: str    # the IR this kernel implements (printed above it in the emitted file)
    launcher: Launcher | None = None   # where `cuda` declares its launcher instead of holding it

    @property
    def text(self) -> str:
        """All of this kernel's CUDA: its launcher's text where that is compiled apart, then its own."""
        return (self.launcher.cuda if self.launcher else "") + self.cuda


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def typed(nodes: Sequence) -> tuple[Typed, ...]:
    """(dtype, shape) of IR nodes, for a spec's outputs."""
    return tuple((dtype_name(n.dtype), tuple(int(s) for s in n.shape)) for n in nodes)


def typed_inputs(nodes: Sequence, roles: Sequence[str] | None = None,
                 names: bool = True) -> tuple[Typed, ...]:
    """(dtype, shape, label) of a group's inputs: the label (the input's role, where the family gives one,
    and its IR name) is how the runtime's error messages name a wrong input. `names` only where the kernel's
    name hashes them too: groups that share a kernel must share its spec."""
    roles = roles or [""] * len(nodes)
    return tuple((*t, f"{role} {n.name or n.op if names else ''}".strip())
                 for t, n, role in zip(typed(nodes), nodes, roles, strict=True))


def cpp_bool(value: object) -> str:
    """A template's C++ bool literal for a Python truth value."""
    return "true" if value else "false"


def entry_points(name: str, body: str, workspace: str = "0") -> str:
    """The two C functions of a kernel: the entry (`body` uses `in`, `out`, `workspace`, `cached`, `stream`
    and returns nullptr or an error) and its workspace size expression."""
    return (f'extern "C" const char* kw_entry_{name}(const KwOperand* in, void* const* out, void* workspace, '
            f"const KwCached* cached, cudaStream_t stream) {{\n"
            f"  (void)in; (void)out; (void)workspace; (void)cached;\n{body}\n}}\n"
            f'extern "C" size_t kw_workspace_{name}() {{ return {workspace}; }}\n')


def source_template(filename: str, fragment: bool = False) -> Template:
    """A source template of `codegen/cuda/`: a kernel (`.cu.in`) with `string.Template` holes (`$name`,
    `${name}`; `$$` is a `$`). A `fragment` fills a hole of another template on a line of its own: its
    file's final newline belongs to that line, so it is dropped."""
    text = (TEMPLATE_DIR / filename).read_text()
    return Template(text.removesuffix("\n") if fragment else text)


def shared_launcher_kernel(family: str, launcher_cuda: Callable[[str], str],
                           entry: Callable[[str, str], tuple[str, KernelSpec]],
                           ir_comment: str) -> KernelSource:
    """A kernel whose launcher other groups may share (the GEMM and conv families: sizes are launcher
    arguments, so the launcher's text depends only on the variant and the epilogue). `launcher_cuda(name)`
    renders the launcher under a placeholder name; it becomes `kw_FAMILY_<hash of its text>`, wrapped in an
    include guard, so repeating it in one translation unit costs nothing. `entry(name, launcher)` renders
    the group's own entry points and spec, named `<launcher>_<hash of both>`. A launcher that includes
    CUTLASS is a `Launcher` of its own (built once per machine for every model that calls it); the kernel's
    text then declares its functions (those defined at the start of a line, named `<launcher>_...`)."""
    launcher, guarded = guarded_launcher(family, launcher_cuda)
    placeholder = f"KW_{family.upper()}_PLACEHOLDER"
    entry_cuda, spec = entry(placeholder, launcher)
    name = f"{launcher}_{_digest(entry_cuda + repr(spec))[:8]}"
    entry_text = entry_cuda.replace(placeholder, name)
    if not _HEAVY_INCLUDE.search(guarded):
        return KernelSource(name=name, cuda=guarded + entry_text, spec=spec, ir_comment=ir_comment)
    return KernelSource(name=name, cuda=launcher_declarations(guarded, launcher) + entry_text, spec=spec,
                        ir_comment=ir_comment, launcher=Launcher(launcher, guarded))


def guarded_launcher(family: str, launcher_cuda: Callable[[str], str]) -> tuple[str, str]:
    """(name, text) of a launcher that groups share by name: `launcher_cuda(name)` rendered under a
    placeholder, named `kw_FAMILY_<hash of that text>` and wrapped in an include guard."""
    placeholder = f"KW_{family.upper()}_PLACEHOLDER"
    body = launcher_cuda(placeholder)
    launcher = f"kw_{family}_{_digest(body)}"
    guard = launcher.upper()
    text = body.replace(placeholder, launcher)
    return launcher, f"#ifndef {guard}\n#define {guard}\n{text}#endif  // {guard}\n"


# a launcher that includes these is compiled apart (its headers alone cost nvcc tens of seconds)
_HEAVY_INCLUDE = re.compile(r"^\s*#include\s*<(cutlass|cute)/", re.MULTILINE)


def launcher_declarations(cuda: str, launcher: str) -> str:
    """Declarations of the functions `cuda` defines at the start of a line whose names begin with
    `launcher` (its exported functions: return type, name, parameters, then `{`)."""
    found = re.findall(rf"^((?:const\s+)?[A-Za-z_]\w*\s*\**\s+)({re.escape(launcher)}_\w+)\(([^)]*)\)\s*\{{",
                       cuda, flags=re.MULTILINE)
    if not found:
        raise ValueError(f"{launcher}: no exported function found in its launcher")
    return "".join(f"{ret.strip()} {fn}({' '.join(params.split())});\n" for ret, fn, params in found)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]
