"""Building the extension of one ModelNew, and the compile-only check used without a GPU.

The build recipe is Python source (`BUILD_SOURCE`) that the emitter pastes into every ModelNew file (which
may import only torch) and that `build_extension` executes here: one recipe, so our verification builds
exactly what the emitted file builds. Choices, each for compile time:
- one `load_inline` extension per file, named by the hash of its sources and flags, built under
  `$KERNELWRIGHT_CACHE/builds/<name>-<torch>-sm<arch>`; when that folder already holds the built library
  it is imported directly (no ninja, no hashing of sources by torch: the warm path is well under a second);
- `no_implicit_headers=True`: the `.cu` sees no torch header, the binding only the few it includes;
- code for the present GPU's architecture only (`sm_90a` on Hopper), `-O3`; `MAX_JOBS` is honoured by
  torch's ninja build.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kernelwright.codegen.binding import ExtensionSources
from kernelwright.environment import cache_dir, cutlass_include_dir, nvcc_path
from kernelwright.errors import KernelwrightError

BUILD_SOURCE = r'''
def _kw_build(name, cpp_sources, cuda_sources, root=None):
    """Build (or load from the cache) the extension; returns (module, seconds)."""
    import importlib.machinery
    import importlib.util
    import os
    import time

    from torch.utils.cpp_extension import load_inline

    start = time.perf_counter()
    major, minor = torch.cuda.get_device_capability()
    # Only the present GPU; the "a" variants (sm_90a, sm_100a) unlock clusters/TMA/wgmma on Hopper and later.
    arch = f"{major}{minor}" + ("a" if major >= 9 else "")
    root = root or os.environ.get("KERNELWRIGHT_CACHE") or os.path.expanduser("~/.cache/kernelwright")
    folder = os.path.join(root, "builds", f"{name}-{torch.__version__.replace('+', '_')}-sm{arch}")
    library = os.path.join(folder, f"{name}.so")
    if os.path.isfile(library):
        loader = importlib.machinery.ExtensionFileLoader(name, library)
        spec = importlib.util.spec_from_file_location(name, library, loader=loader)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module, time.perf_counter() - start
    os.makedirs(folder, exist_ok=True)
    needs_cutlass = any("#include <cutlass/" in source for source in cuda_sources)
    module = load_inline(
        name=name, cpp_sources=cpp_sources, cuda_sources=cuda_sources, build_directory=folder,
        extra_cflags=["-O3"], extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        extra_include_paths=[_kw_cutlass_include()] if needs_cutlass else [],
        no_implicit_headers=True, verbose=os.environ.get("KERNELWRIGHT_VERBOSE_BUILD") == "1",
    )
    return module, time.perf_counter() - start


def _kw_cutlass_include():
    """The CUTLASS headers of the installed `nvidia-cutlass` wheel, found without importing it (its
    __init__ pulls heavy optional dependencies), or of `$CUTLASS_PATH`."""
    import importlib.util
    import os

    user = os.environ.get("CUTLASS_PATH")
    candidates = [os.path.join(user, "include")] if user else []
    spec = importlib.util.find_spec("cutlass_library")
    if spec is not None and spec.submodule_search_locations:
        root = list(spec.submodule_search_locations)[0]
        candidates += [os.path.join(root, "source", "include"),
                       os.path.join(root, "..", "cutlass", "include")]
    for path in candidates:
        if os.path.isfile(os.path.join(path, "cutlass", "cutlass.h")):
            return path
    raise RuntimeError("this model's GEMM kernels need the CUTLASS headers: pip install nvidia-cutlass "
                       "(or set CUTLASS_PATH to a CUTLASS checkout)")
'''

# nvcc flags torch's extension builder adds; the compile-only check uses them too.
TORCH_NVCC_FLAGS = ("--expt-relaxed-constexpr", "-std=c++17", "-Xcompiler", "-fPIC")
DEFAULT_CHECK_ARCH = "90a"


def extension_name(sources: ExtensionSources) -> str:
    digest = hashlib.sha256()
    for text in (*sources.cpp_sources, *sources.cuda_sources, BUILD_SOURCE):
        digest.update(text.encode())
    return f"kw_{digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class Built:
    module: object
    name: str
    seconds: float


class BuildError(KernelwrightError):
    """The generated sources did not compile (a kernelwright bug: please report it with the log)."""


def build_extension(sources: ExtensionSources) -> Built:
    """Build the extension on this machine's GPU, exactly as the emitted file would."""
    import torch

    namespace: dict = {"torch": torch}
    exec(BUILD_SOURCE, namespace)  # noqa: S102 (our own recipe, shared with emitted files)
    name = extension_name(sources)
    try:
        module, seconds = namespace["_kw_build"](name, sources.cpp_sources, sources.cuda_sources,
                                                 str(cache_dir()))
    except Exception as exc:
        raise BuildError(f"building {name} failed: {_first_errors(str(exc))}") from exc
    return Built(module, name, seconds)


@dataclass(frozen=True)
class CompileCheck:
    ok: bool
    seconds: float
    log: str


def nvcc_check(cuda_text: str, arch: str = DEFAULT_CHECK_ARCH, ptxas_level: int = 3) -> CompileCheck:
    """Compile the CUDA translation unit only (no GPU needed): catches every error in generated kernels
    in about a second, without the binding's host compile. `ptxas_level=0` skips the assembler's
    optimizations (faster; errors are all caught before that stage)."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise KernelwrightError("nvcc not found (set CUDA_HOME or put nvcc on PATH) for the compile check")
    folder = cache_dir() / "checks"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        source = Path(tmp) / "kernels.cu"
        source.write_text(cuda_text)
        # CUTLASS headers (GEMM family) when installed; our own headers are already inlined.
        includes = [f"-I{path}" for path in [cutlass_include_dir()] if path is not None]
        command = [nvcc, "-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}", *TORCH_NVCC_FLAGS, *includes,
                   "-Xptxas", f"-O{ptxas_level}",
                   "-c", str(source), "-o", str(Path(tmp) / "kernels.o")]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    return CompileCheck(done.returncode == 0, seconds, _first_errors(done.stdout + done.stderr))


def _first_errors(log: str, limit: int = 20) -> str:
    lines = log.strip().splitlines()
    errors = [i for i, line in enumerate(lines) if "error" in line.lower()]
    start = max(0, errors[0] - 2) if errors else 0
    return "\n".join(lines[start:start + limit])
