"""Assembles the kernels of one ModelNew into the translation units of its kernel library.

Our device headers (inlined text, so the emitted file stays self-contained) followed by each kernel, its
launcher and its two C entry points (the build recipe spreads the kernels over several units, each with the
headers first: build.py `_kw_units`); no torch header reaches nvcc, and there is no per-model host
translation unit at all: the shared runtime extension (`cuda/kw_runtime.cpp`, `RUNTIME_SOURCE`, the same
text for every model) calls the entries as each kernel's spec says. The runtime is the only code that
parses ATen's and pybind11's headers (12-16 s of g++ on the H100 machine), and it is built once per torch
version and Python ABI instead of once per model. A kernel's `Launcher` (a CUTLASS instantiation) is a
translation unit of its own, built into a library that every model calling it links to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwright.codegen.kernel import KernelSource

HEADER_DIR = Path(__file__).parent / "cuda"
INCLUDE_RE = re.compile(r'^\s*#include\s+"([\w./-]+)"\s*$', re.MULTILINE)


def _inlined(text: str) -> str:
    """`text` with each `#include "x"` of ours replaced by the header (a self-contained source)."""
    return INCLUDE_RE.sub(lambda m: (HEADER_DIR / m.group(1)).read_text().replace("#pragma once\n", ""), text)


RUNTIME_SOURCE = _inlined((HEADER_DIR / "kw_runtime.cpp").read_text())


@dataclass(frozen=True)
class ExtensionSources:
    """The pieces of one model's kernels, kept apart so the emitted file can show each kernel with its IR.
    The build recipe (build.py `_kw_units`) spreads the CUDA list's kernels over translation units, each
    with the headers first; the specs say how the runtime calls each kernel."""

    headers: str                      # device headers, inlined
    kernels: tuple[KernelSource, ...]
    launchers: tuple[tuple[str, str], ...] = ()   # (name, its whole translation unit) per distinct launcher

    @property
    def cuda_sources(self) -> list[str]:
        return [normalized(t) for t in [self.headers] + [_strip_includes(k.cuda) for k in self.kernels]]

    @property
    def cuda_text(self) -> str:
        """Everything in one translation unit (the launchers' texts before the kernels that declare their
        functions): what a compile check compiles."""
        if not self.launchers:
            return "\n".join(self.cuda_sources)
        launchers = [k.launcher.cuda for k in _distinct_launchers(self.kernels)]
        headers = _headers([k.cuda for k in self.kernels] + launchers)
        return "\n".join(normalized(t) for t in [headers, *map(_strip_includes, launchers)]
                         + [_strip_includes(k.cuda) for k in self.kernels])

    @property
    def specs(self) -> dict[str, tuple]:
        """Kernel name -> its spec as plain data (`KernelSpec.literal`), as the emitted file holds it."""
        return {k.name: k.spec.literal() for k in self.kernels}


def assemble(kernels: Sequence[KernelSource]) -> ExtensionSources:
    """Resolve the `#include "x.cuh"` lines of every kernel against codegen/cuda/ (kw_common.cuh always
    first), each header once, in order of first use. Kernels are named by a hash of what they compute, so
    groups that compute the same thing on the same shapes (a network's repeated blocks) share one kernel:
    each name is defined once (twice would not compile)."""
    kernels = _distinct(kernels)
    headers = _headers([k.cuda for k in kernels])
    launchers = tuple((k.launcher.name, normalized(_headers([k.launcher.cuda]) + "\n"
                                                  + _strip_includes(k.launcher.cuda)))
                      for k in _distinct_launchers(kernels))
    return ExtensionSources(headers, tuple(kernels), launchers)


def _headers(texts: Sequence[str]) -> str:
    """Our device headers that `texts` include, inlined (kw_common.cuh always first), each once, in order of
    first use."""
    order: list[str] = []
    _collect("kw_common.cuh", order)
    for text in texts:
        for name in INCLUDE_RE.findall(text):
            _collect(name, order)
    inlined = [_strip_includes((HEADER_DIR / name).read_text()).replace("#pragma once\n", "")
               for name in order]
    return "#include <cuda_runtime.h>\n#include <stdint.h>\n" + "\n".join(
        f"// ======== {name}\n{text}" for name, text in zip(order, inlined, strict=True))


def _distinct_launchers(kernels: Sequence[KernelSource]) -> list[KernelSource]:
    """One kernel per distinct launcher, in order of first use."""
    seen: dict[str, KernelSource] = {}
    for kernel in kernels:
        if kernel.launcher is not None:
            seen.setdefault(kernel.launcher.name, kernel)
    return list(seen.values())


def _distinct(kernels: Sequence[KernelSource]) -> list[KernelSource]:
    """Each kernel name once, in order of first use; one name with two different sources is a naming bug."""
    seen: dict[str, KernelSource] = {}
    for kernel in kernels:
        first = seen.setdefault(kernel.name, kernel)
        if (first.cuda, first.spec) != (kernel.cuda, kernel.spec):
            raise ValueError(f"two different kernels are both named {kernel.name}")
    return list(seen.values())


def _collect(name: str, order: list[str]) -> None:
    if name in order:
        return
    path = HEADER_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"kernel source includes {name!r}, which is not in {HEADER_DIR}")
    for inner in INCLUDE_RE.findall(path.read_text()):
        _collect(inner, order)
    order.append(name)


def normalized(text: str) -> str:
    """One leading and one trailing newline: the exact strings the emitted file holds, so the extension
    the compiler builds for verification is the one the emitted file loads from the cache."""
    return "\n" + text.strip("\n") + "\n"


def _strip_includes(text: str) -> str:
    return INCLUDE_RE.sub("", text)
