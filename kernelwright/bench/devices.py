"""The devices a bench runs on: `jobs` worker slots per GPU (or one for the CPU), and what each GPU is
(name, driver, clocks, memory) as `nvidia-smi` reports it, for the report header, each row and the
admission of tasks by memory (admission.py).

Slots on one GPU share its lock file (kernelwright/gpulock.py): their compiling overlaps, their timed
series never overlap any other GPU work."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

from kernelwright import gpulock
from kernelwright.errors import UsageError

# `--timing-cpus auto`: one CPU per GPU kept for timings where the host has at least this many per GPU.
CPUS_PER_RESERVED = 8
SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem",
              "power.limit", "persistence_mode", "memory.total", "uuid")


@dataclass(frozen=True)
class Worker:
    gpu: str | None   # the CUDA_VISIBLE_DEVICES value for this worker's tasks; None on the CPU
    device: str       # the device's model name, stamped on each row it produces
    lock: str | None = None  # the GPU's lock file ($KERNELWRIGHT_GPU_LOCK for this worker's tasks)
    memory_bytes: int | None = None  # the GPU's total memory; None: unknown (admission by count only)


def resolve_workers(device: str, gpus: str | None, jobs: int = 1) -> list[Worker]:
    """Workers for `--device`/`--gpus` (`0,1`, or `all`; the default is every visible GPU), `jobs` per GPU.
    Indices are relative to the caller's CUDA_VISIBLE_DEVICES, as in PyTorch."""
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")
    if device == "cpu":
        return [Worker(None, cpu_name())]
    if device != "cuda":
        raise UsageError(f"--device {device}: use cuda or cpu")
    visible = _visible_devices()
    if not visible:
        raise UsageError("no CUDA GPU is visible; run on a GPU machine or use --device cpu")
    if gpus in (None, "", "all"):
        chosen = visible
    else:
        chosen = []
        for item in (part.strip() for part in gpus.split(",") if part.strip()):
            if not item.isdigit() or int(item) >= len(visible):
                raise UsageError(f"--gpus {gpus}: {item!r} is not a visible GPU (0..{len(visible) - 1})")
            chosen.append(visible[int(item)])
        if len(set(chosen)) != len(chosen):
            raise UsageError(f"--gpus {gpus}: a GPU is listed twice")
    workers = []
    for gpu in chosen:
        properties = gpu_properties(gpu)
        name = properties.get("name") or f"GPU {gpu}"
        lock = lock_path(properties.get("uuid") or gpu)
        workers += [Worker(gpu, name, lock, _mebibytes(properties.get("memory.total")))] * jobs
    return workers


def _mebibytes(text: str | None) -> int | None:
    """Bytes of nvidia-smi's "81559 MiB"; None for "[N/A]" or nothing."""
    match = re.fullmatch(r"(\d+)\s*MiB", (text or "").strip())
    return int(match.group(1)) * 2**20 if match else None


def lock_path(gpu: str) -> str:
    """The lock file of one GPU (its UUID, or its index where nvidia-smi could not tell it), the same for
    every kernelwright process on this host: a process outside the bench finds it by the UUID."""
    return gpulock.gpu_lock_file(gpu)


def _visible_devices() -> list[str]:
    """Physical ids (or UUIDs) of the GPUs this process may use."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [item.strip() for item in env.split(",") if item.strip() and item.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def gpu_properties(gpu: str) -> dict[str, str]:
    """nvidia-smi's view of one GPU (clocks may read "[N/A]" on some systems); {} without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        out = subprocess.run([smi, "-i", gpu, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")] if out else []
    return dict(zip(SMI_FIELDS, values, strict=True)) if len(values) == len(SMI_FIELDS) else {}


def cpu_name() -> str:
    """A readable CPU model name (rows produced on the CPU say which one)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def timing_cpus(setting: str, gpus: int, tasks_at_once: int) -> str | None:
    """The tasks' `$KERNELWRIGHT_TIMING_CPUS` (gpulock.py) for `bench --timing-cpus SETTING`; None leaves
    the caller's environment as it is. `off`: none. A list (`15`, `14-15`): those, which must be CPUs this
    process may use, leaving others. `auto`: the environment's own setting where there is one, else, where
    tasks run side by side (`tasks_at_once` > 1) and the host has CPUS_PER_RESERVED CPUs per GPU, the last
    core per GPU (a CPU and its SMT siblings: a build on a sibling would share the timing's core). On an
    H200 host (16 CPUs, `--jobs 8`) the bench of the whole suite × three systems ran 111 problems in 21 min
    with its GPU timing 72% of the time, before quiet timings (bench/results/2026-11-28-h200-suite-reserved-
    cpu); without, every build and import waited for every timing."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    # the CPUs kept already are this host's too (a bench started under the setting keeps off them itself)
    allowed = sorted(set(getaffinity(0)) | gpulock.reserved_cpus()) if getaffinity else []
    setting = setting.strip().lower()
    if setting == "off":
        return ""
    if setting == "auto":
        if gpulock.RESERVED_ENV in os.environ:
            return None
        if tasks_at_once < 2 or gpus < 1 or len(allowed) < CPUS_PER_RESERVED * gpus:
            return ""
        last = sorted(_cores(allowed), key=max)[-gpus:]   # the cores of the highest CPUs
        return ",".join(str(cpu) for cpu in sorted(set().union(*last)))
    cpus = gpulock.parse_cpus(setting)
    if not cpus or not cpus <= set(allowed) or len(cpus) >= len(allowed):
        raise UsageError(f"--timing-cpus {setting}: give auto, off, or CPUs of this host's {len(allowed)} "
                         "allowed ones (e.g. 15 or 14-15), leaving others for the work")
    return ",".join(str(cpu) for cpu in sorted(cpus))


def timing_cpu_of(gpus: list[str], reserved: str) -> dict[str, str]:
    """Each GPU's own timing CPU (`$KERNELWRIGHT_TIMING_CPU` for its tasks), so that two GPUs' timings
    never pick the same CPU at once: the reserved CPUs grouped by core, the k-th core's first CPU for the
    k-th GPU; {} where there are fewer cores than GPUs (the timings then pick among the reserved CPUs)."""
    cores = _cores(gpulock.parse_cpus(reserved))
    if not gpus or len(cores) < len(gpus):
        return {}
    return {gpu: str(min(core)) for gpu, core in zip(gpus, cores[:len(gpus)], strict=True)}


def _cores(cpus) -> list[set[int]]:
    """`cpus` grouped by core (`_core`, within `cpus`), in order of each core's first CPU."""
    cores: list[set[int]] = []
    for cpu in sorted(cpus):
        if not any(cpu in core for core in cores):
            cores.append((_core(cpu) & set(cpus)) | {cpu})
    return cores


def _core(cpu: int) -> set[int]:
    """`cpu` and its SMT siblings (sysfs), or just `cpu` where the topology cannot be read."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as siblings:
            return set(gpulock.parse_cpus(siblings.read().strip())) | {cpu}
    except OSError:
        return {cpu}
