"""The worker side of `kernelwright bench --ray`: one bench task on a node of a Ray cluster.

The task travels by value (the problem's source and its candidates' files come with it, so the nodes need
no shared filesystem). It is written into a scratch folder and run by the local pool's own executor
(`SubprocessExecutor`: `python -m kernelwright.bench.tasks` pinned to the GPU Ray assigned, under the same
wall-clock limit), and its rows, logs and the file `kernelwright optimize` wrote travel back by value, every
scratch path replaced by the driver's. Builds use this node's own cache ($KERNELWRIGHT_CACHE on the node,
default ~/.cache/kernelwright), under the cache's usual locking.

This module imports Ray only inside the functions that run on a Ray worker.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernelwright.bench.devices import Worker, cpu_name, gpu_properties, lock_path
from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.pool import Execute, SubprocessExecutor
from kernelwright.bench.rows import finish
from kernelwright.bench.store import ResultsStore
from kernelwright.judge.options import JudgeOptions


@dataclass(frozen=True)
class RemoteTask:
    task: BenchTask              # as planned on the driver: its paths are the driver's
    options: JudgeOptions
    problem_source: str
    candidates: dict[str, str]   # system -> text of its candidate file (candidate folders with a file)

    @classmethod
    def pack(cls, task: BenchTask, options: JudgeOptions) -> RemoteTask:
        candidates = {run.system: Path(run.candidate).read_text(errors="replace") for run in task.runs
                      if run.kind == "candidates" and run.candidate is not None}
        return cls(task, options, Path(task.problem_path).read_text(), candidates)


@dataclass
class RemoteResult:
    rows: list[dict]
    optimized: dict[str, str] = field(default_factory=dict)  # system -> the file kernelwright optimize wrote
    logs: dict[str, str] = field(default_factory=dict)       # system -> its log (rows not `correct`)


def run_remote(remote: RemoteTask, execute: Execute | None = None) -> RemoteResult:
    """Run one task here (a Ray worker): `execute(task, worker)` defaults to the local pool's
    SubprocessExecutor. Rows are stamped with this node, its GPU and the device model, as the pool does."""
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="kernelwright-ray-")).resolve()
    try:
        local, paths = _materialize(remote, scratch / "task")
        store = ResultsStore(scratch / "results")
        worker = current_worker(remote.options.device)
        executor = execute or SubprocessExecutor(store, remote.options)
        try:
            rows = executor(local, worker)
        except KeyboardInterrupt:  # ray.cancel(): the task's process group goes with this worker
            if hasattr(executor, "stop"):
                executor.stop()
            raise
        node = socket.gethostname()
        for row in rows:
            finish(row, worker.device, worker.gpu, time.monotonic() - started)
            row["node"] = node
        result = RemoteResult(json.loads(_restore(json.dumps(rows), paths, in_json=True)))
        for run, local_run in zip(remote.task.runs, local.runs, strict=True):
            if run.kind == "kernelwright" and Path(local_run.candidate).is_file():
                result.optimized[run.system] = Path(local_run.candidate).read_text()
            log = store.log_path(run.system, local.problem_id)
            if log.is_file():
                result.logs[run.system] = _restore(log.read_text(errors="replace"), paths, in_json=False)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def current_worker(device: str) -> Worker:
    """The Worker this Ray task runs as: the GPU Ray assigned it (Ray has set CUDA_VISIBLE_DEVICES to it)
    and that GPU's lock file on this node, so that tasks sharing a GPU never time at once."""
    if device == "cpu":
        return Worker(None, cpu_name())
    import ray

    gpu = str(ray.get_gpu_ids()[0])
    properties = gpu_properties(gpu)
    return Worker(gpu, properties.get("name") or f"GPU {gpu}", lock_path(properties.get("uuid") or gpu))


def describe_node(gpus: int) -> dict:
    """This node as the driver records it in run.json: hostname, IP, CPU, and each GPU's nvidia-smi view
    with its memory (bytes; the fraction of a GPU a task's memory estimate asks for is taken from it)."""
    import ray

    node = {"node": socket.gethostname(), "ip": ray.util.get_node_ip_address(), "cpu": cpu_name(), "gpus": []}
    for index in map(str, range(gpus)):
        node["gpus"].append({"index": f"{node['node']}:{index}", **gpu_properties(index),
                             "memory_bytes": _gpu_memory_bytes(index)})
    return node


def _gpu_memory_bytes(gpu: str) -> int | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "-i", gpu, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return int(float(out.splitlines()[0])) * 2**20  # MiB
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def _materialize(remote: RemoteTask, root: Path) -> tuple[BenchTask, dict[str, str]]:
    """The task with its files written under `root` in the suite's layout (`<problem id>.py`, so the
    problem keeps its id), and the map from each scratch path back to the driver's path."""
    task = remote.task
    problem = root / "suite" / f"{task.problem_id}.py"
    problem.parent.mkdir(parents=True)
    problem.write_text(remote.problem_source)
    paths = {str(problem): task.problem_path}
    runs = []
    for run in task.runs:
        candidate = None
        if run.candidate is not None and run.kind in ("candidates", "kernelwright"):
            target = root / "systems" / run.system / f"{task.problem_id}{Path(run.candidate).suffix}"
            target.parent.mkdir(parents=True, exist_ok=True)
            if run.kind == "candidates":
                target.write_text(remote.candidates[run.system])
            candidate, paths[str(target)] = str(target), run.candidate
        runs.append(SystemRun(run.system, run.kind, candidate))
    return replace(task, problem_path=str(problem), runs=tuple(runs)), paths


def _restore(text: str, paths: dict[str, str], in_json: bool) -> str:
    """`text` with each scratch path put back to the driver's (inside JSON strings when `in_json`)."""
    quote = (lambda s: json.dumps(s)[1:-1]) if in_json else (lambda s: s)
    for local in sorted(paths, key=len, reverse=True):
        text = text.replace(quote(local), quote(paths[local]))
    return text
