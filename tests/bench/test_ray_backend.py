"""`kernelwright bench --ray` on a local Ray cluster (2 CPUs, 2 GPUs that are resources only): the same rows
as the local pool with the real judge on a shrunk CPU suite, a worker killed mid-task retried once and
reported after a second death, a killed driver resumed, GPU requests and shares, files by value.
Skipped with a reason when Ray is not installed (it is an optional extra)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is optional: pip install -e '.[ray]' to run the --ray tests")

import conftest as bench_conftest  # noqa: E402  (after the skip: the module needs Ray)
from conftest import FakeExecutor, make_tiny_suite  # noqa: E402

from kernelwright.bench.plan import BenchTask, SystemRun  # noqa: E402
from kernelwright.bench.ray_backend import RayCluster, resource_request, task_memory_bytes  # noqa: E402
from kernelwright.bench.rows import base_row  # noqa: E402
from kernelwright.bench.runner import BenchConfig, run_bench  # noqa: E402
from kernelwright.bench.store import ResultsStore  # noqa: E402
from kernelwright.errors import UsageError  # noqa: E402
from kernelwright.judge.options import JudgeOptions  # noqa: E402

GOOD = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
"""
WRONG_ANSWER = f"A raw answer:\n```python\n{GOOD.replace('torch.clamp_min(x, 0.0)', 'x + 1.0')}```\n"
CRASH = """import os
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(139)
"""
SLOW = """import time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(3)
        return torch.softmax(x, dim=1)
"""
FAST = JudgeOptions(trials=1, min_runs=3, min_time_s=0.0, shrink=True, run_timeout_s=60.0,
                    extra_distributions=False, perturb_params=False)


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    # The executors below are shipped to Ray's workers, which cannot import the test modules.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(bench_conftest)
    return ray_cluster


def config(suite, out, systems, **kwargs) -> BenchConfig:
    return BenchConfig(suite=str(suite), systems=systems, device=kwargs.pop("device", "cpu"), out=str(out),
                       ray="", **kwargs)


class DiesFirst:
    """Kills its own Ray worker (a node lost mid-task) on the first `deaths` attempts at `problem`; judges
    like FakeExecutor otherwise. Attempts are counted in a file: each runs in a fresh worker process."""

    def __init__(self, attempts: Path, problem: str, deaths: int):
        self.attempts, self.problem, self.deaths = str(attempts), problem, deaths

    def __call__(self, task, worker):
        if task.problem_id == self.problem:
            with open(self.attempts, "a") as handle:
                handle.write(f"{os.getpid()}\n")
            if len(Path(self.attempts).read_text().split()) <= self.deaths:
                os._exit(1)
        return FakeExecutor()(task, worker)


class Assigned:
    """FakeExecutor's rows, stamped with the GPU share Ray gave the task; on a shared GPU, `oom` instead."""

    def __init__(self, oom_when_shared: bool = False):
        self.oom_when_shared = oom_when_shared

    def __call__(self, task, worker):
        share = ray.get_runtime_context().get_assigned_resources().get("GPU")
        if self.oom_when_shared and share < 1:
            return [base_row(task, run) | {"status": "oom", "detail": "out of memory"} for run in task.runs]
        rows = FakeExecutor()(task, worker)
        for row in rows:
            row["flags"] = {**row["flags"], "gpu_share": share, "visible": os.environ["CUDA_VISIBLE_DEVICES"]}
        return rows


class WritesOptimized:
    """Checks that the task's files arrived by value (not at the driver's paths), writes kernelwright's
    file where the node's task says, and names the problem's path in a row."""

    def __init__(self, driver_root: Path):
        self.driver_root = str(driver_root)

    def __call__(self, task, worker):
        assert not task.problem_path.startswith(self.driver_root), task.problem_path
        assert "class Model" in Path(task.problem_path).read_text()
        rows = []
        for run in task.runs:
            row = base_row(task, run) | {"status": "correct", "detail": f"judged {task.problem_path}"}
            if run.kind == "kernelwright":
                assert not run.candidate.startswith(self.driver_root), run.candidate
                Path(run.candidate).write_text(f"# optimized {task.problem_id}\n")
            rows.append(row)
        return rows


def keyed(store: ResultsStore) -> dict[tuple[str, str], dict]:
    rows = store.rows()
    keys = [(r["problem"], r["system"]) for r in rows]
    assert len(keys) == len(set(keys)), "a row was recorded twice"
    return dict(zip(keys, rows, strict=True))


def test_ray_rows_equal_the_local_pools_with_the_real_judge(cluster, tmp_path):
    suite = make_tiny_suite(tmp_path / "suite")
    answers = tmp_path / "answers" / "level1"
    answers.mkdir(parents=True)
    (answers / "01_ReLU.py").write_text(GOOD)
    (answers / "06_Sigmoid.md").write_text(WRONG_ANSWER)
    (tmp_path / "crash" / "level1").mkdir(parents=True)
    (tmp_path / "crash" / "level1" / "01_ReLU.py").write_text(CRASH)  # its exit status must reach the judge
    # Two problems keep it short: each task starts its judge's processes (a torch import each).
    systems, pattern = f"eager,{answers.parent},{tmp_path / 'crash'}", "*ReLU,*Sigmoid"
    local = run_bench(BenchConfig(suite=str(suite), systems=systems, pattern=pattern, device="cpu",
                                  out=str(tmp_path / "local"), options=FAST)).store
    remote = run_bench(config(suite, tmp_path / "ray", systems, pattern=pattern, options=FAST)).store

    local_rows, ray_rows = keyed(local), keyed(remote)
    assert set(local_rows) == set(ray_rows) and len(ray_rows) == 6
    same = ("status", "level", "category", "device", "gpu", "node", "candidate")
    for key, row in ray_rows.items():
        assert sorted(row) == sorted(local_rows[key])
        assert {k: row[k] for k in same} == {k: local_rows[key][k] for k in same}, key
        if row.get("verdict"):  # scratch paths on the node were put back to the driver's
            assert row["verdict"]["problem"] == local_rows[key]["verdict"]["problem"]
    statuses = {f"{problem} {system}": row["status"] for (problem, system), row in ray_rows.items()}
    assert statuses == {"level1/01_ReLU eager": "correct", "level1/06_Sigmoid eager": "correct",
                        "level1/01_ReLU answers": "correct", "level1/06_Sigmoid answers": "mismatch",
                        "level1/01_ReLU crash": "runtime_error", "level1/06_Sigmoid crash": "missing"}
    crash = ("level1/01_ReLU", "crash")
    assert ray_rows[crash]["detail"] == local_rows[crash]["detail"] and "139" in ray_rows[crash]["detail"]
    assert ray_rows[("level1/01_ReLU", "eager")]["node"] == socket.gethostname()
    logs = {str(p.relative_to(remote.directory)) for p in (remote.directory / "logs").rglob("*.log")}
    assert logs == {str(p.relative_to(local.directory)) for p in (local.directory / "logs").rglob("*.log")}
    log = Path("logs") / "answers" / "level1" / "06_Sigmoid.log"
    first_line = [(store.directory / log).read_text().splitlines()[0] for store in (local, remote)]
    assert first_line[0] == first_line[1] and first_line[0].startswith("mismatch: ")
    ray_info = json.loads((remote.directory / "run.json").read_text())["runs"][0]["ray"]
    assert ray_info["nodes"][0]["node"] == socket.gethostname()


def test_a_worker_killed_mid_task_is_retried_and_recorded_once(cluster, tiny_suite, answers, tmp_path):
    attempts = tmp_path / "attempts"
    outcome = run_bench(config(tiny_suite, tmp_path / "out", f"eager,{answers}"),
                        execute=DiesFirst(attempts, "level1/06_Sigmoid", deaths=1))
    assert len(attempts.read_text().split()) == 2  # died once, then ran again in another worker
    rows = keyed(outcome.store)
    assert len(rows) == 6 and outcome.left == 0
    assert rows[("level1/06_Sigmoid", "answers")]["status"] == "mismatch"
    assert rows[("level1/01_ReLU", "answers")]["status"] == "correct"


def test_a_task_dying_twice_is_reported_and_resume_retries_it(cluster, tiny_suite, answers, tmp_path):
    out = tmp_path / "out"
    attempts = tmp_path / "attempts"
    run_bench(config(tiny_suite, out, f"eager,{answers}"),
              execute=DiesFirst(attempts, "level1/23_Softmax", deaths=2))
    assert len(attempts.read_text().split()) == 2  # Ray's retries are bounded: one retry
    rows = keyed(ResultsStore(out))
    for system in ("eager", "answers"):
        row = rows[("level1/23_Softmax", system)]
        assert row["status"] == "bench_error" and "failed twice" in row["detail"], row["detail"]
    assert rows[("level1/01_ReLU", "answers")]["status"] == "correct"

    outcome = run_bench(config(tiny_suite, out, f"eager,{answers}", resume=True), execute=FakeExecutor())
    assert outcome.ran == 1
    latest = {(r["problem"], r["system"]): r["status"] for r in ResultsStore(out).latest_rows()}
    assert latest[("level1/23_Softmax", "eager")] == "correct"


def test_a_killed_driver_resumes_without_redoing_finished_rows(cluster, tmp_path):
    suite = make_tiny_suite(tmp_path / "suite")
    answers = tmp_path / "answers" / "level1"
    answers.mkdir(parents=True)
    (answers / "01_ReLU.py").write_text(GOOD)
    (answers / "23_Softmax.py").write_text(SLOW)  # holds its task until the judge's 30 s limit
    out = tmp_path / "out"
    # A second driver on the same cluster, as a user's bench on a long-lived cluster; killed mid-run.
    command = [sys.executable, "-m", "kernelwright.cli", "bench", str(suite), "--filter", "*ReLU,*Softmax",
               "--device", "cpu", "--shrink", "--systems", f"eager,{answers.parent}", "--trials", "1",
               "--min-runs", "3", "--min-time", "0", "--timeout", "30", "--out", str(out),
               "--ray", ray.get_runtime_context().gcs_address]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while len(ResultsStore(out).rows()) < 2 and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    before = keyed(ResultsStore(out))
    assert set(before) == {("level1/01_ReLU", "eager"), ("level1/01_ReLU", "answers")}

    (answers / "23_Softmax.py").write_text(SLOW.replace("time.sleep(3)", "pass"))
    outcome = run_bench(config(suite, out, f"eager,{answers.parent}", pattern="*ReLU,*Softmax", resume=True,
                               options=FAST))
    after = keyed(ResultsStore(out))
    assert outcome.ran == 1 and len(after) == 4
    assert all(after[key] == row for key, row in before.items())
    assert after[("level1/23_Softmax", "answers")]["status"] == "correct"


def test_tasks_ask_for_a_gpu_and_rows_name_node_gpu_and_device(cluster, tiny_suite, answers, tmp_path):
    outcome = run_bench(config(tiny_suite, tmp_path / "out", f"eager,{answers}", device="cuda"),
                        execute=Assigned())
    rows = keyed(outcome.store)
    assert len(rows) == 6
    for row in rows.values():
        assert row["flags"]["gpu_share"] == 1.0
        assert row["gpu"] in ("0", "1") and row["flags"]["visible"] == row["gpu"]
        assert row["device"] == f"GPU {row['gpu']}" and row["node"] == socket.gethostname()
    run = json.loads((outcome.store.directory / "run.json").read_text())["runs"][0]
    assert len(run["gpus"]) == 2 and run["ray"]["nodes"][0]["ip"]


def test_oom_on_a_shared_gpu_runs_again_on_a_whole_one(cluster, tiny_suite, answers, tmp_path):
    # --jobs 2: half a GPU per task; a task out of memory beside another runs again alone
    outcome = run_bench(config(tiny_suite, tmp_path / "out", f"eager,{answers}", device="cuda", jobs=2),
                        execute=Assigned(oom_when_shared=True))
    rows = keyed(outcome.store)
    assert len(rows) == 6 and {row["flags"]["gpu_share"] for row in rows.values()} == {1.0}
    assert rows[("level1/01_ReLU", "answers")]["status"] == "correct"


def test_problems_and_files_travel_by_value(cluster, tiny_suite, tmp_path):
    out = tmp_path / "out"
    outcome = run_bench(BenchConfig(suite=str(tiny_suite), systems="eager,kernelwright", device="cpu",
                                    pattern="*ReLU", out=str(out), ray=""),
                        execute=WritesOptimized(tmp_path))
    rows = keyed(outcome.store)
    written = out / "candidates" / "kernelwright" / "level1" / "01_ReLU.py"
    assert written.read_text() == "# optimized level1/01_ReLU\n"
    assert rows[("level1/01_ReLU", "kernelwright")]["candidate"] == str(written.resolve())
    assert rows[("level1/01_ReLU", "eager")]["detail"] == f"judged {tiny_suite / 'level1' / '01_ReLU.py'}"


def test_resource_requests():
    gib = 2**30
    assert resource_request("cpu", None, None) == {"num_cpus": 1, "num_gpus": 0}
    assert resource_request("cuda", None, 80 * gib)["num_gpus"] == 1.0   # unknown: a whole GPU
    assert resource_request("cuda", None, None, jobs=3)["num_gpus"] == 0.3333
    assert resource_request("cuda", 20 * gib, 80 * gib)["num_gpus"] == 0.3125   # 20 GiB x 1.25 headroom
    assert resource_request("cuda", 200 * gib, 80 * gib)["num_gpus"] == 1.0
    assert resource_request("cuda", 1, 80 * gib)["num_gpus"] == 0.0001
    task = BenchTask("p", "p.py", "1", "c", (SystemRun("eager", "reference"),))
    assert task_memory_bytes(task) is None
    object.__setattr__(task, "memory_bytes", 5 * gib)
    assert task_memory_bytes(task) == 5 * gib


def test_usage_errors(cluster, tiny_suite, tmp_path):
    with pytest.raises(UsageError, match="--gpus"):
        run_bench(BenchConfig(suite=str(tiny_suite), systems="eager", device="cpu", gpus="0", ray=""))
    with pytest.raises(UsageError, match="not a Ray address"):
        RayCluster.connect(str(tiny_suite), "cpu")
