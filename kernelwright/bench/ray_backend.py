"""`kernelwright bench --ray [ADDRESS]` (and `generate --ray`): the bench's tasks on a Ray cluster instead
of the local pool, for suites larger than one machine (DESIGN.md §5: an existing engine, not a home-made
scheduler). Ray is an optional extra: `pip install 'kernelwright[ray]'`.

Each bench task (one problem, the systems still to run on it) becomes one Ray task that runs the local
pool's own code on a node (kernelwright/bench/ray_task.py). The driver keeps the results folder: it is the
only writer of results.jsonl, appending each task's rows as the task finishes, so a killed driver resumes
with --resume like a local bench.

- Resources: a task asks for one GPU, or the share of one its memory needs when that is known
  (`memory_of(task)`, bytes of GPU memory; with `--jobs N` and no estimate, 1/N GPU). Ray packs shares
  of a GPU onto one GPU; the tasks sharing it take turns to time through its lock file on the node.
  A task that ran out of memory on a shared GPU runs again on a whole one.
- Failures: a task whose worker process or node dies is retried by Ray (`max_retries`, once), on a node
  that is still alive; if it dies again its systems get `bench_error` rows (retried by --resume). A
  candidate's hang is ended on the node by the same wall-clock limits as in the local pool. The task's
  processes run in a session of their own, so a worker killed on a live node leaves them to end by the
  judge's limits, as a killed local bench does (Ray's raylet-subreaper option would end them, but it
  ignores SIGCHLD in the workers: every exit status they see reads 0).
- Heterogeneous clusters: each row records its node, GPU and device model, and the report compares
  timings only within one device model.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

from kernelwright.bench.plan import BenchTask
from kernelwright.bench.pool import Execute
from kernelwright.bench.ray_task import RemoteResult, RemoteTask, describe_node, run_remote
from kernelwright.bench.rows import failure_row, finish
from kernelwright.bench.store import ResultsStore
from kernelwright.errors import UsageError
from kernelwright.judge.options import JudgeOptions

MAX_RETRIES = 1          # a task whose worker or node died runs once more, then is reported
MEMORY_HEADROOM = 1.25   # a measured peak is a lower bound: allocator slack, fragmentation, a new input
IN_FLIGHT_PER_SLOT = 2   # tasks submitted per GPU (or CPU) slot: one running, one queued on its node
PROBE_TIMEOUT_S = 120.0


def task_memory_bytes(task: BenchTask) -> int | None:
    """The GPU memory a task needs (bytes), when the bench has measured it; None: unknown."""
    return getattr(task, "memory_bytes", None)


def resource_request(device: str, memory_bytes: int | None, gpu_memory_bytes: int | None,
                     jobs: int = 1) -> dict:
    """Ray options for one task: the share of a GPU its memory needs (measured against the cluster's
    smallest GPU, with headroom), else 1/jobs of one. Ray's fractional resources have a precision of 1e-4."""
    if device == "cpu":
        return {"num_cpus": 1, "num_gpus": 0}
    if memory_bytes is None or not gpu_memory_bytes:
        share = math.floor(1e4 / jobs) / 1e4   # rounded down: `jobs` of them fit on one GPU
    else:
        share = math.ceil(memory_bytes * MEMORY_HEADROOM / gpu_memory_bytes * 1e4) / 1e4
    return {"num_cpus": 1, "num_gpus": min(1.0, max(share, 1e-4))}


def import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'kernelwright[ray]' (on every node of the cluster, "
                         "with the same kernelwright and torch)") from None
    return ray


class RayCluster:
    """A connection to a Ray cluster (or a local one started for the run), and the bench's tasks on it."""

    def __init__(self, ray, device: str, jobs: int, owned: bool, address: str):
        self.ray, self.device, self.jobs, self.owned, self.address = ray, device, jobs, owned, address
        self.nodes = self._describe_nodes()
        if device != "cpu" and not any(node["gpus"] for node in self.nodes):
            self.close()
            raise UsageError("the Ray cluster has no GPUs: start its nodes on GPU machines (ray start "
                             "--num-gpus N), or bench on the CPU with --device cpu")
        self._remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(run_remote)

    @classmethod
    def connect(cls, address: str, device: str, jobs: int = 1) -> RayCluster:
        """`address`: "" (RAY_ADDRESS, else the cluster `ray start` left on this machine, else a new local
        one), "auto" (an existing one only), "local" (always a new local one), or HOST:PORT / ray://HOST:PORT.
        A Ray already initialized in this process (tests) is used as it is."""
        ray = import_ray()
        if address and Path(address).is_dir():
            raise UsageError(f"--ray {address}: that is a folder, not a Ray address; put the suite before "
                             "--ray, or write --ray=ADDRESS")
        if jobs < 1:
            raise UsageError(f"--jobs {jobs}: must be at least 1")
        if ray.is_initialized():
            return cls(ray, device, jobs, owned=False, address="(this process's)")
        options = {"include_dashboard": False, "log_to_driver": False}
        if address == "":
            try:
                ray.init(address="auto", **options)
                return cls(ray, device, jobs, owned=True, address="auto")
            except ConnectionError:  # no cluster to join: start one here
                address = "local"
        if address == "local":
            ray.init(address="local", **options)
            return cls(ray, device, jobs, owned=True, address="local")
        try:
            ray.init(address=address, **options)
        except ConnectionError as exc:
            raise UsageError(f"--ray {address}: cannot connect ({exc}); start the cluster with "
                             "`ray start --head` (or `ray up`), then pass its address (with Ray's token "
                             "authentication: RAY_AUTH_MODE=token and the cluster's token here)") from None
        return cls(ray, device, jobs, owned=True, address=address)

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -------------------------------------------------------------------------------------- description

    def _describe_nodes(self) -> list[dict]:
        """Each alive node (GPU nodes only, unless benching on the CPU), described by a probe pinned to it."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = self.ray.remote(describe_node)
        refs = []
        for node in self.ray.nodes():
            gpus = int(node["Resources"].get("GPU", 0)) if self.device != "cpu" else 0
            if node["Alive"] and (gpus or self.device == "cpu"):
                strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                refs.append(probe.options(num_cpus=0, scheduling_strategy=strategy).remote(gpus))
        return self.ray.get(refs, timeout=PROBE_TIMEOUT_S)

    @property
    def gpus(self) -> list[dict]:
        return [gpu for node in self.nodes for gpu in node["gpus"]]

    @property
    def device_name(self) -> str:
        """The device model of the first GPU (names the default results folder), or the CPU's."""
        if self.device == "cpu":
            return self.nodes[0]["cpu"] if self.nodes else "cpu"
        return next((gpu["name"] for gpu in self.gpus if gpu.get("name")), "GPU")

    def description(self) -> str:
        models = Counter(gpu.get("name") or "GPU" for gpu in self.gpus)
        kinds = ", ".join(f"{count}× {name}" for name, count in models.items())
        what = kinds if self.device != "cpu" else f"{self._slots()} CPUs"
        share = f", {self.jobs} tasks at once per GPU" if self.jobs > 1 and self.device != "cpu" else ""
        nodes = f"{len(self.nodes)} node" + ("s" if len(self.nodes) != 1 else "")
        return f"Ray cluster {self.address}: {nodes}, {what}{share}"

    def run_info(self) -> dict:
        """What run.json records of the cluster (the report's environment header reads `gpus`)."""
        return {"device_name": self.device_name, "gpus": self.gpus,
                "ray": {"address": self.address, "version": self.ray.__version__, "nodes": self.nodes}}

    def _slots(self) -> int:
        resources = self.ray.cluster_resources()
        if self.device == "cpu":
            return max(1, int(resources.get("CPU", 1)))
        return max(1, int(resources.get("GPU", 1)) * self.jobs)

    # ------------------------------------------------------------------------------------------- running

    def run(self, tasks: list[BenchTask], options: JudgeOptions, store: ResultsStore | None,
            on_rows: Callable[[BenchTask, list[dict]], None], deadline: float | None = None,
            execute: Execute | None = None,
            memory_of: Callable[[BenchTask], int | None] = task_memory_bytes) -> list[BenchTask]:
        """Run `tasks` on the cluster, calling `on_rows` in this thread as each finishes (after writing its
        logs and kernelwright's files into `store`). No task is submitted after `deadline`; those are
        returned. `execute` replaces the node's executor (tests); it travels by value."""
        smallest = min((g["memory_bytes"] for g in self.gpus if g.get("memory_bytes")), default=None)
        pending = deque((task, resource_request(self.device, memory_of(task), smallest, self.jobs))
                        for task in tasks)
        in_flight: dict = {}
        try:
            while pending or in_flight:
                window = IN_FLIGHT_PER_SLOT * self._slots()
                while pending and len(in_flight) < window and not _past(deadline):
                    task, request = pending.popleft()
                    ref = self._remote.options(**request).remote(RemoteTask.pack(task, options), execute)
                    in_flight[ref] = (task, request)
                if not in_flight:
                    break
                done, _ = self.ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                for ref in done:
                    task, request = in_flight.pop(ref)
                    result = self._result(ref, task)
                    if 0 < request["num_gpus"] < 1 and _out_of_memory(result.rows):
                        pending.appendleft((task, {**request, "num_gpus": 1.0}))  # alone on a GPU
                        continue
                    if store is not None:
                        _write_files(store, task, result)
                    on_rows(task, result.rows)
        except BaseException:
            for ref in in_flight:  # a KeyboardInterrupt in each worker: it kills its task's processes
                self.ray.cancel(ref)
            raise
        return [task for task, _ in pending]

    def run_one(self, task: BenchTask, options: JudgeOptions) -> list[dict]:
        """The rows of one task, run on the cluster (generate's judge; safe to call from several threads)."""
        rows: list[dict] = []
        self.run([task], options, None, lambda _, finished: rows.extend(finished))
        return rows

    def _result(self, ref, task: BenchTask) -> RemoteResult:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the bench's own code failed on the node
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            detail = f"the Ray task raised {type(cause).__name__}: {str(cause).strip()[-400:]}"
        except ray.exceptions.RayError as exc:  # its worker or node died, on the retry too
            detail = (f"the Ray task failed twice (Ray retried it {MAX_RETRIES}× after its worker or node "
                      f"died): {type(exc).__name__}: {str(exc).strip()[-400:]}")
        rows = [finish(failure_row(task, run, "bench_error", detail), None, None, 0.0) | {"node": None}
                for run in task.runs]
        return RemoteResult(rows)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _write_files(store: ResultsStore, task: BenchTask, result: RemoteResult) -> None:
    """The node's logs and kernelwright's files, at the paths the local pool would have written."""
    for run in task.runs:
        if run.system in result.optimized and run.candidate:
            Path(run.candidate).parent.mkdir(parents=True, exist_ok=True)
            Path(run.candidate).write_text(result.optimized[run.system])
        if run.system in result.logs:
            path = store.log_path(run.system, task.problem_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(result.logs[run.system])


def _out_of_memory(rows: list[dict]) -> bool:
    return any(row.get("status") == "oom" or "out of memory" in str(row.get("detail", "")).lower()
               for row in rows)
