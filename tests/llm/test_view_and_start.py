"""The live view; `--start-from kernelwright`: a failure costs only the starting point, and (GPU) the
compiler's ModelNew is put in the prompt and kept when the model does no better."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from test_loop import answer, make_loop, make_tasks

from kernelwright.llm.start import StartingPointError
from kernelwright.llm.view import LiveView


def test_live_view_shows_progress_verdicts_and_best(replay_server, tmp_path):
    replay_server.answers = {"problem A": [answer("BROKEN"), answer("FASTEST")]}
    out = tmp_path / "run"
    tasks = make_tasks(tmp_path, "level1/1_A", "level1/2_B")
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=False)
    loop = make_loop(replay_server, out, turns=2)
    view = LiveView(tasks, loop.records, loop.settings, console=console)
    loop.observer = view
    with view:
        view.note("HTTP 429: retrying in 1.0 s")
        loop.run(tasks)
    console.print(view.render())
    text = buffer.getvalue()
    assert "level1/1_A" in text and "build_error 1 correct 1" in text
    assert "3.00x (sample 1 turn 2)" in text
    assert "1/1" in text and "HTTP 429: retrying" in text
    assert "tokens: 400 prompt + 40 completion" in text


def test_failed_starting_point_is_noted_and_the_run_goes_on(replay_server, tmp_path):
    notes = []

    def broken_optimize(problem_path: Path, out_file: Path) -> str:
        raise StartingPointError(f"{problem_path}: kernelwright optimize failed (exit 3): boom")

    replay_server.answers = {"problem A": [answer("ok")]}
    loop = make_loop(replay_server, tmp_path / "run", starting_point=broken_optimize)
    loop.observer.note = notes.append
    summary = loop.run(make_tasks(tmp_path, "level1/1_A"))
    assert "boom" in notes[0]
    assert "automatic compiler" not in replay_server.requests[0]["messages"][0]["content"]
    assert summary["problems"]["level1/1_A"]["best"]["source"] == "sample 1 turn 1"



@pytest.mark.gpu
def test_start_from_kernelwright_on_the_gpu(replay_server, tmp_path):
    replay_server.answers = {"": ["I cannot improve on that."]}  # "" is in every prompt
    out = tmp_path / "run"
    command = [sys.executable, "-m", "kernelwright.cli", "generate", "level1/01_ReLU", "--turns", "1",
               "--start-from", "kernelwright", "--model", replay_server.model,
               "--base-url", replay_server.base_url, "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    print(result.stdout[-4000:], result.stderr[-4000:])
    assert result.returncode == 0, "the compiler's ModelNew is a correct candidate"
    prompt = replay_server.requests[0]["messages"][0]["content"]
    assert "An automatic compiler already produced" in prompt and "class ModelNew" in prompt
    summary = json.loads((out / "summary.json").read_text())["problems"]["level1/01_ReLU"]
    assert summary["best"]["source"] == "kernelwright"
    kept = (out / "candidates/level1/01_ReLU.py").read_text()
    assert kept == (out / summary["best"]["code_path"]).read_text()
