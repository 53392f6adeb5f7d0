"""`kernelwright generate --ray`: the loop's judge on a Ray cluster. Each answer is judged as a one-system
bench task (kernelwright/bench/ray_backend.py) on a GPU of the cluster, so `--parallel` answers are judged
at once, each with its GPU to itself; the problem and the answer travel by value.

Unlike the local `JudgeSessions`, no judge session outlives one answer: every judgement loads and times its
reference again (the price of spreading answers over machines)."""

from __future__ import annotations

from pathlib import Path

from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.ray_backend import RayCluster
from kernelwright.errors import KernelwrightError
from kernelwright.judge import STATUSES, JudgeOptions
from kernelwright.problem import problem_id_for


class RayJudge:
    """Callable as the loop's judge: `(problem file, candidate file) -> verdict`."""

    def __init__(self, cluster: RayCluster, options: JudgeOptions) -> None:
        self.cluster = cluster
        self.options = options

    @classmethod
    def connect(cls, address: str, options: JudgeOptions) -> RayJudge:
        return cls(RayCluster.connect(address, options.device), options)

    @property
    def hardware(self) -> str | None:
        """The cluster's GPU model, for the prompt (None on the CPU)."""
        return None if self.options.device == "cpu" else self.cluster.device_name

    def __call__(self, problem_path: Path, candidate_path: Path) -> dict:
        problem = Path(problem_path).resolve()
        run = SystemRun("candidate", "candidates", str(Path(candidate_path).resolve()))
        task = BenchTask(problem_id_for(problem), str(problem), "", "", (run,),
                         compile_baseline=self.options.compile_baseline)
        row = self.cluster.run_one(task, self.options)[0]
        if row.get("verdict"):
            return row["verdict"]
        if row["status"] in STATUSES:  # e.g. the task's wall-clock backstop: a verdict on the answer
            return {"status": row["status"], "detail": row["detail"]}
        # The cluster or the problem failed, not the answer: stop, as a local judge error does.
        raise KernelwrightError(f"{problem}: judging on the Ray cluster failed ({row['status']}): "
                                f"{row['detail']}")

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> RayJudge:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
