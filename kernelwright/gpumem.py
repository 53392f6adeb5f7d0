"""Who holds this GPU's memory: this process's own use released on demand, and the use of *other*
processes (not this one, not its children such as the judge's workers) told apart from ours, so that an
out-of-memory verdict is blamed on the machine only when something else really held the memory.

`nvidia-smi --query-compute-apps` gives the per-process use; where it cannot see our processes (another
PID namespace, no nvidia-smi) the estimate is everything on the GPU that this process has not reserved.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
from pathlib import Path

import torch


def release() -> None:
    """Give this process's unused GPU memory back to the driver: objects kept only by reference cycles
    (an exec'd ModelNew and its CUDA graphs' pools) are collected, then the allocator's cached blocks
    freed. Before the judge runs a candidate beside its reference, the compiler held 43.6 GiB this way
    (a 4.5 GiB problem ran out of memory alone on an 80 GB H100)."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


# A CUDA context and the libraries' workspaces of a process, beyond what its allocator reserves.
CONTEXT_BYTES = 512 * 2**20


def others_bytes(children_reserved: int = 0) -> int:
    """Bytes of the current GPU's memory held by processes outside this one's tree. Where nvidia-smi cannot
    tell our processes (another PID namespace), everything this process has not reserved, less what the
    caller knows its child processes hold (`children_reserved`, e.g. the judge's reference worker's peak,
    plus a context)."""
    free, total = torch.cuda.mem_get_info()
    estimate = max(0, total - free - torch.cuda.memory_reserved() - children_reserved)
    used = _process_use(_device_uuid())
    if not used or os.getpid() not in used:
        return estimate
    return others(used, descendants(os.getpid()))


def others(used: dict[int, int], ours: set[int]) -> int:
    """The bytes in `used` ({pid: bytes}) of the pids not in `ours`."""
    return sum(b for pid, b in used.items() if pid not in ours)


def descendants(root: int, proc: Path = Path("/proc")) -> set[int]:
    """`root` and every process below it, from /proc/<pid>/stat (empty parents map off Linux)."""
    parent: dict[int, int] = {}
    for entry in proc.glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
            parent[int(entry.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parent.items() if p == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def _device_uuid() -> str | None:
    try:
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except (AttributeError, RuntimeError):
        return None
    return uuid.removeprefix("GPU-")


def _process_use(uuid: str | None) -> dict[int, int] | None:
    """{pid: bytes} of the compute processes on the GPU `uuid` per nvidia-smi; None when unknown."""
    smi = shutil.which("nvidia-smi")
    if smi is None or uuid is None:
        return None
    try:
        out = subprocess.run([smi, "--query-compute-apps=gpu_uuid,pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return parse_compute_apps(out.stdout, uuid)


def parse_compute_apps(text: str, uuid: str) -> dict[int, int]:
    """nvidia-smi's "GPU-<uuid>, <pid>, <MiB>" lines of the GPU `uuid`, as {pid: bytes}."""
    used: dict[int, int] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or parts[0].removeprefix("GPU-") != uuid:
            continue
        try:
            used[int(parts[1])] = used.get(int(parts[1]), 0) + int(parts[2]) * 2**20
        except ValueError:
            continue
    return used
