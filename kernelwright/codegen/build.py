"""Building the extension of one ModelNew, and the compile-only check used without a GPU.

The build recipe is Python source (`BUILD_SOURCE`) that the emitter pastes into every ModelNew file (which
may import only torch) and that `build_extension` executes here: one recipe, so our verification builds
exactly what the emitted file builds. Choices, for compile time and for many processes at once:
- one `load_inline` extension per file, named by the hash of its sources and flags, published as
  `$KERNELWRIGHT_CACHE/builds/<name>-<torch>-sm<arch>[-cutlass<version>]/<name>.so`; when that library
  exists it is imported directly (no ninja, no hashing of sources by torch: the warm path is well under a
  second);
- concurrency: built in that folder's `staging/` under an flock of the folder's `build.lock` (dropped by
  the kernel when a builder dies), published by an atomic rename, rebuilt once if it does not load, so
  builders and readers in any number of processes never see half a library (a ResNet fell back with
  "cannot open shared object file" while other tasks built the same extension);
- `no_implicit_headers=True`: the `.cu` sees no torch header, the binding only the few it includes;
- code for the present GPU's architecture only (`sm_90a` on Hopper), `-O3`; `MAX_JOBS` is honoured by
  torch's ninja build.
"""

from __future__ import annotations

import hashlib
import re
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
    """Build the extension, or load it from the cache; returns (module, seconds).

    Any number of processes may build or load at once: a library is built in a staging folder under a
    per-extension lock (an flock, which the kernel drops when its holder dies, so a crash leaves nothing
    stuck), then published by an atomic rename; a reader sees no library or a whole one. A published library
    that does not load is built again, once."""
    import os
    import time

    start = time.perf_counter()
    arch = _kw_arch()
    root = root or os.environ.get("KERNELWRIGHT_CACHE") or os.path.expanduser("~/.cache/kernelwright")
    needs_cutlass = any("#include <cutlass/" in source for source in cuda_sources)
    include = _kw_cutlass_include() if needs_cutlass else None
    tag = f"{torch.__version__.replace('+', '_')}-sm{arch}"
    if include:
        tag += f"-cutlass{_kw_cutlass_version(include)}"
    folder = os.path.join(root, "builds", f"{name}-{tag}")
    library = os.path.join(folder, f"{name}.so")
    module = _kw_load(name, library)
    if module is None:
        os.makedirs(folder, exist_ok=True)
        with _KwFileLock(os.path.join(folder, "build.lock")):
            module = _kw_load(name, library)
            if module is None:
                module = _kw_compile(name, cpp_sources, cuda_sources, folder, arch, include)
    return module, time.perf_counter() - start


def _kw_compile_only():
    """kernelwright eval --compile-only: compile the kernels where there is no GPU (nothing is loaded)."""
    import os

    return os.environ.get("KERNELWRIGHT_COMPILE_ONLY") == "1"


def _kw_arch():
    """The present GPU's architecture (the "a" variants, sm_90a and later, unlock clusters, TMA and
    wgmma); without a GPU (kernelwright eval --compile-only) the H100's."""
    if not torch.cuda.is_available():
        return "90a"
    major, minor = torch.cuda.get_device_capability()
    return f"{major}{minor}" + ("a" if major >= 9 else "")


def _kw_load(name, library):
    """The module in `library`, or None when there is none or it does not load."""
    import contextlib
    import importlib.machinery
    import importlib.util
    import os

    if not os.path.isfile(library):
        return None
    loader = importlib.machinery.ExtensionFileLoader(name, library)
    spec = importlib.util.spec_from_file_location(name, library, loader=loader)
    with contextlib.suppress(ImportError, OSError):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return None


def _kw_compile(name, cpp_sources, cuda_sources, folder, arch, include):
    """Build in `folder`/staging (used only under the extension's lock), then publish the library."""
    import os
    import shutil

    from torch.utils.cpp_extension import load_inline

    staging = os.path.join(folder, "staging")
    shutil.rmtree(staging, ignore_errors=True)  # a crashed build's objects, torch's own lock file among them
    os.makedirs(staging)
    module = load_inline(
        name=name, cpp_sources=cpp_sources, cuda_sources=cuda_sources, build_directory=staging,
        extra_cflags=["-O3"], extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        extra_include_paths=[include] if include else [],
        no_implicit_headers=True, verbose=os.environ.get("KERNELWRIGHT_VERBOSE_BUILD") == "1",
    )
    built = os.path.join(staging, f"{name}.so")
    if os.path.isfile(built):  # eval --compile-only links nothing
        os.replace(built, os.path.join(folder, f"{name}.so"))
    return module


class _KwFileLock:
    """An exclusive flock on `path` for a with-block (none where the OS has no flock)."""

    def __init__(self, path):
        self.path, self.fd = path, None

    def __enter__(self):
        import importlib.util
        import os

        if importlib.util.find_spec("fcntl") is not None:
            import fcntl

            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc_info):
        import os

        if self.fd is not None:
            os.close(self.fd)  # releases the lock
        return False


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
    raise RuntimeError("this model's GEMM kernels need the CUTLASS headers: pip install --no-deps "
                       "nvidia-cutlass (or set CUTLASS_PATH to a CUTLASS checkout)")


def _kw_cutlass_version(include):
    """major.minor.patch of the CUTLASS headers (cutlass/version.h): other headers make another library."""
    import os
    import re

    with open(os.path.join(include, "cutlass", "version.h")) as handle:
        text = handle.read()
    found = [re.search(rf"#define CUTLASS_{part} (\d+)", text) for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(match.group(1) if match else "x" for match in found)
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
    steps: tuple[tuple[str, float], ...] = ()   # (ninja target, seconds), or (("cached", s),) for a warm load


class BuildError(KernelwrightError):
    """The generated sources did not compile (a kernelwright bug: please report it with the log)."""


# A compiler's own error lines (nvcc `file.cu(37): error`, gcc `file.cpp:6:47: error`, the linker): a build
# that failed without one failed for another reason (disk, a killed compiler, the toolchain itself).
_COMPILER_ERROR = re.compile(r"(\(\d+\)|:\d+(:\d+)?): (fatal )?error\b|undefined reference to|\berror: ",
                             re.IGNORECASE)


def is_compiler_error(message: str) -> bool:
    """Whether a build failure is the compiler rejecting the sources (as opposed to the environment)."""
    return bool(_COMPILER_ERROR.search(message))


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
    return Built(module, name, seconds, _build_steps(module, seconds))


def _build_steps(module: object, seconds: float) -> tuple[tuple[str, float], ...]:
    """What a build spent its time on, from ninja's log in the staging folder (a fresh build's library is
    loaded from there); a library loaded from the cache was not built."""
    library = Path(getattr(module, "__file__", "") or "")
    log = library.parent / ".ninja_log"
    if library.parent.name != "staging" or not log.is_file():
        return (("cached", round(seconds, 3)),)
    steps = []
    for line in log.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            steps.append((fields[3], round((int(fields[1]) - int(fields[0])) / 1000, 3)))
    return tuple(steps)


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
