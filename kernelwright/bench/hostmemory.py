"""Why a bench task process died by SIGKILL when the bench did not kill it: the host's memory, watched
while the task runs (issue 18: "killed by signal 9" alone gives the user nothing to act on).

While a task runs, its waiting thread samples every POLL_S: the resident memory of the task's whole
process tree (its judge workers and compilers run in sessions of their own, so the tree is followed by
parent ids, not by process group) and the host's MemAvailable. The kernel's out-of-memory kills are
counted before and after: the `oom_kill` line of the bench's cgroup (v2 `memory.events`, v1
`memory.oom_control`), else of `/proc/vmstat` (host-wide). A SIGKILL with a kill counted meanwhile, or
with no counter readable and under LOW_MEMORY_FRACTION of the host's memory available at the last
sample, is the OOM killer's (`host_oom`); any other is from outside kernelwright. The detail gives the
memory figures either way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 0.5
LOW_MEMORY_FRACTION = 0.05
GIB = 2**30
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _oom_counters() -> tuple[Path, ...]:
    """Files with an `oom_kill` count, the narrowest first: this process's cgroup (v2 `memory.events`,
    at the `0::/path` of /proc/self/cgroup; v1 `memory.oom_control`), then the host's /proc/vmstat."""
    v2 = Path("/sys/fs/cgroup")
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                v2 = v2 / line[3:].lstrip("/")
    except OSError:
        pass
    return v2 / "memory.events", Path("/sys/fs/cgroup/memory/memory.oom_control"), Path("/proc/vmstat")


@dataclass(frozen=True)
class HostMemory:
    """Where the host's memory figures are read (tests point these at files of their own)."""

    counters: tuple[Path, ...] = field(default_factory=_oom_counters)
    meminfo: Path = Path("/proc/meminfo")
    proc: Path = Path("/proc")

    def oom_kills(self) -> int | None:
        """The OOM killer's kill count from the first readable counter; None when there is none."""
        for path in self.counters:
            try:
                match = re.search(r"^oom_kill (\d+)$", path.read_text(), re.MULTILINE)
            except OSError:
                continue
            if match:
                return int(match.group(1))
        return None

    def meminfo_bytes(self, key: str) -> int | None:
        try:
            match = re.search(rf"^{key}:\s+(\d+) kB$", self.meminfo.read_text(), re.MULTILINE)
        except OSError:
            return None
        return int(match.group(1)) * 1024 if match else None

    def tree_rss(self, root: int) -> int:
        """Resident bytes of `root` and all its descendants (one pass over /proc/*/stat)."""
        children: dict[int, list[int]] = {}
        rss = {}
        for stat in self.proc.glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:  # the process ended meanwhile
                continue
            fields = text[text.rfind(")") + 2:].split()  # after "pid (comm) ": comm may hold spaces
            pid = int(stat.parent.name)
            children.setdefault(int(fields[1]), []).append(pid)
            rss[pid] = int(fields[21]) * PAGE_BYTES
        total, frontier = 0, [root]
        while frontier:
            pid = frontier.pop()
            total += rss.get(pid, 0)
            frontier += children.get(pid, [])
        return total


class TaskWatch:
    """Samples one task's process tree while it runs; then says why it died, if it was killed."""

    def __init__(self, host: HostMemory):
        self.host = host
        self.kills_before = host.oom_kills()
        self.peak_rss = 0
        self.last_available: int | None = None
        self.lowest_available: int | None = None

    def sample(self, pid: int) -> None:
        self.peak_rss = max(self.peak_rss, self.host.tree_rss(pid))
        available = self.host.meminfo_bytes("MemAvailable")
        if available is not None:
            self.last_available = available
            lowest = self.lowest_available
            self.lowest_available = available if lowest is None else min(lowest, available)

    def killed(self) -> tuple[str, str]:
        """(status, detail) for a task process that died by a SIGKILL the bench did not send."""
        kills_after = self.host.oom_kills()
        total = self.host.meminfo_bytes("MemTotal")
        figures = self._figures(total)
        if self.kills_before is not None and kills_after is not None and kills_after > self.kills_before:
            kills = kills_after - self.kills_before
            return "host_oom", (f"the bench task process was killed by the kernel's out-of-memory killer "
                                f"(host memory ran out: {kills} OOM kill(s) counted while it ran; "
                                f"{figures})")
        low = (self.last_available is not None and total
               and self.last_available < LOW_MEMORY_FRACTION * total)
        if (self.kills_before is None or kills_after is None) and low:
            return "host_oom", (f"the bench task process was killed by SIGKILL, most likely by the kernel's "
                                f"out-of-memory killer (host memory nearly exhausted: {figures}; no OOM-kill "
                                "counter is readable here)")
        return "bench_error", (f"the bench task process was killed by SIGKILL from outside kernelwright "
                               f"(not its timeout, and no OOM kill counted; {figures})")

    def _figures(self, total: int | None) -> str:
        parts = []
        if self.last_available is not None:
            of = f" of {total / GIB:.1f}" if total else ""
            parts.append(f"host memory at the last sample before the kill: {self.last_available / GIB:.1f} "
                         f"GiB available{of}, lowest {self.lowest_available / GIB:.1f} GiB")
        parts.append(f"the task's processes peaked at {self.peak_rss / GIB:.1f} GiB resident")
        return "; ".join(parts)
