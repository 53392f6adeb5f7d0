"""Building the kernels of one ModelNew, and the compile-only check used without a GPU.

The build recipe is Python source (`BUILD_SOURCE`) that the emitter pastes into every ModelNew file (which
may import only torch) and that `build_extension` executes here: one recipe, so our verification builds
exactly what the emitted file builds. Choices, for compile time and for many processes at once:
- two libraries: the model's kernels (nvcc on `.cu` files with no torch header, about 8 kernels a file,
  compiled side by side: 1-2 s; a plain shared library whose C entry points are found with ctypes) and
  the shared runtime extension (`codegen/cuda/kw_runtime.cpp`: ATen and pybind11, 12-16 s of g++), the
  same text for every model, so it is built once per torch version and Python ABI and then loaded from
  the cache;
- each published as `$KERNELWRIGHT_CACHE/builds/<name>-<tag>/<name>.so`, named by the hash of its sources
  and flags; when that library exists it is loaded directly (no ninja, no hashing of sources by torch: the
  warm path is well under a second);
- concurrency: built in that folder's `staging/` under an flock of the folder's `build.lock` (dropped by
  the kernel when a builder dies), published by an atomic rename, rebuilt once if it does not load, so
  builders and readers in any number of processes never see half a library (a ResNet fell back with
  "cannot open shared object file" while other tasks built the same extension);
- code for the present GPU's architecture only (`sm_90a` on Hopper), `-O3`; `MAX_JOBS` is honoured by
  torch's ninja build.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwright.codegen.assemble import RUNTIME_SOURCE, ExtensionSources
from kernelwright.codegen.kernel import KernelSource
from kernelwright.environment import cache_dir, cutlass_include_dir, nvcc_path
from kernelwright.errors import KernelwrightError

BUILD_SOURCE = r'''
def _kw_build(name, cuda_sources, specs, runtime_source, root=None, launchers=()):
    """Build the model's kernel library and the shared runtime extension, or load them from the cache;
    returns (kernels, seconds): `kernels.NAME([tensors])` runs kernel NAME (under compile-only, the library
    stub, whose functions say they were not built). `launchers`: (name, source) of launchers compiled apart
    (CUTLASS instantiations), each into a library of its own that any model calling it links to.

    Any number of processes may build or load at once: a library is built in a staging folder under a
    per-library lock (an flock, which the kernel drops when its holder dies, so a crash leaves nothing
    stuck), then published by an atomic rename; a reader sees no library or a whole one. A published library
    that does not load is built again, once."""
    import os
    import time

    start = time.perf_counter()
    arch = _kw_arch()
    root = root or os.environ.get("KERNELWRIGHT_CACHE") or os.path.expanduser("~/.cache/kernelwright")
    # first: the model's library names their files (one whose launcher library is gone does not load, and
    # is built again)
    linked = [_kw_launcher(root, arch, launcher, source) for launcher, source in launchers]
    include, tag = _kw_tag(cuda_sources, arch)
    # Compile-only compiles even where a cache holds a linked library (built on a GPU machine).
    load = (lambda _name, _path: None) if _kw_compile_only() else _kw_open_library
    library = _kw_cached(root, name, tag, load,
                         lambda staging: _kw_compile(name, cuda_sources, staging, arch, include, linked))
    if _kw_compile_only():
        return library, time.perf_counter() - start
    return _KwKernels(_kw_runtime(runtime_source, root), library, specs), time.perf_counter() - start


def _kw_tag(cuda_sources, arch):
    """(CUTLASS include folder or None, cache tag) of a library built from `cuda_sources`: the torch version,
    the GPU architecture and, where they are included, the CUTLASS headers' version."""
    needs_cutlass = any(f"#include <{lib}/" in text for text in cuda_sources for lib in ("cutlass", "cute"))
    include = _kw_cutlass_include() if needs_cutlass else None
    version = torch.__version__.replace("+", "_")
    return include, f"{version}-sm{arch}" + (f"-cutlass{_kw_cutlass_version(include)}" if include else "")


def _kw_launcher(root, arch, launcher, source):
    """The path of `launcher`'s library, built from `source` where the cache has none (named by a hash of
    the source: a launcher's name hashes its own text, not the headers it includes)."""
    import hashlib
    import os

    name = f"{launcher}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    include, tag = _kw_tag([source], arch)
    found = (lambda _name, _path: None) if _kw_compile_only() else _kw_built_path
    return _kw_cached(root, name, tag, found,
                      lambda staging: _kw_compile(name, [source], staging, arch, include))


def _kw_built_path(_name, path):
    """`path` where a library is published there (a `_kw_cached` load that only needs the file), else None."""
    import os

    return path if os.path.isfile(path) else None


def _kw_runtime(source, root):
    """The shared runtime extension, built once per torch version and Python ABI (host code only: the GPU
    does not matter), then loaded from the cache."""
    name, tag = _kw_runtime_name(source)
    return _kw_cached(root, name, tag, _kw_load, lambda staging: _kw_compile_runtime(name, source, staging))


def _kw_runtime_name(source):
    """(name, tag) of the runtime built from `source`: its library is root/builds/NAME-TAG/NAME.so."""
    import hashlib
    import sys

    name = "kw_runtime_" + hashlib.sha256(source.encode()).hexdigest()[:16]
    return name, f"{torch.__version__.replace('+', '_')}-{sys.implementation.cache_tag}"


class _KwKernels:
    """A model's kernels: one attribute per kernel, calling the runtime's `launch` with that kernel.
    `launch` is looked up on the runtime module at every call (not bound once): a judge that wraps the
    module's functions to count calls, then puts them back for timing, times the unwrapped one."""

    def __init__(self, runtime, library, specs):
        import ctypes

        for name, (inputs, operands, outputs) in specs.items():
            entry, workspace = (ctypes.cast(getattr(library, f"kw_{kind}_{name}"), ctypes.c_void_p).value
                                for kind in ("entry", "workspace"))
            kernel = runtime.Kernel(name, entry, workspace, list(inputs), list(operands), list(outputs))
            setattr(self, name, lambda tensors, kernel=kernel: runtime.launch(kernel, tensors))


def _kw_cached(root, name, tag, load, compile):
    """`load(name, path)` of `root`/builds/NAME-TAG/NAME.so, else `compile(staging)` under the folder's
    lock (it builds in `staging`) and the library published by an atomic rename, then loaded."""
    import os
    import shutil

    folder = os.path.join(root, "builds", f"{name}-{tag}")
    path = os.path.join(folder, f"{name}.so")
    found = load(name, path)
    if found is not None:
        return found
    os.makedirs(folder, exist_ok=True)
    with _KwFileLock(os.path.join(folder, "build.lock")):
        found = load(name, path)
        if found is None:
            staging = os.path.join(folder, "staging")
            # a crashed build's objects, torch's own lock file among them
            shutil.rmtree(staging, ignore_errors=True)
            os.makedirs(staging)
            found = compile(staging)
            built = os.path.join(staging, f"{name}.so")
            if os.path.isfile(built):  # eval --compile-only links nothing
                os.replace(built, path)
            if isinstance(found, str):
                found = load(name, path)
                if found is None:
                    raise RuntimeError(f"{name}: the library just built does not load ({path})")
    return found


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
    """The Python extension module in `library`, or None when there is none or it does not load."""
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


def _kw_open_library(name, library):
    """The plain shared library `library` (a model's kernels and their C entries), or None."""
    import contextlib
    import ctypes
    import os

    if not os.path.isfile(library):
        return None
    with contextlib.suppress(OSError):
        return ctypes.CDLL(library)
    return None


def _kw_compile(name, cuda_sources, staging, arch, include, linked=()):
    """The kernels' library, built by nvcc alone (no torch header: about a second a unit), in `staging`,
    linked to the launcher libraries at the paths in `linked` (a loader finds them there: a library without
    a soname is recorded as the path it was linked as). The kernels are spread over the translation units
    of `_kw_units`, which ninja compiles side by side: nvcc is one process a unit, and a DenseNet-like
    network's 74 kernels took 17 s in one."""
    import os

    from torch.utils.cpp_extension import load

    sources = []
    for index, text in enumerate(_kw_units(cuda_sources)):
        sources.append(os.path.join(staging, f"kernels_{index}.cu"))
        with open(sources[-1], "w") as file:
            file.write(text)
    return load(
        name=name, sources=sources, build_directory=staging,
        # NDEBUG: CUTLASS's device-side asserts are calls between wgmma issue and wait, which make ptxas
        # serialize every wgmma of a Hopper kernel (1.4-1.6x slower); no kernel of ours asserts
        extra_cuda_cflags=["-O3", "-DNDEBUG", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        # (under compile-only a launcher's "path" is the stub of a library never linked)
        extra_ldflags=[path for path in linked if isinstance(path, str)],
        extra_include_paths=_kw_cutlass_paths(include) if include else [], is_python_module=False,
        verbose=os.environ.get("KERNELWRIGHT_VERBOSE_BUILD") == "1",
    )


def _kw_units(cuda_sources, per_unit=8, most=16):
    """The translation units of a library: the shared device headers (`cuda_sources[0]`, templates, inline
    functions and anonymous namespaces only, so that every unit may hold them) and the kernels dealt out,
    about `per_unit` to a unit (a unit's fixed cost, nvcc's start and the headers, is about a second), at
    most one unit per CPU, MAX_JOBS (torch's cap on ninja) or `most`. Kernels that share a launcher stay in
    one unit: each carries its text under the launcher's include guard (`#ifndef KW_...`), so a unit
    defines it once, and two units would define its functions twice. The count depends on the machine's
    CPUs, not on the calling thread's pinning (a different split of the same sources is a different build
    to torch, which names it `_v1`)."""
    import os
    import re

    headers, kernels = cuda_sources[0], cuda_sources[1:]
    groups = []   # [(guards, kernel indices)]: kernels joined by any guard they share
    for index, text in enumerate(kernels):
        guards = set(re.findall(r"^#ifndef (KW_\w+)", text, re.MULTILINE))
        joined = [group for group in groups if group[0] & guards]
        groups = [group for group in groups if group not in joined]
        groups.append((guards.union(*(g for g, _ in joined)), [i for _, m in joined for i in m] + [index]))
    jobs = os.environ.get("MAX_JOBS", "")
    cpus = os.cpu_count() or 1
    count = max(1, min(-(-len(kernels) // per_unit), cpus, int(jobs) if jobs.isdigit() else cpus, most))
    units = [[] for _ in range(count)]
    for _, members in sorted(groups, key=lambda group: (-len(group[1]), group[1][0])):
        min(units, key=len).extend(members)   # the largest groups first, each to the emptiest unit
    return ["\n".join([headers, *(kernels[i] for i in sorted(unit))]) for unit in units if unit] or [headers]


def _kw_compile_runtime(name, source, staging, python_module=True):
    """The shared runtime extension (ATen, c10 CUDA, pybind11: the one slow host compile), in `staging`;
    imported, or (`python_module=False`) only linked and its path returned."""
    import os

    from torch.utils.cpp_extension import load_inline

    return load_inline(
        name=name, cpp_sources=[source], build_directory=staging, extra_cflags=["-O3"], with_cuda=True,
        is_python_module=python_module, no_implicit_headers=True,
        verbose=os.environ.get("KERNELWRIGHT_VERBOSE_BUILD") == "1",
    )


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
    __init__ pulls heavy optional dependencies), or of `$CUTLASS_PATH`. The wheel's package is looked for
    on sys.path by hand, not by importlib's find_spec: builds run in threads (a test's 23 conv libraries at
    once), and find_spec from several threads at once once found no package in some of them, so every one
    of those builds failed for "no CUTLASS headers" (H200, 2026-11-29)."""
    import os
    import sys

    user = os.environ.get("CUTLASS_PATH")
    candidates = [os.path.join(user, "include")] if user else []
    for entry in sys.path:
        root = os.path.join(entry or os.getcwd(), "cutlass_library")
        if os.path.isfile(os.path.join(root, "__init__.py")):
            candidates += [os.path.join(root, "source", "include"),
                           os.path.join(root, "..", "cutlass", "include")]
            break
    for path in candidates:
        if os.path.isfile(os.path.join(path, "cutlass", "cutlass.h")):
            return path
    raise RuntimeError("this model's GEMM or convolution kernels need the CUTLASS headers: pip install "
                       "--no-deps nvidia-cutlass (or set CUTLASS_PATH to a CUTLASS checkout)")


def _kw_cutlass_paths(include):
    """The CUTLASS include folders: `include` and, beside it, tools/util/include (`cutlass/util/`, which the
    sm90 convolution collectives include)."""
    import os

    util = os.path.normpath(os.path.join(include, "..", "tools", "util", "include"))
    return [include] + ([util] if os.path.isdir(util) else [])


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
# ... and the recipe's own (`_kw_compile`)
RECIPE_NVCC_FLAGS = ("-O3", "-DNDEBUG")
DEFAULT_CHECK_ARCH = "90a"


def extension_name(sources: ExtensionSources) -> str:
    """The kernel library's name: a hash of what builds it (its CUDA sources and the recipe)."""
    digest = hashlib.sha256()
    for text in (*sources.cuda_sources, *(text for _, text in sources.launchers), BUILD_SOURCE):
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


def recipe() -> dict:
    """The build recipe's functions, as an emitted file defines them."""
    import torch

    namespace: dict = {"torch": torch}
    exec(BUILD_SOURCE, namespace)  # noqa: S102 (our own recipe, shared with emitted files)
    return namespace


def build_extension(sources: ExtensionSources) -> Built:
    """Build the kernels on this machine's GPU, exactly as the emitted file would; `Built.module` has one
    callable per kernel name."""
    namespace = recipe()
    name = extension_name(sources)
    started = time.time()
    try:
        _prebuild_launchers(namespace, sources.launchers)
        kernels, seconds = namespace["_kw_build"](name, sources.cuda_sources, sources.specs, RUNTIME_SOURCE,
                                                  str(cache_dir()), list(sources.launchers))
    except Exception as exc:
        raise BuildError(f"building {name} failed: {_first_errors(str(exc))}") from exc
    launchers = [launcher for launcher, _ in sources.launchers]
    return Built(kernels, name, seconds, _build_steps(cache_dir(), name, started, seconds, launchers))


def _prebuild_launchers(namespace: dict, launchers: Sequence[tuple[str, str]]) -> None:
    """Several launchers missing from the cache built side by side, each by the recipe's own function (one
    nvcc process of 10-60 s on CUTLASS templates: a causal self-attention's two took 41 s and ~16 s one
    after the other on the H100 host), so that `_kw_build` then finds them all. Here, not in the recipe:
    emitted files may not start threads (KernelBench's static check)."""
    if len(launchers) < 2:
        return
    from concurrent.futures import ThreadPoolExecutor

    root, arch = str(cache_dir()), namespace["_kw_arch"]()
    with ThreadPoolExecutor(len(launchers)) as pool:
        list(pool.map(lambda item: namespace["_kw_launcher"](root, arch, *item), launchers))


def prebuild_runtime() -> None:
    """Build the runtime extension into the cache if it is not there, without importing it as a Python
    module: a caller that builds kernels meanwhile (the runtime is 12-16 s of g++, a kernel library 1-10 s
    of nvcc) waits on the runtime's build lock, then imports the published library once. torch does load
    the built file (`torch.ops.load_library`: a dlopen, no module init); the publishing rename keeps the
    file, so the later import maps the same library and initializes the pybind11 module once."""
    namespace = recipe()
    name, tag = namespace["_kw_runtime_name"](RUNTIME_SOURCE)
    compile_runtime = namespace["_kw_compile_runtime"]

    def compile_linked(staging: str) -> str:
        return compile_runtime(name, RUNTIME_SOURCE, staging, python_module=False)

    namespace["_kw_cached"](str(cache_dir()), name, tag, namespace["_kw_built_path"], compile_linked)


def runtime_library() -> Path:
    """Where this machine's runtime extension is (or will be, once something builds it)."""
    name, tag = recipe()["_kw_runtime_name"](RUNTIME_SOURCE)
    return cache_dir() / "builds" / f"{name}-{tag}" / f"{name}.so"


def build_sharded(name: str, texts: Sequence[str], kernels: Sequence[KernelSource],
                  include_dirs: Sequence[str] = (), cuda_flags: Sequence[str] = ()) -> object:
    """Several `.cu` texts compiled in parallel (ninja, all cores) into one kernel library, then bound by
    the runtime: one callable per kernel name. For the GPU tests and benchmarks that build hundreds of
    variants; emitted files build theirs with the recipe (`_kw_units`)."""
    import ctypes

    from torch.utils.cpp_extension import load

    folder = cache_dir() / "sharded" / name
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, text in enumerate(texts):
        path = folder / f"kernels_{index}.cu"
        if not path.is_file() or path.read_text() != text:     # unchanged files keep ninja's timestamps
            path.write_text(text)
        paths.append(str(path))
    library = load(name, paths, build_directory=str(folder), extra_include_paths=list(include_dirs),
                   extra_cuda_cflags=["-O3", *cuda_flags], is_python_module=False)
    namespace = recipe()
    runtime = namespace["_kw_runtime"](RUNTIME_SOURCE, str(cache_dir()))
    return namespace["_KwKernels"](runtime, ctypes.CDLL(library), {k.name: k.spec.literal() for k in kernels})


def _build_steps(root: Path, name: str, started: float, seconds: float,
                 launchers: Sequence[str] = ()) -> tuple[tuple[str, float], ...]:
    """What a build spent its time on, from ninja's logs in the staging folders of the kernel library, of
    its launchers' libraries and of the runtime written since `started` (a library loaded from the cache was
    not built)."""
    steps = []
    # (each launcher's steps named by it: "launcher kw_gemm_.. kernels_0.cuda.o", so that two do not collide)
    sources = ((f"{name}-*", ""), *((f"{launcher}_*", f"launcher {launcher} ") for launcher in launchers),
               ("kw_runtime_*", "runtime "))
    for pattern, prefix in sources:
        for log in sorted((root / "builds").glob(f"{pattern}/staging/.ninja_log")):
            if log.stat().st_mtime < started:
                continue
            for line in log.read_text().splitlines():
                fields = line.split("\t")
                if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
                    steps.append((prefix + fields[3], round((int(fields[1]) - int(fields[0])) / 1000, 3)))
    return tuple(steps) or (("cached", round(seconds, 3)),)


@dataclass(frozen=True)
class CompileCheck:
    ok: bool
    seconds: float
    log: str


def nvcc_check(cuda_text: str, arch: str = DEFAULT_CHECK_ARCH, ptxas_level: int = 3) -> CompileCheck:
    """Compile the CUDA translation unit only (no GPU needed): catches every error in generated kernels
    in about a second. `ptxas_level=0` skips the assembler's
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
        cutlass = cutlass_include_dir()
        includes = [f"-I{path}" for path in (recipe()["_kw_cutlass_paths"](str(cutlass)) if cutlass else [])]
        command = [nvcc, *RECIPE_NVCC_FLAGS, f"-gencode=arch=compute_{arch},code=sm_{arch}",
                   *TORCH_NVCC_FLAGS, *includes, "-Xptxas", f"-O{ptxas_level}",
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
