"""A bench task process killed by a SIGKILL the bench did not send says why: the kernel's out-of-memory
killer (seen through an OOM-kill counter, here a file the test bumps) or something outside kernelwright,
with the host's memory figures and the task's peak resident memory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from kernelwright.bench.devices import Worker
from kernelwright.bench.hostmemory import HostMemory
from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.pool import SubprocessExecutor
from kernelwright.bench.store import ResultsStore
from kernelwright.judge.options import JudgeOptions

# Holds 300 MiB resident for a few samples, optionally bumps the OOM-kill counter, then dies by SIGKILL.
DIE = """import os, signal, sys, time
block = bytearray(300 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(1.6)
if sys.argv[1]:
    open(sys.argv[1], "w").write("oom_kill 3\\n")
os.kill(os.getpid(), signal.{signal})
"""


class ScriptExecutor(SubprocessExecutor):
    """Runs a script of the test's instead of the task."""

    def __init__(self, tmp_path: Path, host: HostMemory, script: str, counter: str = ""):
        super().__init__(ResultsStore(tmp_path / "out"), JudgeOptions(device="cpu"), host)
        self.script, self.counter = script, counter

    def _command(self, spec: Path, out: Path) -> list[str]:
        return [sys.executable, "-c", self.script, self.counter]


def run(executor: SubprocessExecutor) -> list[dict]:
    task = BenchTask("level1/01_ReLU", "relu.py", "1", "c",
                     (SystemRun("eager", "reference"), SystemRun("kernelwright", "kernelwright", "k.py")))
    return executor(task, Worker(None, "cpu"))


def counter_file(tmp_path: Path) -> Path:
    path = tmp_path / "memory.events"
    path.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\n")
    return path


def test_a_task_killed_by_the_oom_killer_is_host_oom_with_its_memory(tmp_path):
    counter = counter_file(tmp_path)
    host = HostMemory(counters=(tmp_path / "absent", counter))
    rows = run(ScriptExecutor(tmp_path, host, DIE.format(signal="SIGKILL"), str(counter)))
    assert [row["status"] for row in rows] == ["host_oom", "host_oom"]
    detail = rows[0]["detail"]
    assert "out-of-memory killer" in detail and "2 OOM kill(s)" in detail
    assert re.search(r"peaked at 0\.[34] GiB resident", detail), detail
    assert re.search(r"at the last sample before the kill: [\d.]+ GiB available of [\d.]+", detail)
    log = (tmp_path / "out" / "logs" / "kernelwright" / "level1" / "01_ReLU.log").read_text()
    assert log.startswith("host_oom: ")


def test_a_sigkill_from_elsewhere_says_so_with_the_host_memory(tmp_path):
    host = HostMemory(counters=(counter_file(tmp_path),))
    rows = run(ScriptExecutor(tmp_path, host, DIE.format(signal="SIGKILL")))
    assert {row["status"] for row in rows} == {"bench_error"}
    assert "killed by SIGKILL from outside kernelwright (not its timeout" in rows[0]["detail"]
    assert "GiB available" in rows[0]["detail"]


def test_without_a_counter_nearly_no_memory_left_points_at_the_oom_killer(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       100000000 kB\nMemFree:          100 kB\nMemAvailable:     1000 kB\n")
    host = HostMemory(counters=(tmp_path / "absent",), meminfo=meminfo)
    rows = run(ScriptExecutor(tmp_path, host, DIE.format(signal="SIGKILL")))
    assert rows[0]["status"] == "host_oom" and "most likely" in rows[0]["detail"]
    assert "0.0 GiB available of 95.4" in rows[0]["detail"]


def test_other_signals_are_named(tmp_path):
    host = HostMemory(counters=(counter_file(tmp_path),))
    rows = run(ScriptExecutor(tmp_path, host, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    assert rows[0]["status"] == "bench_error" and "killed by SIGSEGV" in rows[0]["detail"]


def test_tree_rss_follows_children_in_other_sessions():
    host = HostMemory()
    alone = host.tree_rss(os.getpid())
    hold = DIE.split("time.sleep")[0] + "print(1, flush=True)\ntime.sleep(30)\n"  # 300 MiB resident
    child = subprocess.Popen([sys.executable, "-c", hold],
                             stdout=subprocess.PIPE, start_new_session=True)
    try:
        child.stdout.readline()
        assert host.tree_rss(os.getpid()) - alone > 250 * 2**20
    finally:
        child.kill()
        child.wait()
