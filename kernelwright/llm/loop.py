"""The generate loop: for each problem and sample, prompt → answer → extract code → judge → feedback, for up
to `turns` turns, stopping a sample at its first success. Every turn is recorded before the next starts, so a
run killed at any point resumes from its records.

The judge and the code extractor are parameters (the command passes the real judge, which judges one
candidate at a time; unit tests pass fakes). Answers are requested in parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelwright.llm.client import ChatClient
from kernelwright.llm.feedback import feedback_message, is_success, no_code_verdict
from kernelwright.llm.records import RunRecords
from kernelwright.llm.start import StartingPointError, starting_point_message
from kernelwright.prompt import build_prompt

Judge = Callable[[Path, Path], dict]  # (problem file, candidate file) -> verdict
ExtractCode = Callable[[str], "str | None"]  # raw answer -> the ModelNew code, or None
StartingPoint = Callable[[Path, Path], str]  # (problem file, file to write) -> ModelNew source


@dataclass(frozen=True)
class ProblemTask:
    id: str  # also the candidate's path under candidates/, e.g. level1/19_ReLU
    path: Path
    source: str  # quoted verbatim in the prompt


@dataclass(frozen=True)
class LoopSettings:
    samples: int = 1
    turns: int = 3
    parallel: int = 4
    temperature: float | None = None
    require_speedup: bool = True  # success = correct and faster than eager; False: correct suffices
    include_example: bool = True
    hardware: str | None = None  # GPU name for the prompt


class LoopObserver:
    """Told what the loop does (the live view implements it); called from worker threads."""

    def turn_stage(self, problem_id: str, sample: int, turn: int, stage: str) -> None: ...

    def turn_finished(self, event: dict) -> None: ...

    def sample_finished(self, problem_id: str, sample: int) -> None: ...

    def note(self, text: str) -> None: ...


class GenerationLoop:
    def __init__(
        self,
        client: ChatClient,
        judge: Judge,
        extract_code: ExtractCode,
        records: RunRecords,
        settings: LoopSettings,
        observer: LoopObserver | None = None,
        starting_point: StartingPoint | None = None,
    ) -> None:
        self.client = client
        self.judge = judge
        self.extract_code = extract_code
        self.records = records
        self.settings = settings
        self.observer = observer or LoopObserver()
        self.starting_point = starting_point
        self._stop = threading.Event()

    def run(self, tasks: list[ProblemTask]) -> dict:
        """Run every (problem, sample) not finished in the records; returns the run summary."""
        self.records.append(
            {
                "event": "run",
                "model": self.client.model,
                "endpoint": self.client.endpoint,
                "settings": asdict(self.settings),
                "problems": [t.id for t in tasks],
            }
        )
        with ThreadPoolExecutor(max_workers=max(1, self.settings.parallel)) as pool:
            messages = self._all_done(pool, self._start_message, tasks)
            starts = {task.id: message for task, message in zip(tasks, messages, strict=True)}
            jobs = [(task, sample) for task in tasks for sample in range(1, self.settings.samples + 1)]
            self._all_done(pool, lambda job: self._run_sample(job[0], job[1], starts[job[0].id]), jobs)
        return self.records.write_summary([t.id for t in tasks])

    def _all_done(self, pool: ThreadPoolExecutor, function: Callable, items: list) -> list:
        """Map over a pool; the first error (an unusable endpoint, say) stops all other work and is raised."""

        def guarded(item):
            # Set by the failing worker itself, so no other worker starts a job after the failure.
            try:
                return function(item)
            except BaseException:
                self._stop.set()
                raise

        futures = [pool.submit(guarded, item) for item in items]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in done:
                if future.exception() is not None:
                    raise future.exception()
        except BaseException:
            self._stop.set()
            for future in futures:
                future.cancel()
            raise
        return [future.result() for future in futures]

    # ------------------------------------------------------------------------------------------ one sample

    def _run_sample(self, task: ProblemTask, sample: int, start_message: str | None) -> None:
        if self._stop.is_set():
            return
        messages, first_turn = self._resume_state(task, sample, start_message)
        for turn in range(first_turn, self.settings.turns + 1):
            if self._stop.is_set():
                return
            event = self._run_turn(task, sample, turn, messages)
            self.observer.turn_finished(event)
            if event["success"] or event["feedback"] is None:
                break
            messages = messages + [
                {"role": "assistant", "content": event["response"]["text"]},
                {"role": "user", "content": event["feedback"]},
            ]
        self.observer.sample_finished(task.id, sample)

    def _run_turn(self, task: ProblemTask, sample: int, turn: int, messages: list[dict]) -> dict:
        self.observer.turn_stage(task.id, sample, turn, "asking")
        reply = self.client.complete(messages, self.settings.temperature)
        code = self.extract_code(reply.text)
        code_path = None
        if code is None:
            verdict = no_code_verdict()
        else:
            code_path = self.records.write_attempt(task.id, f"s{sample}-t{turn}", code)
            self.observer.turn_stage(task.id, sample, turn, "judging")
            verdict = self.judge(task.path, self.records.out_dir / code_path)
        success = is_success(verdict, self.settings.require_speedup)
        last_turn = turn >= self.settings.turns
        event = self.records.append(
            {
                "event": "turn",
                "problem": task.id,
                "sample": sample,
                "turn": turn,
                "request": {
                    "model": self.client.model,
                    "temperature": self.settings.temperature,
                    "messages": messages,
                },
                "response": {
                    "text": reply.text,
                    "model": reply.model,
                    "finish_reason": reply.finish_reason,
                    "usage": reply.usage,
                    "latency_s": round(reply.latency_s, 3),
                    "attempts": reply.attempts,
                },
                "code_path": code_path,
                "verdict": verdict,
                "success": success,
                "feedback": None
                if success or last_turn
                else feedback_message(verdict, self.settings.require_speedup),
            }
        )
        self.records.keep_if_best(task.id, event)
        return event

    def _resume_state(
        self, task: ProblemTask, sample: int, start_message: str | None
    ) -> tuple[list[dict], int]:
        """The conversation to continue and the next turn number (past the last turn: the sample is done)."""
        done = self.records.turns(task.id, sample)
        if not done:
            prompt = build_prompt(
                task.source, include_example=self.settings.include_example, hardware=self.settings.hardware
            )
            if start_message:
                prompt = f"{prompt}\n{start_message}\n"
            return [{"role": "user", "content": prompt}], 1
        last = done[-1]
        if last["success"] or last["turn"] >= self.settings.turns:
            return [], self.settings.turns + 1
        # A resumed run may allow more turns than the one that recorded this sample: feedback is derived then.
        feedback = last.get("feedback") or feedback_message(last["verdict"], self.settings.require_speedup)
        messages = last["request"]["messages"] + [
            {"role": "assistant", "content": last["response"]["text"]},
            {"role": "user", "content": feedback},
        ]
        return messages, last["turn"] + 1

    # ---------------------------------------------------------------------------------------- starting point

    def _start_message(self, task: ProblemTask) -> str | None:
        """With `--start-from kernelwright`: the compiler's ModelNew, judged once (and recorded, so a resumed
        run reuses it); it competes for the best candidate like any answer."""
        if self.starting_point is None:
            return None
        event = self.records.start_event(task.id)
        if event is None or event.get("error"):
            event = self._compile_start(task)
        if event.get("code_path") is None:
            return None
        code = (self.records.out_dir / event["code_path"]).read_text()
        return starting_point_message(code, event["verdict"])

    def _compile_start(self, task: ProblemTask) -> dict:
        relative = Path("attempts") / task.id / "kernelwright.py"
        try:
            self.starting_point(task.path, self.records.out_dir / relative)
        except StartingPointError as exc:
            self.observer.note(f"{task.id}: no starting point from kernelwright: {exc}")
            return self.records.append(
                {"event": "start", "problem": task.id, "code_path": None, "verdict": None, "error": str(exc)}
            )
        verdict = self.judge(task.path, self.records.out_dir / relative)
        event = self.records.append(
            {"event": "start", "problem": task.id, "code_path": str(relative), "verdict": verdict}
        )
        self.records.keep_if_best(task.id, event)
        return event
