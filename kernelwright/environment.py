"""What this machine offers kernelwright: torch, the GPU, nvcc, CUTLASS headers, the cache directory.

Used by `kernelwright doctor` and recorded in every bench report and verdict.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import kernelwright

# The one install line for the CUTLASS headers (README, doctor): headers only, without the wheel's Python
# dependencies (cuda-python, scipy, ...), which kernelwright never imports.
CUTLASS_INSTALL = "pip install --no-deps nvidia-cutlass"


def cache_dir() -> Path:
    """Root of kernelwright's caches (builds, nvcc checks, optimize results, bench memory peaks):
    `$KERNELWRIGHT_CACHE` or ~/.cache/kernelwright."""
    root = os.environ.get("KERNELWRIGHT_CACHE") or Path.home() / ".cache" / "kernelwright"
    return Path(root)


@lru_cache(maxsize=1)
def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


@lru_cache(maxsize=1)
def nvcc_version() -> str | None:
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1] if out.strip() else None


def hopper_gpu() -> bool:
    """Whether this machine's GPU runs our sm_90a kernels (wgmma, TMA). Without a GPU nothing is claimed:
    such a kernel is kept only where it was measured, and an unverified file must build anywhere."""
    import torch  # not at import time: the CLI's start-up stays torch-free

    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def cutlass_include_dir() -> Path | None:
    """CUTLASS C++ headers shipped by the `nvidia-cutlass` wheel (never vendored), or `$CUTLASS_PATH`."""
    candidates = []
    if os.environ.get("CUTLASS_PATH"):
        candidates.append(Path(os.environ["CUTLASS_PATH"]) / "include")
    # find_spec locates the package without running its __init__, which imports optional heavy
    # dependencies (cuda-python, scipy) that a headers-only install (pip --no-deps) lacks.
    spec = importlib.util.find_spec("cutlass_library")
    if spec is not None and spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0])
        candidates += [root / "source" / "include", root.parent / "cutlass" / "include"]
    for path in candidates:
        if (path / "cutlass" / "cutlass.h").is_file():
            return path
    return None


def gpu_info() -> dict | None:
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
    }


def driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version,clocks.sm,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0] if out else None


def collect_environment() -> dict:
    """A JSON-able snapshot of the environment, for doctor, verdicts and bench reports."""
    import torch

    include = cutlass_include_dir()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernelwright": kernelwright.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpu": gpu_info(),
        "driver": driver_version(),
        "nvcc": nvcc_path(),
        "nvcc_version": nvcc_version(),
        "cutlass_include": str(include) if include else None,
        "cache_dir": str(cache_dir()),
    }
