"""The result cache of `kernelwright optimize`: an emitted file and what the run learnt about it, kept under
`$KERNELWRIGHT_CACHE/results/`, so that optimizing the same problem again on the same machine takes a second
instead of a capture, builds and a judge run.

The key holds everything the result depends on: the problem's source and its size overrides, the options,
kernelwright's own code (every file of the package but the bundled problems), torch's version and the device
(the GPU's name, or "cpu" with whether nvcc was found). Entries are written whole (a temporary file renamed
into place), so concurrent runs never read half of one. Only results a run reached by itself are stored:
an environment failure raises before anything is cached.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CODE_SUFFIXES = (".py", ".in", ".cuh", ".h", ".cu", ".json")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of kernelwright's own source: a changed rule, template or judge is another result."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "problems" or "__pycache__" in relative.parts:
            continue
        if path.is_file() and path.name.endswith(CODE_SUFFIXES):
            digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_key(source: str, constants: dict, options: dict, torch_version: str, device: str) -> str:
    material = json.dumps({"source": source, "constants": constants, "options": options,
                           "torch": torch_version, "device": device, "code": code_fingerprint()},
                          sort_keys=True, default=str)
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def gpu_identity(name: str, capability: str) -> str:
    return f"cuda:{name}:sm{capability.replace('.', '')}"


def cpu_identity() -> str:
    from kernelwright.environment import nvcc_path

    return f"cpu:nvcc={nvcc_path() is not None}"


def torch_version_without_import() -> str | None:
    """`torch.__version__` as torch/version.py spells it, local part included ("2.11.0+cu130"), else the
    package metadata's version; None without torch. The metadata alone may lack the local part (an H100
    machine's torch said "2.11.0" there and "2.11.0+cu130" in torch.__version__: every warm run missed)."""
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(folder) / "version.py").read_text()
        except OSError:
            continue
        found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.MULTILINE)
        if found:
            return found.group(1)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def identity_without_torch() -> tuple[str, str] | None:
    """(torch's version, the device) as the compiler's key names them, read without importing torch (the
    package metadata, nvidia-smi), or None when unsure: a key that differs from the compiler's only misses
    the cache, it never finds another run's result."""
    version = torch_version_without_import()
    if version is None:
        return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return version, cpu_identity()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = visible.split(",")[0].strip() if visible else "0"
    if visible is not None and first in ("", "-1"):
        return None
    try:
        out = subprocess.run([smi, "-i", first, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = [f.strip() for f in out[0].split(",")] if out else []
    return (version, gpu_identity(*fields)) if len(fields) == 2 else None


def results_dir() -> Path:
    """`$KERNELWRIGHT_RESULT_CACHE`, else `$KERNELWRIGHT_CACHE/results` (tests give each test its own)."""
    from kernelwright.environment import cache_dir

    return Path(os.environ.get("KERNELWRIGHT_RESULT_CACHE") or cache_dir() / "results")


def load(key: str) -> dict | None:
    """{"source": the emitted file, "result": what the run recorded} or None."""
    path = results_dir() / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def store(key: str, entry: dict) -> None:
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{key}-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(entry, out, default=str)
    os.replace(temporary, folder / f"{key}.json")
