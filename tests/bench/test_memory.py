"""Admission by GPU memory (admission.py), the memory a task needs (memory.py), and what becomes of a task
that ran out of memory: rerun alone, `oom`, and `problem_error` only for a reference that failed alone."""

from __future__ import annotations

import json
import threading
import time

import pytest
from conftest import FakeExecutor, FakeJudge

from kernelwright.bench.admission import MAX_OVERTAKES, USABLE_FRACTION, Admission
from kernelwright.bench.devices import Worker
from kernelwright.bench.memory import (
    ALLOCATOR_SLACK,
    PROCESS_BYTES,
    STATIC_FACTOR,
    STATIC_FIXED_BYTES,
    PeakCache,
    plan_needs,
    task_need,
)
from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.pool import run_pool
from kernelwright.bench.rows import reference_failure_row, settle
from kernelwright.bench.runner import BenchConfig, run_bench
from kernelwright.bench.store import ResultsStore
from kernelwright.bench.tasks import run_task
from kernelwright.errors import ProblemLoadError
from kernelwright.judge.options import JudgeOptions

GPU_BYTES = 1000  # a toy GPU: USABLE_FRACTION of it is admitted
CAPACITY = USABLE_FRACTION * GPU_BYTES


def toy_tasks(count: int) -> list[BenchTask]:
    return [BenchTask(f"level1/{i}_X", "x.py", "1", "c", (SystemRun("s", "candidates", "c.py"),))
            for i in range(count)]


class Recorder:
    """A fake execute: each task sleeps a little; records what ran at once on each GPU, and when."""

    def __init__(self, needs: dict[str, int | None], seconds: float = 0.05):
        self.needs, self.seconds = needs, seconds
        self.running: dict[str | None, list[str]] = {}
        self.snapshots: list[tuple[str | None, tuple[str, ...]]] = []  # (GPU, tasks running) at each start
        self.order: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, task: BenchTask, worker: Worker) -> list[dict]:
        with self.lock:
            running = self.running.setdefault(worker.gpu, [])
            running.append(task.problem_id)
            self.snapshots.append((worker.gpu, tuple(running)))
            self.order.append(task.problem_id)
        time.sleep(self.seconds)
        with self.lock:
            running.remove(task.problem_id)
        return [{"problem": task.problem_id, "system": "s", "status": "correct", "flags": {}}]

    def load(self, names: tuple[str, ...]) -> float:
        return sum(CAPACITY if self.needs[n] is None else self.needs[n] for n in names)


def test_a_gpu_admits_tasks_by_memory_not_by_count():
    tasks = toy_tasks(8)
    sizes = [500, 300, 300, 600, 100, 2000, None, 50]  # 2000: bigger than the GPU; None: unknown
    needs = {t.problem_id: size for t, size in zip(tasks, sizes, strict=True)}
    recorder = Recorder(needs)
    workers = [Worker("0", "GPU-A", memory_bytes=GPU_BYTES)] * 4
    finished = []
    left = run_pool(tasks, workers, recorder, lambda task, rows: finished.extend(rows),
                    need=lambda task: needs[task.problem_id])
    assert not left and len(finished) == 8
    for _, names in recorder.snapshots:
        assert len(names) == 1 or recorder.load(names) <= CAPACITY, names
    alone = {names[0] for _, names in recorder.snapshots if len(names) == 1}
    shared = {name for _, names in recorder.snapshots if len(names) > 1 for name in names}
    assert {"level1/5_X", "level1/6_X"}.isdisjoint(shared)  # too big, and unknown: alone
    assert {"level1/5_X", "level1/6_X"} <= alone
    assert max(len(names) for _, names in recorder.snapshots) > 1  # small ones did share


def test_without_memory_sizes_admission_is_by_count():
    tasks = toy_tasks(6)
    recorder = Recorder({t.problem_id: 10**12 for t in tasks})
    workers = [Worker("0", "GPU-A")] * 3  # nvidia-smi gave no memory size
    run_pool(tasks, workers, recorder, lambda task, rows: None, need=lambda task: 10**12)
    assert max(len(names) for _, names in recorder.snapshots) > 1
    assert max(len(names) for _, names in recorder.snapshots) <= 3


def test_a_big_task_is_overtaken_a_bounded_number_of_times_then_runs():
    tasks = toy_tasks(14)
    needs = {t.problem_id: 100 for t in tasks} | {"level1/1_X": 850}  # fits only on an idle GPU
    recorder = Recorder(needs, seconds=0.04)
    workers = [Worker("0", "GPU-A", memory_bytes=GPU_BYTES)] * 4
    run_pool(tasks, workers, recorder, lambda task, rows: None, need=lambda task: needs[task.problem_id])
    order = recorder.order
    overtook = [name for name in order[:order.index("level1/1_X")] if name != "level1/0_X"]
    assert len(overtook) == MAX_OVERTAKES
    big = [names for _, names in recorder.snapshots if "level1/1_X" in names]
    assert big == [("level1/1_X",)]


def test_tasks_keep_suite_order_when_everything_fits():
    tasks = toy_tasks(10)
    recorder = Recorder({t.problem_id: 10 for t in tasks}, seconds=0.01)
    run_pool(tasks, [Worker("0", "GPU-A", memory_bytes=GPU_BYTES)] * 3, recorder, lambda task, rows: None,
             need=lambda task: 10)
    assert recorder.order == [t.problem_id for t in tasks]


def test_admission_spreads_over_gpus_and_a_claim_holds_one_gpu_only():
    tasks = toy_tasks(3)
    needs = {"level1/0_X": 800, "level1/1_X": 800, "level1/2_X": 100}
    admission = Admission(tasks, [Worker("0", "A", memory_bytes=GPU_BYTES), Worker("1", "A",
                                                                                    memory_bytes=GPU_BYTES)],
                          need=lambda task: needs[task.problem_id], max_overtakes=1)
    first = admission.take(Worker("0", "A"))
    assert first.task.problem_id == "level1/0_X"
    # GPU 0 has 100 left: task 1 does not fit, task 2 overtakes it, and task 1 claims the freer GPU 1
    second = admission.take(Worker("0", "A"))
    assert second.task.problem_id == "level1/2_X" and first.shared and second.shared
    third = admission.take(Worker("1", "A"))
    assert third.task.problem_id == "level1/1_X" and not third.shared
    assert admission.take(Worker("0", "A"), deadline=time.monotonic() + 0.05) is None
    assert admission.left() == []


def test_task_need_counts_every_process_of_the_task():
    def task(*runs: SystemRun) -> BenchTask:
        return BenchTask("p", "p.py", "1", "c", runs)

    references = task(SystemRun("eager", "reference"), SystemRun("compile", "reference"))
    assert task_need(references, 1000, {}) == int(ALLOCATOR_SLACK * 1000) + PROCESS_BYTES
    folder = task(SystemRun("eager", "reference"), SystemRun("a", "candidates"))
    assert task_need(folder, 1000, {"a": 3000}) == int(ALLOCATOR_SLACK * 4000) + 2 * PROCESS_BYTES
    ours = task(SystemRun("kernelwright", "kernelwright"))
    # optimize measuring (R) beside its judge's reference (R), then that judge's candidate: 2R + C
    assert task_need(ours, 1000, {}) == int(ALLOCATOR_SLACK * 3000) + 3 * PROCESS_BYTES


def test_static_estimates_need_no_gpu_and_measured_peaks_replace_them(tiny_suite, tmp_path):
    def task(problem: str, *runs: SystemRun) -> BenchTask:
        return BenchTask(f"level1/{problem}", str(tiny_suite / "level1" / f"{problem}.py"), "1", "c", runs)

    broken = tiny_suite / "level1" / "99_Broken.py"
    broken.write_text((tiny_suite / "level1" / "01_ReLU.py").read_text().replace(
        "torch.randn(batch_size, dim)", "torch.randn(batch_size, dim, device='cuda')"))
    relu = task("01_ReLU", SystemRun("eager", "reference"))
    softmax = task("23_Softmax", SystemRun("eager", "reference"), SystemRun("kernelwright", "kernelwright"))
    unknown = task("99_Broken", SystemRun("eager", "reference"))
    cache = PeakCache(tmp_path / "memory", "NVIDIA H100 80GB HBM3", "2.11.0+cu130")
    needs, sources = plan_needs([relu, softmax, unknown], cache)
    relu_bytes = 16384 * 12288 * 4  # input and output alike; no parameters
    assert sources == {"level1/01_ReLU": "static", "level1/23_Softmax": "static",
                       "level1/99_Broken": "unknown"}
    # the input held, the op's one result, the fixed part, the judge's copies of the input and output
    assert needs["level1/01_ReLU"] == task_need(relu, 4 * relu_bytes + STATIC_FIXED_BYTES, {})
    assert needs["level1/23_Softmax"] > needs["level1/01_ReLU"] and needs["level1/99_Broken"] is None

    measured = {"reference_peak_bytes": 5 * 2**30, "candidate_peak_bytes": 2**30}
    cache.record(relu, [{"system": "eager", "status": "correct", "memory": measured, "seconds": 12.5}])
    cache.record(softmax, [{"system": "kernelwright", "status": "correct", "memory": measured,
                            "seconds": 30}])
    # the seconds each system's run took: a task's whole when all of its systems ran
    assert cache.task_seconds(relu) == 12.5 and cache.task_seconds(softmax) is None
    cache.record(softmax, [{"system": "eager", "status": "correct", "memory": None, "seconds": 5}])
    assert cache.task_seconds(softmax) == 35
    # a failure's seconds are not its task's length (it may have ended early)
    cache.record(softmax, [{"system": "eager", "status": "optimize_error", "memory": None, "seconds": 1}])
    assert cache.task_seconds(softmax) == 35
    needs, sources = plan_needs([relu, softmax], cache, static=lambda paths: pytest.fail("not needed"))
    assert sources == {"level1/01_ReLU": "measured", "level1/23_Softmax": "measured"}
    assert needs["level1/23_Softmax"] == task_need(softmax, 5 * 2**30, {"kernelwright": 2**30})
    # an edited problem is a different problem: measured again
    relu_file = tiny_suite / "level1" / "01_ReLU.py"
    relu_file.write_text(relu_file.read_text() + "\n")
    assert cache.peaks(relu.problem_id, relu.problem_path) == {}
    assert PeakCache(tmp_path / "memory", "NVIDIA A100", "2.11.0+cu130").peaks(
        softmax.problem_id, softmax.problem_path) == {}


def test_bench_plans_memory_and_caches_measured_peaks(tiny_suite, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    workers = [Worker("0", "GPU-A", memory_bytes=80 * 2**30)] * 2
    monkeypatch.setattr("kernelwright.bench.runner.resolve_workers", lambda device, gpus, jobs: workers)
    measured = {"reference_peak_bytes": 3 * 2**30, "candidate_peak_bytes": None}
    monkeypatch.setattr(FakeJudge, "memory", measured)
    static = lambda paths: dict.fromkeys(paths, 2**30)  # the real estimator is tested above
    monkeypatch.setattr("kernelwright.bench.memory.static_estimates", static)

    def bench(out: str) -> None:
        config = BenchConfig(suite=str(tiny_suite), systems="eager", device="cuda", jobs=2, out=out)
        run_bench(config, execute=FakeExecutor())

    bench(str(tmp_path / "a"))
    memory = ResultsStore(tmp_path / "a").runs()[0]["memory"]
    assert set(memory["need_source"].values()) == {"static"} and memory["gpu_bytes"] == {"0": 80 * 2**30}
    bench(str(tmp_path / "b"))
    memory = ResultsStore(tmp_path / "b").runs()[0]["memory"]
    assert set(memory["need_source"].values()) == {"measured"}
    assert set(memory["need_bytes"].values()) == {int(ALLOCATOR_SLACK * 3 * 2**30) + PROCESS_BYTES}
    entry = json.loads(next((tmp_path / "cache" / "memory").rglob("*.json")).read_text())
    assert entry["reference_peak_bytes"] == 3 * 2**30


# ------------------------------------------------------------------------------------- out of memory


class OomJudge(FakeJudge):
    """The reference runs out of GPU memory."""

    def reference_report(self) -> dict:
        raise ProblemLoadError(f"{self.problem_id}: the reference Model failed: OutOfMemoryError: CUDA "
                               "out of memory. Tried to allocate 8.00 GiB")

    def evaluate(self, candidate: str) -> dict:
        return self.reference_report()


def test_a_reference_out_of_memory_is_oom_not_problem_error(tiny_suite):
    task = BenchTask("level1/01_ReLU", str(tiny_suite / "level1" / "01_ReLU.py"), "1", "c",
                     (SystemRun("eager", "reference"), SystemRun("answers", "candidates", "c.py")))
    rows = run_task(task, JudgeOptions(device="cpu"), judge_factory=OomJudge)
    assert [row["status"] for row in rows] == ["oom", "oom"]
    assert all(row["flags"]["reference_failed"] for row in rows)
    broken = reference_failure_row(task, task.runs[0], "x.py: get_inputs() raised NameError: name 'n'")
    assert broken["status"] == "problem_error"


def outcome_of(first: list[str], alone: list[str], workers: list[Worker]) -> tuple[list[dict], list[bool]]:
    """Run two tasks; task 0's reference fails with `first` while shared and `alone` when alone (details
    of each row). Returns task 0's final rows and, per attempt, whether it shared its GPU."""
    tasks = toy_tasks(2)
    task = BenchTask("level1/0_X", "x.py", "1", "c", (SystemRun("eager", "reference"),))
    tasks[0] = task
    attempts, running, lock = [], [0], threading.Lock()

    def execute(task, worker):
        with lock:
            running[0] += 1
        time.sleep(0.1 if task.problem_id == "level1/0_X" else 0.3)  # the other task outlasts task 0
        with lock:
            shared = running[0] > 1
            running[0] -= 1
        if task.problem_id != "level1/0_X":
            return [{"problem": task.problem_id, "system": "s", "status": "correct", "flags": {}}]
        attempts.append(shared)
        details = first if len(attempts) == 1 else alone
        return [reference_failure_row(task, run, detail) if detail else
                {"problem": task.problem_id, "system": run.system, "status": "correct", "flags": {}}
                for run, detail in zip(task.runs, details, strict=True)]

    finished = []
    run_pool(tasks, workers, execute, lambda task, rows: finished.extend(rows))
    return [r for r in finished if r["problem"] == "level1/0_X"], attempts


OOM = "the reference Model failed: OutOfMemoryError: CUDA out of memory"


def test_oom_beside_other_tasks_is_rerun_alone_and_then_settled():
    two_slots = [Worker("0", "GPU-A")] * 2
    rows, attempts = outcome_of([OOM], [""], two_slots)  # the retry alone succeeds
    assert attempts == [True, False] and [r["status"] for r in rows] == ["correct"]

    rows, attempts = outcome_of([OOM], [OOM], two_slots)  # out of memory even alone: the problem's fault
    assert attempts == [True, False]
    assert rows[0]["status"] == "problem_error" and "alone on its GPU" in rows[0]["detail"]

    cublas = "x.py: the reference Model failed: CUBLAS_STATUS_ALLOC_FAILED"
    rows, attempts = outcome_of([cublas], [""], two_slots)
    assert attempts == [True, False] and rows[0]["status"] == "correct"


def test_a_reference_failing_alone_is_not_rerun():
    rows, attempts = outcome_of([OOM], [OOM], [Worker("0", "GPU-A")])
    assert attempts == [False] and rows[0]["status"] == "problem_error"


def test_bench_errors_out_of_memory_become_oom():
    tasks = toy_tasks(1)

    def execute(task, worker):
        raise RuntimeError("torch.OutOfMemoryError: CUDA out of memory in the task process")

    finished = []
    run_pool(tasks, [Worker("0", "GPU-A")], execute, lambda task, rows: finished.extend(rows))
    assert finished[0]["status"] == "oom"
    # `kernelwright optimize` dying of it: the CLI's "internal error" line
    crashed = {"status": "optimize_error", "flags": {}, "detail": "`kernelwright optimize` exited with 3: "
               "internal error: OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"}
    assert settle(crashed, alone=True)["status"] == "oom"


def test_a_task_killed_by_the_host_oom_killer_runs_again_alone_on_the_host():
    tasks = toy_tasks(4)
    attempts: list[int] = []
    running, lock = [0], threading.Lock()

    def execute(task, worker):
        with lock:
            running[0] += 1
        time.sleep(0.05)
        with lock:
            concurrent = running[0]
            running[0] -= 1
        if task.problem_id == "level1/2_X":
            attempts.append(concurrent)
            if len(attempts) == 1:
                return [{"problem": task.problem_id, "system": "s", "status": "host_oom", "flags": {},
                         "detail": "killed by the kernel's out-of-memory killer"}]
        return [{"problem": task.problem_id, "system": "s", "status": "correct", "flags": {}}]

    finished = []
    workers = [Worker("0", "GPU-A"), Worker("1", "GPU-A")]  # two GPUs: the host is shared all the same
    run_pool(tasks, workers, execute, lambda task, rows: finished.extend(rows))
    assert len(attempts) == 2 and attempts[1] == 1
    assert {r["problem"]: r["status"] for r in finished}["level1/2_X"] == "correct"


def test_optimize_runs_before_the_reference_worker_holds_gpu_memory(tiny_suite, tmp_path, monkeypatch):
    """The judge's reference worker keeps the model, inputs and allocator blocks between candidates;
    `kernelwright optimize` runs before it starts, so the compiler has that memory (a 4.5 GiB problem's
    optimize ran out of memory beside its own bench's reference)."""
    events = []

    def optimize(problem_path, output, timeout_s):
        events.append("optimize")
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("class ModelNew: pass\n")
        return None, "", {"stages": []}

    class OrderJudge(FakeJudge):
        def __init__(self, *args):
            events.append("judge")
            super().__init__(*args)

    monkeypatch.setattr("kernelwright.bench.tasks.optimize", optimize)
    candidate = str(tmp_path / "kw" / "01_ReLU.py")
    task = BenchTask("level1/01_ReLU", str(tiny_suite / "level1" / "01_ReLU.py"), "1", "c",
                     (SystemRun("eager", "reference"), SystemRun("kernelwright", "kernelwright", candidate)))
    rows = run_task(task, JudgeOptions(device="cpu"), judge_factory=OrderJudge)
    assert events == ["optimize", "judge"]
    assert [row["status"] for row in rows] == ["correct", "correct"]
    assert rows[1]["optimize_seconds"] is not None and rows[1]["optimize_profile"] == {"stages": []}


def test_an_optimize_failure_keeps_the_start_of_its_error():
    from kernelwright.bench.tasks import what_optimize_said

    log = ("stage table\n" * 300 + "error: out of GPU memory while measuring the kernels: Tried to "
           "allocate\n  48.00 GiB. GPU 0 has a total capacity of 79.19 GiB" + " x" * 1000)
    said = what_optimize_said(log)
    assert said.startswith("out of GPU memory while measuring the kernels: Tried to allocate 48.00 GiB.")
    assert what_optimize_said("Traceback ...\nBoom") == "Traceback ...\nBoom"


def test_static_estimate_counts_the_largest_op_results_and_no_views(tmp_path):
    """Parameters + inputs + the STATIC_LIVE largest non-view op results + the fixed part + the judge's
    copies of inputs and outputs; a forward that fails on meta tensors falls back to (parameters + inputs +
    outputs) x STATIC_FACTOR."""
    from kernelwright.bench.memory import STATIC_LIVE, static_reference_bytes

    mib = 2**20
    chain = tmp_path / "chain.py"
    chain.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        a = (x * 2).reshape(-1)\n"            # 4 MiB result, then a view
        "        b = a[: a.numel() // 2] + 1\n"        # 2 MiB
        "        c = torch.cat([a, a])\n"              # 8 MiB
        "        return c.sum() + b.sum()\n\n\n"       # 4 bytes each
        "def get_inputs():\n    return [torch.randn(1024, 1024)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    assert STATIC_LIVE == 3
    copies = 4 * mib + 4  # the input and the scalar output
    assert static_reference_bytes(str(chain)) == 4 * mib + (8 + 4 + 2) * mib + STATIC_FIXED_BYTES + copies
    data_dependent = tmp_path / "item.py"
    data_dependent.write_text(chain.read_text().replace("a = (x * 2).reshape(-1)",
                                                        "a = (x * float(x.sum().item())).reshape(-1)"))
    assert static_reference_bytes(str(data_dependent)) == STATIC_FACTOR * (4 * mib + 4 * mib)


def test_a_task_process_starts_without_torch():
    """`python -m kernelwright.bench.tasks` starts without torch, so that torch's import can wait for the
    machine lock: it comes with the judge's, in `run_task`, under the CPU-work class."""
    import subprocess
    import sys

    probe = "import sys, kernelwright.bench.tasks\nassert 'torch' not in sys.modules\nprint('light')"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "light", out.stderr
