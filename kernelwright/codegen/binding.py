"""Assembles the kernels of one ModelNew into the two translation units of one extension.

CUDA side: our device headers (inlined text, so the emitted file stays self-contained) followed by each
kernel and its launcher; no torch header reaches nvcc. C++ side: a small prelude with only the headers the
bindings need (ATen's Tensor and `empty`, c10's CUDA stream and guard, torch's pybind type casters; not
`torch/extension.h`, which drags in autograd, nn and optim and roughly doubles the host compile) and
our own `PYBIND11_MODULE`, because `load_inline(no_implicit_headers=True)` adds nothing for us.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwright.codegen.kernel import KernelSource

HEADER_DIR = Path(__file__).parent / "cuda"
INCLUDE_RE = re.compile(r'^\s*#include\s+"([\w./-]+)"\s*$', re.MULTILINE)

CPP_PRELUDE = r"""#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// Bindings raise std::runtime_error (a Python RuntimeError) with messages built by plain string
// concatenation. On the H100 image (torch 2.11+cu130, g++ 13) any std::ostringstream in the extension's
// own code crashed the process (SIGSEGV), and with it c10::str and TORCH_CHECK's formatting; a
// std::runtime_error with a concatenated std::string arrived as RuntimeError (probe in the closing note of
// that session). kw_guard converts what an ATen call inside a binding raises.
static void kw_append(std::string& s, const char* v) { s += v; }
static void kw_append(std::string& s, const std::string& v) { s += v; }
static void kw_append(std::string& s, at::ScalarType v) { s += c10::toString(v); }
static void kw_append(std::string& s, const c10::Device& v) { s += v.str(); }
static void kw_append(std::string& s, at::IntArrayRef v) {
  s += "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]";
}
template <typename T, typename = std::enable_if_t<std::is_integral<T>::value>>
static void kw_append(std::string& s, T v) { s += std::to_string(v); }

template <typename... A>
static std::string kw_str(const A&... parts) {
  std::string s;
  (kw_append(s, parts), ...);
  return s;
}

#define KW_CHECK(cond, ...) \
  do { if (!(cond)) throw std::runtime_error(kw_str(__VA_ARGS__)); } while (0)

using kw_binding = std::vector<at::Tensor> (*)(std::vector<at::Tensor>);

static std::vector<at::Tensor> kw_guard(kw_binding binding, std::vector<at::Tensor> inputs) {
  try {
    return binding(std::move(inputs));
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

// Every kernel binding checks its inputs the same way: a clear message naming the kernel and the input
// instead of a wild memory access.
static void kw_check_input(const at::Tensor& t, at::ScalarType dtype, at::IntArrayRef sizes,
                           const char* kernel, int index) {
  KW_CHECK(t.is_cuda(), kernel, ": input ", index, " must be a CUDA tensor");
  KW_CHECK(t.scalar_type() == dtype, kernel, ": input ", index, " must be ", dtype,
           ", got ", t.scalar_type());
  KW_CHECK(t.sizes() == sizes, kernel, ": input ", index, " must have shape ", sizes,
           ", got ", t.sizes());
}

static void kw_check_launch(int error, const char* kernel) {
  KW_CHECK(error == 0, kernel, ": kernel launch failed: ",
           cudaGetErrorString(static_cast<cudaError_t>(error)));
}

// Launchers over strided operands take every operand's pointer, its strides over the kernel's domain
// (rank values per operand) and the outputs' pointers. One shared helper keeps each binding a few lines
// (less host code to compile per kernel).
using kw_strided_launcher = int (*)(const void* const*, const long long*, void* const*, cudaStream_t);

static std::vector<at::Tensor> kw_launch_strided(const std::vector<at::Tensor>& operands, int64_t rank,
                                                 std::vector<at::Tensor> outputs, kw_strided_launcher launch,
                                                 const char* kernel) {
  std::vector<const void*> in;
  std::vector<long long> strides;
  for (const auto& t : operands) {
    in.push_back(t.data_ptr());
    for (int64_t d = 0; d < rank; ++d) strides.push_back(t.stride(d));
  }
  std::vector<void*> out;
  for (auto& t : outputs) out.push_back(t.data_ptr());
  kw_check_launch(launch(in.data(), strides.data(), out.data(), c10::cuda::getCurrentCUDAStream()), kernel);
  return outputs;
}
"""


@dataclass(frozen=True)
class ExtensionSources:
    """The pieces of one extension, kept apart so the emitted file can show each kernel with its IR.
    `load_inline` joins each list with newlines."""

    headers: str                      # device headers, inlined
    kernels: tuple[KernelSource, ...]

    @property
    def cuda_sources(self) -> list[str]:
        return [normalized(t) for t in [self.headers] + [_strip_includes(k.cuda) for k in self.kernels]]

    @property
    def cpp_sources(self) -> list[str]:
        texts = [CPP_PRELUDE] + [k.cpp for k in self.kernels] + [module_definition(self.kernels)]
        return [normalized(t) for t in texts]

    @property
    def cuda_text(self) -> str:
        return "\n".join(self.cuda_sources)

    @property
    def cpp_text(self) -> str:
        return "\n".join(self.cpp_sources)


def assemble(kernels: Sequence[KernelSource]) -> ExtensionSources:
    """Resolve the `#include "x.cuh"` lines of every kernel against codegen/cuda/ (kw_common.cuh always
    first), each header once, in order of first use. Kernels are named by a hash of what they compute, so
    groups that compute the same thing on the same shapes (a network's repeated blocks) share one kernel:
    each name is defined once (twice would not compile)."""
    kernels = _distinct(kernels)
    order: list[str] = []
    _collect("kw_common.cuh", order)
    for kernel in kernels:
        for name in INCLUDE_RE.findall(kernel.cuda):
            _collect(name, order)
    texts = [_strip_includes((HEADER_DIR / name).read_text()).replace("#pragma once\n", "") for name in order]
    headers = "#include <cuda_runtime.h>\n#include <stdint.h>\n" + "\n".join(
        f"// ======== {name}\n{text}" for name, text in zip(order, texts, strict=True))
    return ExtensionSources(headers, tuple(kernels))


def _distinct(kernels: Sequence[KernelSource]) -> list[KernelSource]:
    """Each kernel name once, in order of first use; one name with two different sources is a naming bug."""
    seen: dict[str, KernelSource] = {}
    for kernel in kernels:
        first = seen.setdefault(kernel.name, kernel)
        if (first.cuda, first.cpp) != (kernel.cuda, kernel.cpp):
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


def module_definition(kernels: Sequence[KernelSource]) -> str:
    lines = "\n".join(f'  m.def("{k.name}", [](std::vector<at::Tensor> inputs) {{ '
                      f'return kw_guard(&{k.name}, std::move(inputs)); }});' for k in kernels)
    return f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{lines}\n}}\n"
