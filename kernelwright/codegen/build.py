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
- the binding's prelude (torch's headers and our helpers, the same in every extension) is precompiled once
  per (prelude, torch, compiler, flags) into `$KERNELWRIGHT_CACHE/pch/<key>/kw_prelude.h.gch`, with the
  flags of main.cpp read from a build.ninja that torch's own writer makes (nothing is built), made beside
  the first build that needs it and published like a library; later builds compile main.cpp from it
  (parsing those headers was much of the host compile, issue 19). Anything wrong with it costs speed,
  never a build: g++ parses a header it rejects, a header that fails to build is recorded and skipped for
  an hour, KERNELWRIGHT_NO_PCH=1 turns it off;
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
                module = _kw_compile(name, cpp_sources, cuda_sources, folder, arch, include, root)
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


def _kw_compile(name, cpp_sources, cuda_sources, folder, arch, include, root):
    """Build in `folder`/staging (used only under the extension's lock), then publish the library. The
    binding's prelude comes precompiled where it can (_KwPrelude): the sources the extension is named by
    stay as they are, only the main.cpp handed to the compiler changes."""
    import os
    import shutil

    from torch.utils.cpp_extension import load_inline

    staging = os.path.join(folder, "staging")
    shutil.rmtree(staging, ignore_errors=True)  # a crashed build's objects, torch's own lock file among them
    os.makedirs(staging)
    # -Winvalid-pch: when g++ rejects the precompiled header (it then parses kw_prelude.h), the verbose
    # build log says why.
    cflags, includes = ["-O3", "-Winvalid-pch"], [include] if include else []
    with _KwPrelude(cpp_sources[0], cflags, bool(cuda_sources), root, staging) as pch:
        if pch is not None:
            cpp_sources, includes = ['#include "kw_prelude.h"\n', *cpp_sources[1:]], includes + [pch]
        module = load_inline(
            name=name, cpp_sources=cpp_sources, cuda_sources=cuda_sources, build_directory=staging,
            extra_cflags=cflags, extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
            extra_include_paths=includes,
            no_implicit_headers=True, verbose=os.environ.get("KERNELWRIGHT_VERBOSE_BUILD") == "1",
        )
    built = os.path.join(staging, f"{name}.so")
    if os.path.isfile(built):  # eval --compile-only links nothing
        os.replace(built, os.path.join(folder, f"{name}.so"))
    return module


class _KwPrelude:
    """`with _KwPrelude(prelude, cflags, with_cuda, root, staging) as folder:` the folder holding the
    binding's prelude (its first C++ source, when it includes torch's headers) as kw_prelude.h beside its
    precompiled kw_prelude.h.gch, or None: the build then parses the prelude as it always did.

    Parsing the prelude's headers is most of the binding's host compile, and the same in every extension:
    one precompiled header per (prelude, torch, compiler, flags), in `root`/pch/<key>. The first build that
    finds none, with no other process making it, makes it beside its own build (one more compiler process;
    no other build waits for it), checks that g++ uses it and publishes it by an atomic rename when the
    with-block ends, all under an flock that the kernel drops if the process dies; the seconds it took go
    to the build's kw_steps.tsv. A failure is recorded (`<key>.failed`, not tried again for an hour) and
    costs the build nothing. KERNELWRIGHT_NO_PCH=1 turns it off."""

    def __init__(self, prelude, cflags, with_cuda, root, staging):
        self.prelude, self.cflags, self.with_cuda = prelude, cflags, with_cuda
        self.root, self.staging = root, staging
        self.lock = self.process = None

    def __enter__(self):
        import os

        if os.environ.get("KERNELWRIGHT_NO_PCH") == "1" or "#include <torch/" not in self.prelude:
            return None
        with _KwKept() as kept:  # no header to be had (a read-only cache, no CUDA toolkit...)
            return self._begin()
        self._fail(kept.error)
        return None

    def _begin(self):
        import os
        import time

        self.folder = os.path.join(self.root, "pch", _kw_pch_key(self.prelude, self.cflags, self.with_cuda))
        if self._published() or self._failed_recently():
            return self.folder if self._published() else None
        os.makedirs(os.path.dirname(self.folder), exist_ok=True)
        self.lock = _KwFileLock(self.folder + ".lock", wait=False).__enter__()
        if not self.lock.held or self._published() or self._failed_recently():
            return self.folder if self._published() else None  # another process is making it, or made it
        self.start = time.perf_counter()
        self._start()
        return None

    def __exit__(self, exc_type, *exc_info):
        import os
        import time

        if self.process is not None and exc_type is None:
            with _KwKept() as kept:  # the build succeeded, with or without the header
                self._finish()
                with open(os.path.join(self.staging, "kw_steps.tsv"), "w") as steps:
                    steps.write(f"kw_prelude.h.gch\t{time.perf_counter() - self.start:.3f}\n")
            self._fail(kept.error)
        elif self.process is not None:  # the build failed: its error is what matters, not the header
            self._discard()
        self._release()
        return False

    def _start(self):
        """Write kw_prelude.h into `folder`.staging and start compiling it with the flags torch's build gives
        main.cpp (read from torch's build.ninja, _kw_host_command)."""
        import os
        import shutil
        import subprocess

        staging = self.folder + ".staging"
        shutil.rmtree(staging, ignore_errors=True)  # a crashed builder's leftovers
        os.makedirs(staging)
        self.header = os.path.join(staging, "kw_prelude.h")
        with open(self.header, "w") as handle:
            handle.write(self.prelude)
        cxx, flags, post = _kw_host_command(os.path.join(staging, "probe"), self.cflags, self.with_cuda,
                                            self.folder)
        self.command = [*cxx, *flags, "-x", "c++-header", "-c", self.header, "-o", self.header + ".gch",
                        *post]
        self.check = [*cxx, *flags, "-DTORCH_EXTENSION_NAME=kw_check", "-H", "-fsyntax-only", *post]
        with open(self.header + ".log", "w") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)

    def _finish(self):
        """Wait for the header, check that g++ uses it (`-H` marks a used one "!"; a flag that differs from
        the header's makes g++ ignore it) and publish the folder. Raises when any step fails."""
        import os
        import shutil
        import subprocess

        staging = os.path.dirname(self.header)
        if self.process.wait() != 0:
            with open(self.header + ".log") as log:
                raise RuntimeError(f"{' '.join(self.command)}\n{log.read()[-4000:]}")
        check = os.path.join(staging, "kw_check.cpp")
        with open(check, "w") as handle:
            handle.write('#include "kw_prelude.h"\n')
        done = subprocess.run([*self.check, check], capture_output=True, text=True)
        if done.returncode != 0 or not any(line.startswith("! ") and line.endswith("kw_prelude.h.gch")
                                           for line in done.stderr.splitlines()):
            raise RuntimeError(f"g++ does not use the precompiled header:\n{done.stderr[-4000:]}")
        shutil.rmtree(os.path.join(staging, "probe"))
        os.remove(check)
        with open(os.path.join(staging, "kw_prelude.cmd"), "w") as handle:
            handle.write(" ".join(self.command) + "\n")
        shutil.rmtree(self.folder, ignore_errors=True)  # one without its .gch (seen under the lock): unused
        os.replace(staging, self.folder)

    def _published(self):
        import os

        return os.path.isfile(os.path.join(self.folder, "kw_prelude.h.gch"))

    def _failed_recently(self):
        import os
        import time

        failed = self.folder + ".failed"
        return os.path.isfile(failed) and time.time() - os.path.getmtime(failed) < 3600

    def _fail(self, error):
        """Record a failure of ours (none when `error` is None or the header is another process's)."""
        import contextlib

        if error is None or self.lock is None or not self.lock.held:
            return
        self._discard()
        with contextlib.suppress(OSError), open(self.folder + ".failed", "w") as note:
            note.write(f"{type(error).__name__}: {error}\n")

    def _discard(self):
        import shutil

        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder + ".staging", ignore_errors=True)  # a half-written header can be large

    def _release(self):
        if self.lock is not None:
            self.lock.__exit__(None, None, None)
            self.lock = None


def _kw_pch_key(prelude, cflags, with_cuda):
    """What a precompiled prelude depends on: its text, torch (version and headers), the compiler binary
    (g++ rejects a header another build of it wrote), our flags, and the include folders as real paths (a
    CUDA toolkit switched under /usr/local/cuda is another)."""
    import hashlib
    import os
    import shutil
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    compiler = os.environ.get("CXX", "c++")
    binary = shutil.which(compiler)
    stamp = os.stat(binary) if binary else None
    folders = [*include_paths("cuda" if with_cuda else "cpu"), sysconfig.get_path("include")]
    parts = [prelude, torch.__version__, compiler, os.path.realpath(binary) if binary else "",
             f"{stamp.st_size}:{stamp.st_mtime_ns}" if stamp else "", repr(cflags), str(with_cuda),
             *(os.path.realpath(path) for path in folders)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _kw_host_command(probe, cflags, with_cuda, folder):
    """(compiler, flags, post flags) of the host compile torch's ninja build runs on main.cpp for these
    extra flags, read from the build.ninja that torch's own writer puts in `probe` (nothing is built), less
    -DTORCH_EXTENSION_NAME (it names each extension; the prelude does not use it). Read, not rebuilt: the
    flags change between torch versions (-std, include folders, compiler wrappers). The writer is private
    and its arguments have grown over the years, so it gets those of ours it names; one that needs more
    raises, and the build goes on without a precompiled header."""
    import inspect
    import os
    import shlex

    from torch.utils import cpp_extension

    writer = cpp_extension._write_ninja_file_to_build_library
    # An arch flag keeps the writer from asking for the GPU's; nvcc's flags do not reach main.cpp.
    arguments = dict(path=os.path.join(probe, "build.ninja"), name="kw_probe",
                     sources=[os.path.join(probe, "main.cpp")], extra_cflags=cflags,
                     extra_cuda_cflags=["-arch=sm_90"], extra_sycl_cflags=[], extra_ldflags=[],
                     extra_include_paths=[folder], with_cuda=with_cuda, with_sycl=False,
                     is_python_module=True, is_standalone=False)
    named = inspect.signature(writer).parameters
    os.makedirs(probe)
    writer(**{name: value for name, value in arguments.items() if name in named})
    variables = {}
    with open(arguments["path"]) as ninja:
        for line in ninja:
            name, equals, value = line.partition(" = ")
            if equals and not line[0].isspace():
                variables[name] = value.strip()
    flags = [flag for flag in shlex.split(variables["cflags"])
             if not flag.startswith("-DTORCH_EXTENSION_NAME=")]
    return shlex.split(variables["cxx"]), flags, shlex.split(variables.get("post_cflags", ""))


class _KwKept:
    """A with-block whose Exception is kept in `error` instead of raised: for the precompiled prelude, which
    a build can do without. Not a try statement, which KernelBench's static checker rejects in the emitted
    files that this recipe is pasted into."""

    error = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is not None and issubclass(exc_type, Exception):
            self.error = exc
        return self.error is not None


class _KwFileLock:
    """An exclusive flock on `path` for a with-block (none where the OS has no flock). With wait=False it
    is taken only if free at once; `held` says whether it was."""

    def __init__(self, path, wait=True):
        self.path, self.wait, self.fd = path, wait, None

    @property
    def held(self):
        return self.fd is not None

    def __enter__(self):
        import contextlib
        import importlib.util
        import os

        if importlib.util.find_spec("fcntl") is not None:
            import fcntl

            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            with contextlib.suppress(BlockingIOError):  # held by another, and wait=False
                fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
                return self
            os.close(self.fd)
            self.fd = None
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
    loaded from there), after the steps the recipe ran itself (kw_steps.tsv: the precompiled prelude, when
    this build made it); a library loaded from the cache was not built."""
    library = Path(getattr(module, "__file__", "") or "")
    log = library.parent / ".ninja_log"
    if library.parent.name != "staging" or not log.is_file():
        return (("cached", round(seconds, 3)),)
    own = library.parent / "kw_steps.tsv"
    steps = [(name, float(value)) for name, value in
             (line.split("\t") for line in (own.read_text().splitlines() if own.is_file() else []))]
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
