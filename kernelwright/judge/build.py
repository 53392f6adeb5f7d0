"""Building a candidate's extensions: build-directory naming, trimming compiler output to the first errors,
and the compile-only mode that compiles load_inline sources against torch's headers without a GPU.

Compile-only works by replacing, in the candidate's process only, the two steps of torch's JIT build that
need a GPU build of torch: linking (the ninja run is limited to the object files) and importing the built
module (a stub whose functions say they were not built). Everything else — source generation, flags, the
ninja file, nvcc and the host compiler — is torch's own, so a `builds` verdict means the same sources
compile in a real build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import signal
import subprocess
import time
import types
from pathlib import Path

from kernelwright.environment import cache_dir
from kernelwright.judge.progress import report_step

# nvcc: `file.cu(37): error: ...`; gcc/clang: `file.cpp:6:47: error: ...`; ld: `undefined reference`.
_ERROR_LINE = re.compile(
    r"(\(\d+\)|:\d+(:\d+)?): (fatal )?error\b|\berror: |undefined reference to|"
    r"^(ninja: )?error:",
    re.IGNORECASE,
)
_NOISE = re.compile(r"^\[\d+/\d+\]|^FAILED:|^ninja: |^Error building extension|^subprocess|^\s*$")


def build_root(options_build_dir: str | None, source: str) -> Path:
    """One build directory per candidate source (so unrelated candidates that reuse an extension name such
    as "gelu" never rebuild each other's objects), under the judge's build cache."""
    root = Path(options_build_dir) if options_build_dir else cache_dir() / "judge-builds"
    return root / hashlib.sha256(source.encode()).hexdigest()[:16]


def trim_build_log(log: str, max_errors: int = 3, context: int = 3) -> str:
    """The first `max_errors` compiler errors with file/line and a few lines of context (the offending
    source line and caret), build-directory prefixes removed; the log's tail if no error line is found."""
    log = re.sub(r"^Error building extension '[^']*':\s*", "", log.strip())
    lines = [_shorten_paths(line) for line in log.splitlines()]
    picked, errors, i = [], 0, 0
    while i < len(lines) and errors < max_errors:
        if _ERROR_LINE.search(lines[i]) and not lines[i].startswith("FAILED:"):
            picked.append(lines[i].strip())
            errors += 1
            for extra in lines[i + 1 : i + 1 + context]:
                if _ERROR_LINE.search(extra) or _NOISE.search(extra):
                    break
                picked.append(extra.rstrip())
            i += 1
            continue
        i += 1
    if not picked:
        picked = [line for line in lines if line.strip()][-15:]
    return "\n".join(picked)


def _shorten_paths(line: str) -> str:
    # /root/.cache/kernelwright/judge-builds/<hash>/<ext>/cuda.cu(37) -> cuda.cu(37); the long build path
    # says nothing to the reader and makes every line wrap.
    return re.sub(r"(?:/[^\s:/()]+)+/((?:main\.cpp|cuda\.cu|[\w.-]+\.(?:cu|cpp|cuh|h)))", r"\1", line)


@contextlib.contextmanager
def exclusive_build_dir(path: str | None):
    """Hold the candidate's build directory alone while its extensions build. torch's own build lock is a
    file whose mere existence means "held": a build killed mid-way (the judge's timeout) leaves it behind
    and every later build of that candidate waits on it forever. Under our flock (dropped by the kernel when
    its holder dies) any such file is stale, and removed."""
    if not path:
        yield
        return
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".kernelwright-build.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for stale in root.glob("*/lock"):
            stale.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------- compile-only


class NotBuiltModule(types.ModuleType):
    """Stands in for an extension in compile-only mode: construction works, calls say what happened."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def not_built(*args, **kwargs):
            raise RuntimeError(
                f"{self.__name__}.{name}: compile-only mode, the extension was compiled but not linked"
            )

        return not_built


def find_cuda_home() -> str | None:
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env) and Path(os.environ[env], "bin", "nvcc").exists():
            return os.environ[env]
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    from kernelwright.environment import nvcc_path

    nvcc = nvcc_path()
    return str(Path(nvcc).resolve().parent.parent) if nvcc else None


def install_compile_only_hooks() -> None:
    """Make torch's JIT extension build compile object files only (see the module docstring)."""
    import torch
    import torch.utils.cpp_extension as cpp_extension

    if cpp_extension.CUDA_HOME is None:
        # A CPU-only torch does not look for CUDA at all; nvcc is enough to compile.
        cpp_extension.CUDA_HOME = find_cuda_home()
    if not torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        # No GPU to ask for its architecture: compile for the H100 (sm_90), the GPU we target.
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"

    def compile_objects(build_directory: str, verbose: bool, error_prefix: str) -> None:
        failure = compile_object_files(Path(build_directory))
        if failure:
            raise RuntimeError(f"{error_prefix}: {failure}")

    cpp_extension._run_ninja_build = compile_objects
    os.environ["KERNELWRIGHT_COMPILE_ONLY"] = "1"  # our emitted files build their kernels without a GPU
    cpp_extension._import_module_from_library = lambda name, path, is_python_module: NotBuiltModule(name)


def compile_object_files(build_directory: Path) -> str | None:
    """Compile the out-of-date object files of a torch-generated build.ninja in parallel, with the exact
    commands ninja would run. The first failure stops the others (their errors would only come later and
    the build has failed anyway) and its output is returned; None when all compiled."""
    running = []
    for target in object_targets(build_directory / "build.ninja"):
        if "no work to do" in _ninja(build_directory, "-n", target):
            continue
        command = _ninja(build_directory, "-t", "commands", "-s", target).strip()
        log = build_directory / f"{target}.log"  # a file, not a pipe: compilers can print megabytes
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, shell=True, cwd=build_directory, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        running.append((proc, log))
    failure = None
    _report_compiling(build_directory, running)
    while running and failure is None:
        for proc, log in list(running):
            if proc.poll() is None:
                continue
            running.remove((proc, log))
            _report_compiling(build_directory, running)
            if proc.returncode:
                failure = log.read_text(errors="replace")
                break
        time.sleep(0.05)
    for proc, _ in running:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return failure


def _report_compiling(build_directory: Path, running: list) -> None:
    """`extension NAME: nvcc cuda.cu, c++ main.cpp` for the compilers still running (torch names the
    objects `X.cuda.o` for `X.cu` and `X.o` for `X.cpp`)."""
    steps = []
    for _, log in running:
        target = log.name.removesuffix(".o.log")
        cuda = target.endswith(".cuda")
        steps.append(f"nvcc {target.removesuffix('.cuda')}.cu" if cuda else f"c++ {target}.cpp")
    if steps:
        report_step(f"extension {build_directory.name}: {', '.join(steps)}")


def _ninja(build_directory: Path, *args: str) -> str:
    return subprocess.run(["ninja", *args], cwd=build_directory, capture_output=True, text=True).stdout


def object_targets(ninja_file: Path) -> list[str]:
    """The object files (`build X.o: ...`) of a torch-generated build.ninja: everything but the link."""
    targets = []
    for line in ninja_file.read_text().splitlines():
        match = re.match(r"build ([^:]+\.o):", line)
        if match:
            targets.append(match.group(1))
    return targets
