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
import json
import os
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


def results_dir() -> Path:
    from kernelwright.environment import cache_dir

    return cache_dir() / "results"


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
