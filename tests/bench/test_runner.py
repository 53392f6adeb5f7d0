"""The runner with a fake executor: planning, rows, resume, the time budget, several workers."""

from __future__ import annotations

import json
import threading
import time

import pytest
from conftest import FakeExecutor

from kernelwright.bench.devices import Worker, lock_path, resolve_workers
from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.pool import run_pool
from kernelwright.bench.runner import BenchConfig, run_bench
from kernelwright.bench.store import ResultsStore
from kernelwright.bench.suite import discover_suite
from kernelwright.errors import UsageError
from kernelwright.judge.options import JudgeOptions


def config(suite, out, systems, **kwargs) -> BenchConfig:
    return BenchConfig(suite=str(suite), systems=systems, device="cpu", out=str(out), **kwargs)


def test_rows_for_every_problem_and_system(tiny_suite, answers, tmp_path):
    executor = FakeExecutor()
    outcome = run_bench(config(tiny_suite, tmp_path / "out", f"eager,compile,{answers}"), execute=executor)
    rows = {(r["problem"], r["system"]): r for r in outcome.store.rows()}
    assert len(rows) == 9 and outcome.left == 0
    # one task per problem, each running every system
    assert [task.systems for task, _ in executor.calls] == [("eager", "compile", "answers")] * 3
    assert rows[("level1/01_ReLU", "answers")]["status"] == "correct"
    assert rows[("level1/06_Sigmoid", "answers")]["status"] == "mismatch"
    assert rows[("level1/23_Softmax", "answers")]["status"] == "missing"
    eager, compiled = rows[("level1/06_Sigmoid", "eager")], rows[("level1/06_Sigmoid", "compile")]
    assert eager["time_ms"] == 4.0 and eager["speedup_vs_eager"] == 1.0
    assert compiled["speedup_vs_eager"] == pytest.approx(1.25)
    assert rows[("level1/01_ReLU", "answers")]["device"] and rows[("level1/01_ReLU", "answers")]["finished"]
    # the candidates' speedup vs compile comes from the same reference timing as the compile row
    assert rows[("level1/01_ReLU", "answers")]["speedup_vs_compile"] == pytest.approx(1.6)
    assert json.loads((outcome.store.directory / "run.json").read_text())["runs"][0]["problems"] == 3


def test_resume_skips_done_and_retries_bench_errors(tiny_suite, answers, tmp_path):
    out = tmp_path / "out"
    run_bench(config(tiny_suite, out, f"eager,{answers}"), execute=FakeExecutor())
    with pytest.raises(UsageError, match="--resume"):
        run_bench(config(tiny_suite, out, f"eager,{answers}"), execute=FakeExecutor())

    store = ResultsStore(out)
    lines = store.results_path.read_text().splitlines()
    broken = json.loads(lines[0]) | {"status": "bench_error"}
    # a bench_error row and a torn last line (a run killed mid-write) are both redone
    store.results_path.write_text("\n".join([*lines[1:], json.dumps(broken)]) + "\n" + lines[0][:20])
    executor = FakeExecutor()
    outcome = run_bench(config(tiny_suite, out, f"eager,{answers}", resume=True), execute=executor)
    redone = [(t.problem_id, t.systems) for t, _ in executor.calls]
    assert redone == [(broken["problem"], (broken["system"],))]
    assert not executor.calls[0][0].compile_baseline  # torch.compile is timed only for the compile system
    assert outcome.ran == 1
    assert {(r["problem"], r["system"]): r["status"] for r in store.latest_rows()}[
        (broken["problem"], broken["system"])] == "correct"
    assert len(store.runs()) == 2


def test_resume_redoes_the_environments_failures_only(tmp_path):
    store = ResultsStore(tmp_path)
    store.append([{"problem": "p", "system": system, "status": status} for system, status in
                  [("a", "bench_error"), ("b", "host_oom"), ("c", "oom"), ("d", "problem_error")]])
    # `kernelwright optimize` that exited for the machine's sake (its row status oom, its detail saying so)
    store.append([{"problem": "p", "system": "e", "status": "oom",
                   "detail": "environment failure, not a verdict: `kernelwright optimize` exited with 4"}])
    assert store.done_keys() == {("p", "c"), ("p", "d")}


def test_time_budget_leaves_tasks_for_resume(tiny_suite, tmp_path):
    out = tmp_path / "out"
    outcome = run_bench(config(tiny_suite, out, "eager", time_budget_s=1e-9), execute=FakeExecutor())
    assert outcome.ran == 0 and outcome.left == 3
    outcome = run_bench(config(tiny_suite, out, "eager", resume=True), execute=FakeExecutor())
    assert outcome.ran == 3 and outcome.left == 0


def test_level_and_filter_select_problems(tiny_suite, tmp_path):
    executor = FakeExecutor()
    run_bench(config(tiny_suite, tmp_path / "out", "eager", pattern="*Soft*", level=1), execute=executor)
    assert [task.problem_id for task, _ in executor.calls] == ["level1/23_Softmax"]
    several = FakeExecutor()
    run_bench(config(tiny_suite, tmp_path / "out3", "eager", pattern="*Soft*,*ReLU"), execute=several)
    assert [task.problem_id for task, _ in several.calls] == ["level1/01_ReLU", "level1/23_Softmax"]
    with pytest.raises(UsageError, match="no problem files"):
        run_bench(config(tiny_suite, tmp_path / "out2", "eager", level=2), execute=executor)


def test_unknown_system_is_a_usage_error(tiny_suite, tmp_path):
    with pytest.raises(UsageError, match="neither"):
        run_bench(config(tiny_suite, tmp_path / "out", "eager,nonsense"), execute=FakeExecutor())


def test_resume_without_compile_row_needs_no_compile_timing(tiny_suite, tmp_path):
    out = tmp_path / "out"
    run_bench(config(tiny_suite, out, "compile", pattern="*ReLU"), execute=FakeExecutor())
    executor = FakeExecutor()
    run_bench(config(tiny_suite, out, "eager,compile", pattern="*ReLU", resume=True), execute=executor)
    (task, _), = executor.calls
    assert task.systems == ("eager",) and not task.compile_baseline


def test_pool_spreads_tasks_over_workers_and_survives_a_failing_task():
    tasks = [BenchTask(f"level1/{i}_X", "x.py", "1", "c", (SystemRun(f"s{i}", "candidates", "c.py"),))
             for i in range(8)]
    workers = [Worker("0", "GPU-A"), Worker("1", "GPU-A")]
    used: dict[str, set] = {}
    lock = threading.Lock()

    def execute(task, worker):
        with lock:
            used.setdefault(worker.gpu, set()).add(threading.get_ident())
        time.sleep(0.05)
        if task.problem_id == "level1/3_X":
            raise RuntimeError("worker fell over")
        return [{"problem": task.problem_id, "system": task.systems[0], "status": "correct"}]

    finished = []
    left = run_pool(tasks, workers, execute, lambda task, rows: finished.extend(rows))
    assert not left and len(finished) == 8
    assert set(used) == {"0", "1"}
    failed = [r for r in finished if r["status"] == "bench_error"]
    assert len(failed) == 1 and "worker fell over" in failed[0]["detail"]
    assert {r["gpu"] for r in finished} == {"0", "1"} and {r["device"] for r in finished} == {"GPU-A"}


def test_kernelwright_cannot_be_benched_shrunk(tiny_suite, tmp_path):
    shrunk = BenchConfig(suite=str(tiny_suite), systems="eager,kernelwright", device="cpu", out=str(tmp_path),
                         options=JudgeOptions(shrink=True))
    with pytest.raises(UsageError, match="--shrink"):
        run_bench(shrunk, execute=FakeExecutor())


def test_gpus_map_through_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr("kernelwright.bench.devices.gpu_properties", lambda gpu: {"name": f"GPU model {gpu}"})
    assert resolve_workers("cuda", "1") == [Worker("5", "GPU model 5", lock_path("5"))]
    assert [w.gpu for w in resolve_workers("cuda", None)] == ["3", "5"]
    # --jobs: slots per GPU, sharing that GPU's lock file
    assert [(w.gpu, w.lock) for w in resolve_workers("cuda", None, jobs=2)] == [
        ("3", lock_path("3")), ("3", lock_path("3")), ("5", lock_path("5")), ("5", lock_path("5"))]
    assert lock_path("GPU-1A:2").endswith("kernelwright-gpu-1a_2.lock")
    # a GPU nvidia-smi names by UUID: its lock file is the one a process outside the bench finds
    monkeypatch.setattr("kernelwright.bench.devices.gpu_properties",
                        lambda gpu: {"name": "H100", "uuid": f"GPU-ABC-{gpu}"})
    assert [w.lock for w in resolve_workers("cuda", None)] == [lock_path("abc-3"), lock_path("abc-5")]
    with pytest.raises(UsageError, match="--jobs"):
        resolve_workers("cuda", None, jobs=0)
    with pytest.raises(UsageError, match="not a visible GPU"):
        resolve_workers("cuda", "2")
    # the GPU's memory size, for admission by memory; "[N/A]" leaves it unknown
    sizes = {"3": "81559 MiB", "5": "[N/A]"}
    monkeypatch.setattr("kernelwright.bench.devices.gpu_properties",
                        lambda gpu: {"name": "H100", "memory.total": sizes[gpu]})
    assert [w.memory_bytes for w in resolve_workers("cuda", None)] == [81559 * 2**20, None]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(UsageError, match="--device cpu"):
        resolve_workers("cuda", None)


def test_timing_cpus_kept_one_per_gpu_where_the_host_has_cpus_to_spare(monkeypatch):
    """`bench --timing-cpus`: auto keeps the last CPU per GPU for timings where tasks run side by side on a
    host with 8 CPUs per GPU (or takes $KERNELWRIGHT_TIMING_CPUS as set); off keeps none; a list is
    checked against the CPUs this process may use."""
    from kernelwright import gpulock
    from kernelwright.bench import devices
    from kernelwright.bench.devices import timing_cpus

    monkeypatch.delenv(gpulock.RESERVED_ENV, raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(devices, "_core", lambda cpu: {cpu})
    assert timing_cpus("auto", gpus=1, tasks_at_once=8) == "15"
    assert timing_cpus("auto", gpus=2, tasks_at_once=2) == "14,15"
    monkeypatch.setattr(devices, "_core", lambda cpu: {cpu % 8, cpu % 8 + 8})   # SMT: 7 and 15 share a core
    assert timing_cpus("auto", gpus=1, tasks_at_once=8) == "7,15"
    assert timing_cpus("auto", gpus=2, tasks_at_once=8) == "6,7,14,15"
    monkeypatch.setattr(devices, "_core", lambda cpu: {cpu})
    assert timing_cpus("auto", gpus=1, tasks_at_once=1) == ""     # one task at a time: nothing to keep off
    assert timing_cpus("auto", gpus=4, tasks_at_once=8) == ""     # 4 CPUs per GPU: none to spare
    assert timing_cpus("off", gpus=1, tasks_at_once=8) == ""
    assert timing_cpus(" 13-14 ", gpus=1, tasks_at_once=8) == "13,14"
    for bad in ("16", "x", "0-15"):   # not this host's, not CPUs, none left for the work
        with pytest.raises(UsageError, match="--timing-cpus"):
            timing_cpus(bad, gpus=1, tasks_at_once=8)
    monkeypatch.setenv(gpulock.RESERVED_ENV, "3")
    assert timing_cpus("auto", gpus=1, tasks_at_once=8) is None   # the environment's own, left as it is
    assert timing_cpus("off", gpus=1, tasks_at_once=8) == ""
    # a bench started under the setting keeps off those CPUs itself: they are still this host's to give
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)) - {3}, raising=False)
    assert timing_cpus("3", gpus=1, tasks_at_once=8) == "3"
    with pytest.raises(UsageError, match="only for CUDA tasks"):
        run_bench(BenchConfig(systems="eager", device="cpu", timing_cpus="3"), execute=FakeExecutor())


def test_flat_suite_folder(tmp_path):
    (tmp_path / "relu.py").write_text("x = 1\n")
    (tmp_path / "_helper.py").write_text("")
    assert [(p.id, p.level, p.category) for p in discover_suite(tmp_path)] == [("relu", "", "uncategorized")]


def test_a_task_out_of_gpu_memory_beside_others_runs_again_alone():
    tasks = [BenchTask(f"level1/{i}_X", "x.py", "1", "c", (SystemRun(f"s{i}", "candidates", "c.py"),))
             for i in range(4)]
    workers = [Worker("0", "GPU-A"), Worker("0", "GPU-A")]
    running, attempts, alone = [0], [], []
    lock = threading.Lock()

    def execute(task, worker):
        with lock:
            running[0] += 1
            attempts.append(task.problem_id)
            concurrent = running[0] > 1
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        if task.problem_id == "level1/2_X" and attempts.count(task.problem_id) == 1:
            return [{"problem": task.problem_id, "system": "s2", "status": "optimize_error",
                     "detail": "the reference Model failed: CUDA error: out of memory"}]
        if task.problem_id == "level1/2_X":
            alone.append(not concurrent)
        return [{"problem": task.problem_id, "system": task.systems[0], "status": "correct"}]

    finished = []
    left = run_pool(tasks, workers, execute, lambda task, rows: finished.extend(rows))
    assert not left and attempts.count("level1/2_X") == 2 and alone == [True]
    assert sorted(r["problem"] for r in finished) == [f"level1/{i}_X" for i in range(4)]
    assert all(r["status"] == "correct" for r in finished)


def test_tasks_start_longest_first_by_their_measured_seconds_else_by_level():
    """Measured tasks by their seconds, the longest first; never-measured ones before them, higher levels
    first; ties in suite order."""
    from kernelwright.bench.plan import longest_first

    def task(problem_id: str) -> BenchTask:
        level = problem_id.split("/")[0].removeprefix("level")
        return BenchTask(problem_id, f"/{problem_id}.py", level, "c", (SystemRun("eager", "reference"),))

    tasks = [task(p) for p in ("level1/a", "level1/b", "level2/c", "level3/d", "level1/e", "level3/f")]
    measured = {"level1/a": 10.0, "level1/b": 50.0, "level3/d": 20.0}
    order = longest_first(tasks, lambda t: measured.get(t.problem_id))
    assert [t.problem_id for t in order] == ["level3/f", "level2/c", "level1/e", "level1/b", "level3/d",
                                             "level1/a"]
    # nothing measured, one level: suite order
    assert longest_first(tasks[:2] + tasks[4:5], lambda t: None) == tasks[:2] + tasks[4:5]
    # a folder that is not named by a number ranks as level 0, after numbered ones
    flat = BenchTask("x", "/x.py", "misc", "c", ())
    assert longest_first([flat, tasks[0]], lambda t: None) == [tasks[0], flat]


def test_a_fresh_machine_orders_bundled_tasks_by_the_committed_prior(tmp_path):
    """Where the local cache knows no task (a fresh GPU machine), the bundled problems' committed seconds
    order them; the cache wins where it knows the task, a copy of a bundled problem elsewhere and a system
    the prior lacks get no prior, and the committed file covers every bundled problem."""
    from kernelwright.bench.prior import PRIOR_FILE, prior_from_results, read_prior, render, with_prior
    from kernelwright.problem_files import BUNDLED_DIR, bundled_problem_ids

    def task(problem_id: str, systems=("eager", "kernelwright"), path: str | None = None) -> BenchTask:
        runs = tuple(SystemRun(s, "reference" if s == "eager" else "kernelwright") for s in systems)
        return BenchTask(problem_id, path or str(BUNDLED_DIR / f"{problem_id}.py"), "1", "c", runs)

    prior = {"level1/01_ReLU": {"eager": 10.0, "kernelwright": 20.0}}
    seconds = with_prior(None, prior)
    assert seconds(task("level1/01_ReLU")) == 30.0
    assert seconds(task("level1/01_ReLU", systems=("eager", "mine"))) is None
    copy = tmp_path / "01_ReLU.py"
    copy.write_text((BUNDLED_DIR / "level1/01_ReLU.py").read_text())
    assert seconds(task("level1/01_ReLU", path=str(copy))) is None
    assert with_prior(lambda t: 5.0, prior)(task("level1/01_ReLU")) == 5.0
    assert with_prior(lambda t: None, prior)(task("level1/01_ReLU")) == 30.0

    committed = read_prior()   # a problem added since the last GPU run is unknown there: it starts first
    assert committed and set(committed) <= set(bundled_problem_ids())
    assert all({"eager", "compile", "kernelwright"} <= set(entry) for entry in committed.values())
    assert read_prior(tmp_path / "missing.json") == {}

    # the writer: correct rows only, later files win, and the text reads back
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text('{"problem": "p", "system": "eager", "status": "correct", "seconds": 3.0}\n'
                     '{"problem": "q", "system": "eager", "status": "failed", "seconds": 1.0}\n')
    second.write_text('{"problem": "p", "system": "eager", "status": "correct", "seconds": 4.04,'
                      ' "device": "GPU X"}\n')
    content = prior_from_results([first, second])
    assert content["seconds"] == {"p": {"eager": 4.0}} and content["gpus"] == ["GPU X"]
    out = tmp_path / "prior.json"
    out.write_text(render(content))
    assert read_prior(out) == {"p": {"eager": 4.0}}
    assert PRIOR_FILE.parent == BUNDLED_DIR
