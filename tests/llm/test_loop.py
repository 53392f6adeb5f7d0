"""The generate loop over real HTTP (the loopback replay server) with a fake judge: feedback, stop on success,
records, best candidate, resume, parallel samples, the starting point, and endpoint failures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelwright.llm.client import ChatClient, EndpointError, RetryPolicy
from kernelwright.llm.loop import GenerationLoop, LoopObserver, LoopSettings, ProblemTask
from kernelwright.llm.records import RunRecords

BUILD_ERROR = 'kernel.cu(42): error: a value of type "const float *" cannot be used to initialize "float *"'

PROBLEM_A = "class Model:  # problem A\n"
PROBLEM_B = "class Model:  # problem B\n"


def answer(tag: str) -> str:
    """A model's answer: prose around one fenced ModelNew whose body names the fake judge's verdict."""
    return f"Here is my answer.\n\n```python\nclass ModelNew:  # {tag}\n    pass\n```\n\nEnjoy."


def fake_extract(text: str) -> str | None:
    blocks = [b for b in re.findall(r"```(?:python)?\n(.*?)```", text, re.S) if "class ModelNew" in b]
    return blocks[-1] if blocks else None


def fake_judge(problem_path: Path, candidate_path: Path) -> dict:
    code = candidate_path.read_text()
    if "BROKEN" in code:
        return {"status": "build_error", "detail": BUILD_ERROR}
    if "WRONG" in code:
        return {"status": "mismatch", "detail": "max abs error 0.5 at index (3, 7), max rel error 0.9"}
    speedup = 0.8 if "SLOW" in code else 3.0 if "FASTEST" in code else 2.0
    timings = {"candidate": {"median_ms": 1.0 / speedup}, "eager": {"median_ms": 1.0}}
    return {"status": "correct", "detail": "", "speedup_vs_eager": speedup, "timings": timings}


def make_tasks(tmp_path: Path, *names: str) -> list[ProblemTask]:
    sources = {"level1/1_A": PROBLEM_A, "level1/2_B": PROBLEM_B}
    tasks = []
    for name in names:
        path = tmp_path / "problems" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(sources[name])
        tasks.append(ProblemTask(id=name, path=path, source=sources[name]))
    return tasks


def make_loop(server, out: Path, observer=None, starting_point=None, model=None, **settings):
    client = ChatClient(model=model or server.model, base_url=server.base_url, api_key="sk-test-secret",
                        retry=RetryPolicy(retries=2, base_delay_s=0.0))
    options = {"samples": 1, "turns": 3, "parallel": 2, **settings}
    return GenerationLoop(client, fake_judge, fake_extract, RunRecords(out), LoopSettings(**options),
                          observer=observer, starting_point=starting_point)


def turn_events(out: Path) -> list[dict]:
    lines = (out / "records.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "turn"]


def test_broken_then_fixed_feeds_back_the_error_and_stops_on_success(replay_server, tmp_path):
    replay_server.answers = {"problem A": [answer("BROKEN"), answer("fixed"), answer("never asked")]}
    out = tmp_path / "run"
    summary = make_loop(replay_server, out).run(make_tasks(tmp_path, "level1/1_A"))

    requests = replay_server.requests
    assert len(requests) == 2, "the loop must stop at the first success"
    feedback = requests[1]["messages"][-1]
    assert feedback["role"] == "user" and BUILD_ERROR in feedback["content"]
    assert requests[1]["messages"][-2] == {"role": "assistant", "content": answer("BROKEN")}

    events = turn_events(out)
    assert [e["verdict"]["status"] for e in events] == ["build_error", "correct"]
    assert [e["success"] for e in events] == [False, True]
    assert events[0]["feedback"] == feedback["content"]
    assert (out / events[1]["code_path"]).read_text() == fake_extract(answer("fixed"))
    assert (out / "candidates/level1/1_A.py").read_text() == fake_extract(answer("fixed"))
    best = summary["problems"]["level1/1_A"]["best"]
    assert best["speedup_vs_eager"] == 2.0 and best["source"] == "sample 1 turn 2"
    assert summary["usage"] == {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}


def test_api_key_reaches_the_server_but_never_the_records(replay_server, tmp_path):
    replay_server.answers = {"problem A": [answer("ok")]}
    out = tmp_path / "run"
    make_loop(replay_server, out).run(make_tasks(tmp_path, "level1/1_A"))
    assert replay_server.authorizations == ["Bearer sk-test-secret"]
    for path in out.rglob("*"):
        if path.is_file():
            assert "sk-test-secret" not in path.read_text()


def test_correct_but_slow_gets_timing_feedback_and_best_is_kept(replay_server, tmp_path):
    replay_server.answers = {"problem A": [answer("FASTEST but WRONG"), answer("SLOW"), answer("SLOW again")]}
    out = tmp_path / "run"
    summary = make_loop(replay_server, out).run(make_tasks(tmp_path, "level1/1_A"))
    assert len(replay_server.requests) == 3
    slow_feedback = replay_server.requests[2]["messages"][-1]["content"]
    assert "not faster than eager" in slow_feedback
    assert "yours 1.250 ms, eager PyTorch 1.000 ms (0.80x vs eager)" in slow_feedback
    mismatch_feedback = replay_server.requests[1]["messages"][-1]["content"]
    assert "max abs error 0.5 at index (3, 7)" in mismatch_feedback
    # Correct but slower than eager is still the best correct candidate: kept, and the first of equals wins.
    assert summary["problems"]["level1/1_A"]["best"]["source"] == "sample 1 turn 2"
    assert turn_events(out)[-1]["feedback"] is None, "no feedback after the last turn"


def test_answer_without_code_is_rejected_and_told_so(replay_server, tmp_path):
    replay_server.answers = {"problem A": ["I think you should use CUDA.", answer("ok")]}
    out = tmp_path / "run"
    make_loop(replay_server, out).run(make_tasks(tmp_path, "level1/1_A"))
    events = turn_events(out)
    assert events[0]["verdict"]["status"] == "rejected" and events[0]["code_path"] is None
    assert "no fenced" in replay_server.requests[1]["messages"][-1]["content"]
    assert events[1]["success"]


def test_rerun_resumes_without_repeating_finished_work(replay_server, tmp_path):
    replay_server.answers = {"problem A": [answer("BROKEN"), answer("ok")], "problem B": [answer("WRONG")]}
    out = tmp_path / "run"
    tasks = make_tasks(tmp_path, "level1/1_A", "level1/2_B")
    make_loop(replay_server, out, turns=2).run(tasks)
    assert len(replay_server.requests) == 4

    make_loop(replay_server, out, turns=2).run(tasks)
    assert len(replay_server.requests) == 4, "finished samples are not asked again"

    # More samples: only the new ones run. More turns: B's unfinished sample continues where it stopped.
    summary = make_loop(replay_server, out, turns=3, samples=2).run(tasks)
    new = replay_server.requests[4:]
    assert len(new) == 2 + 3 + 1  # A sample 2 (2 turns), B sample 2 (3 turns), B sample 1 turn 3
    b_sample_1 = [e for e in turn_events(out) if e["problem"] == "level1/2_B" and e["sample"] == 1]
    assert [e["turn"] for e in b_sample_1] == [1, 2, 3]
    continued = b_sample_1[-1]["request"]["messages"]
    assert continued[:3] == b_sample_1[1]["request"]["messages"]
    assert "max abs error" in continued[-1]["content"]
    assert summary["problems"]["level1/2_B"]["verdicts"] == {"mismatch": 6}
    assert summary["problems"]["level1/2_B"]["best"] is None


def test_killed_run_resumes_mid_sample(replay_server, tmp_path):
    replay_server.answers = {"problem A": [answer("BROKEN"), answer("ok")]}
    out = tmp_path / "run"
    tasks = make_tasks(tmp_path, "level1/1_A")
    make_loop(replay_server, out, turns=1).run(tasks)
    # A run killed while writing leaves a partial last line; it is ignored and the turn redone.
    with (out / "records.jsonl").open("a") as handle:
        handle.write('{"event": "turn", "problem": "level1/1_A", "sam')
    make_loop(replay_server, out, turns=2).run(tasks)
    resumed = replay_server.requests[1]
    assert resumed["messages"][-2]["content"] == answer("BROKEN")
    assert BUILD_ERROR in resumed["messages"][-1]["content"]
    assert [e["turn"] for e in turn_events(out)] == [1, 2]


def test_parallel_samples_of_several_problems(replay_server, tmp_path):
    replay_server.answers = {"problem A": [answer("WRONG"), answer("ok")], "problem B": [answer("ok")]}
    seen = []

    class Recorder(LoopObserver):
        def turn_stage(self, problem_id, sample, turn, stage):
            seen.append((problem_id, sample, turn, stage))

    out = tmp_path / "run"
    summary = make_loop(replay_server, out, observer=Recorder(), samples=3, parallel=4).run(
        make_tasks(tmp_path, "level1/1_A", "level1/2_B"))
    assert len(replay_server.requests) == 3 * 2 + 3
    assert summary["problems"]["level1/1_A"]["successful_samples"] == [1, 2, 3]
    assert ("level1/1_A", 3, 2, "judging") in seen
    assert (out / "candidates/level1/2_B.py").is_file()


def test_start_from_compiler_output(replay_server, tmp_path):
    compiled = "class ModelNew:  # from kernelwright, SLOW\n    pass\n"
    calls = []

    def fake_optimize(problem_path: Path, out_file: Path) -> str:
        calls.append(problem_path)
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(compiled)
        return compiled

    replay_server.answers = {"problem A": [answer("FASTEST")]}
    out = tmp_path / "run"
    tasks = make_tasks(tmp_path, "level1/1_A")
    summary = make_loop(replay_server, out, starting_point=fake_optimize, samples=2).run(tasks)
    prompt = replay_server.requests[0]["messages"][0]["content"]
    assert compiled.strip() in prompt and "0.80x vs eager" in prompt
    assert summary["problems"]["level1/1_A"]["best"]["speedup_vs_eager"] == 3.0

    make_loop(replay_server, out, starting_point=fake_optimize, samples=2).run(tasks)
    assert len(calls) == 1, "the judged starting point is reused on resume"


def test_compiler_output_wins_when_the_model_does_worse(replay_server, tmp_path):
    def fake_optimize(problem_path: Path, out_file: Path) -> str:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text("class ModelNew:  # from kernelwright\n")
        return out_file.read_text()

    replay_server.answers = {"problem A": [answer("SLOW")]}
    out = tmp_path / "run"
    summary = make_loop(replay_server, out, starting_point=fake_optimize, turns=1).run(
        make_tasks(tmp_path, "level1/1_A"))
    assert summary["problems"]["level1/1_A"]["best"]["source"] == "kernelwright"
    assert "from kernelwright" in (out / "candidates/level1/1_A.py").read_text()


def test_unknown_model_stops_the_run_with_a_clear_error(replay_server, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(EndpointError, match="unknown model 'gpt-nope'"):
        make_loop(replay_server, out, model="gpt-nope", samples=4).run(make_tasks(tmp_path, "level1/1_A"))
    assert len(replay_server.requests) <= 2, "the other samples stop instead of failing one by one"
