"""Which task a free worker slot starts next: a GPU admits tasks by the memory they need, not by count
(DESIGN.md §7; the needs come from memory.py). `--jobs` stays an upper bound: the slots per GPU.

- A task starts on a GPU when its need fits in the memory not yet promised to the tasks running there
  (USABLE_FRACTION of the GPU's total: the driver, other users and fragmentation take the rest), or when
  the GPU runs no bench task at all: a task bigger than the GPU, or of unknown need, runs alone.
- The bench's order (plan.longest_first) is kept as far as memory allows: a free slot takes the first
  pending task that fits.
- No starvation: a task that does not fit may be overtaken by MAX_OVERTAKES later tasks; then it claims
  the GPU with the most memory free, where nothing else starts until it has started. That GPU drains,
  and an idle GPU admits anything.
- Without a GPU's memory size (no nvidia-smi; the CPU) or without needs, admission is by count only.

Each lease says whether its task ever shared its GPU with another task (`shared`): an out-of-memory
failure of a task that ran alone is its own, one beside other tasks is rerun alone (pool.py).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from kernelwright.bench.devices import Worker
from kernelwright.bench.plan import BenchTask

USABLE_FRACTION = 0.9
MAX_OVERTAKES = 4
WAIT_S = 0.25  # a waiting slot looks again at least this often (the deadline, a stop)

Need = Callable[[BenchTask], "int | None"]


@dataclass
class Lease:
    task: BenchTask
    gpu: str | None
    need: float           # bytes promised to the task on its GPU
    shared: bool = False  # another task ran on the same GPU at some moment while this one ran


class Admission:
    """The pending tasks, in the bench's order, and what runs on each GPU; thread-safe."""

    def __init__(self, tasks: list[BenchTask], workers: list[Worker], need: Need | None = None,
                 max_overtakes: int = MAX_OVERTAKES):
        self._pending = list(enumerate(tasks))
        self._capacity = {w.gpu: USABLE_FRACTION * w.memory_bytes if need and w.memory_bytes else math.inf
                          for w in workers}
        self._need = need
        self._max_overtakes = max_overtakes
        self._running: dict[str | None, list[Lease]] = {gpu: [] for gpu in self._capacity}
        self._overtaken: Counter[int] = Counter()
        self._claims: dict[str | None, int] = {}  # GPU -> index of the starved task it is kept for
        self._changed = threading.Condition()
        self._closed = False

    def take(self, worker: Worker, deadline: float | None = None) -> Lease | None:
        """The next task for `worker`'s GPU, waiting until one fits; None when no task is left to start
        (all started, the deadline passed, or `close()`)."""
        with self._changed:
            while not self._closed and self._pending and (deadline is None or time.monotonic() < deadline):
                lease = self._start_fitting(worker.gpu)
                if lease is not None:
                    return lease
                left = WAIT_S if deadline is None else deadline - time.monotonic()
                self._changed.wait(min(WAIT_S, max(left, 0.0)))
            return None

    def finish(self, lease: Lease) -> None:
        with self._changed:
            self._running[lease.gpu].remove(lease)
            self._changed.notify_all()

    def close(self) -> None:
        """Start nothing more (Ctrl-C); waiting slots return."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def left(self) -> list[BenchTask]:
        """The tasks never started."""
        with self._changed:
            return [task for _, task in self._pending]

    def _start_fitting(self, gpu: str | None) -> Lease | None:
        claim = self._claims.get(gpu)
        for position, (index, task) in enumerate(self._pending):
            need = self._need_of(task, gpu)
            if claim not in (None, index) or not self._fits(need, gpu):
                continue
            del self._pending[position]
            for earlier, _ in self._pending[:position]:
                self._overtaken[earlier] += 1
            self._claims = {g: i for g, i in self._claims.items() if i != index}
            running = self._running[gpu]
            lease = Lease(task, gpu, need, shared=bool(running))
            for other in running:
                other.shared = True
            running.append(lease)
            self._claim_for_starved()
            return lease
        return None

    def _need_of(self, task: BenchTask, gpu: str | None) -> float:
        capacity = self._capacity[gpu]
        if self._need is None or math.isinf(capacity):
            return 0.0
        need = self._need(task)
        return capacity if need is None else need  # unknown: the whole GPU

    def _fits(self, need: float, gpu: str | None) -> bool:
        running = self._running[gpu]
        return not running or need <= self._capacity[gpu] - sum(lease.need for lease in running)

    def _claim_for_starved(self) -> None:
        for index, _ in self._pending:
            if self._overtaken[index] < self._max_overtakes or index in self._claims.values():
                continue
            free = [gpu for gpu in self._capacity if gpu not in self._claims]
            if not free:
                return
            self._claims[max(free, key=self._free_memory)] = index

    def _free_memory(self, gpu: str | None) -> float:
        return self._capacity[gpu] - sum(lease.need for lease in self._running[gpu])
