"""`kernelwright bench` end to end on the CPU with the real judge: a shrunk two-problem suite, a good,
a crashing and a hanging candidate (the run goes on), then --resume."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from conftest import make_tiny_suite

from kernelwright.bench.pool import SubprocessExecutor
from kernelwright.bench.runner import BenchConfig, run_bench
from kernelwright.bench.store import ResultsStore
from kernelwright.cli import main
from kernelwright.judge.options import JudgeOptions

GOOD = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
"""
CRASH = """import os
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(139)
"""
HANG_ANSWER = """My kernel:
```python
import time
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            time.sleep(1)
```
"""


def test_bench_cpu_end_to_end_with_crash_hang_and_resume(tmp_path, capsys):
    suite = make_tiny_suite(tmp_path / "suite")
    folders = {"good": ("01_ReLU.py", GOOD), "crash": ("01_ReLU.py", CRASH),
               "hang": ("01_ReLU.md", HANG_ANSWER), "none": ("06_Sigmoid.py", GOOD)}
    for system, (name, text) in folders.items():
        (tmp_path / system / "level1").mkdir(parents=True)
        (tmp_path / system / "level1" / name).write_text(text)
    out = tmp_path / "out"
    systems = ",".join(["eager", *(str(tmp_path / system) for system in folders)])
    # One problem keeps this fast: the judge's reference process is started once for every system.
    args = ["bench", str(suite), "--filter", "*ReLU", "--device", "cpu", "--shrink", "--systems", systems,
            "--trials", "1", "--min-runs", "3", "--min-time", "0", "--timeout", "5", "--out", str(out)]
    assert main(args) == 0

    rows = {r["system"]: r for r in ResultsStore(out).rows()}
    assert {system: row["status"] for system, row in rows.items()} == {
        "eager": "correct", "good": "correct", "crash": "runtime_error", "hang": "timeout", "none": "missing"}
    # A candidate's eager time is its own: timed in rounds alternating with the candidate's.
    assert rows["good"]["speedup_vs_eager"] > 0 and rows["good"]["eager_ms"] > 0
    assert rows["good"]["verdict"]["timings"]["eager"]["rounds"] >= 3
    assert (out / "logs" / "hang" / "level1" / "01_ReLU.log").is_file()
    for name in ("report.md", "report.json", "speedup.png", "fast_p.png", "compile_time.png"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "run.json").read_text())["runs"][0]["options"]["shrink"] is True
    # every task process's holds of the machine's locks, and the report's summary of them
    assert "machine_work" in (out / "locks.jsonl").read_text()
    assert "## Where the wall time went (locks)" in (out / "report.md").read_text()

    capsys.readouterr()
    config = BenchConfig(suite=str(suite), systems=systems, pattern="*ReLU", device="cpu", out=str(out),
                         resume=True)
    assert run_bench(config).ran == 0
    assert len(ResultsStore(out).rows()) == 5


def test_a_task_past_its_limit_is_killed_with_its_children(tmp_path):
    executor = SubprocessExecutor(ResultsStore(tmp_path), JudgeOptions(device="cpu"))
    marker = tmp_path / "grandchild.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(60)']); open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    started = time.monotonic()
    returncode, _ = executor._run([sys.executable, "-c", script], dict(os.environ), 3.0)
    assert returncode is None and time.monotonic() - started < 20
    grandchild = int(marker.read_text())
    time.sleep(0.2)
    assert not _alive(grandchild)


def test_each_gpu_s_tasks_get_the_reserved_cpus_and_a_timing_cpu_of_their_own(tmp_path, monkeypatch):
    """bench passes `--timing-cpus` to every task ($KERNELWRIGHT_TIMING_CPUS) and gives each GPU's tasks
    a reserved core of their own ($KERNELWRIGHT_TIMING_CPU), so two GPUs' timings never share a CPU."""
    from kernelwright import gpulock
    from kernelwright.bench import devices
    from kernelwright.bench.devices import Worker, timing_cpu_of
    from kernelwright.bench.plan import BenchTask, SystemRun

    monkeypatch.setattr(devices, "_core", lambda cpu: {cpu})
    assert timing_cpu_of(["0", "1"], "14,15") == {"0": "14", "1": "15"}
    assert timing_cpu_of(["0", "1"], "15") == {}          # fewer cores than GPUs: the timings pick
    monkeypatch.setattr(devices, "_core", lambda cpu: {cpu % 8, cpu % 8 + 8})
    assert timing_cpu_of(["0", "1"], "6,7,14,15") == {"0": "6", "1": "7"}
    monkeypatch.delenv(gpulock.CPU_ENV, raising=False)
    executor = SubprocessExecutor(ResultsStore(tmp_path), JudgeOptions(device="cpu"), timing_cpus="14,15",
                                  timing_cpu={"0": "14", "1": "15"})
    seen = []
    monkeypatch.setattr(executor, "_run", lambda command, env, timeout, watch=None: (
        seen.append((env.get("CUDA_VISIBLE_DEVICES"), env[gpulock.RESERVED_ENV], env[gpulock.CPU_ENV])),
        (0, ""))[1])
    task = BenchTask("level1/01_X", "x.py", "1", "c", (SystemRun("eager", "reference", None),))
    for gpu in ("0", "1"):
        executor(task, Worker(gpu, "GPU"))
    assert seen == [("0", "14,15", "14"), ("1", "14,15", "15")]


def test_stop_ends_running_tasks(tmp_path):
    executor = SubprocessExecutor(ResultsStore(tmp_path), JudgeOptions(device="cpu"))
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        rc=executor._run([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), 60)[0]))
    thread.start()
    time.sleep(1.0)
    executor.stop()
    thread.join(timeout=10)
    assert result["rc"] == -signal.SIGKILL
    assert executor._run(["true"], dict(os.environ), 5)[1] == "the bench was interrupted"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return status.is_file() and status.read_text().split()[2] != "Z"

