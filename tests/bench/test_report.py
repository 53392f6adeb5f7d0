"""report.md / report.json / plots rendered from results.jsonl, checked against the rows themselves,
and `report --compare`."""

from __future__ import annotations

import json
import math
import re

import pytest
from conftest import TINY_SUITE, FakeExecutor, FakeJudge, make_answers, make_tiny_suite

from kernelwright.bench.compare import render_comparison
from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.plots import write_plots
from kernelwright.bench.report import fmt_fraction, fmt_ms, fmt_speedup, write_report
from kernelwright.bench.rows import finish
from kernelwright.bench.runner import BenchConfig, run_bench
from kernelwright.bench.store import ResultsStore
from kernelwright.bench.summary import fast_p, geomean
from kernelwright.cli import main


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultsStore:
    """One fake bench (eager, compile and a candidates folder on the tiny suite), rendered once."""
    root = tmp_path_factory.mktemp("bench")
    suite, answers = make_tiny_suite(root / "suite"), make_answers(root / "answers")
    config = BenchConfig(suite=str(suite), systems=f"eager,compile,{answers}", device="cpu",
                         out=str(root / "out"))
    store = run_bench(config, execute=FakeExecutor()).store
    write_report(store)
    return store


def fake_results(directory, scale: float) -> ResultsStore:
    """A results folder with the fake executor's rows for eager and the answers, without rendering."""
    store, executor = ResultsStore(directory), FakeExecutor(scale)
    for problem_id in TINY_SUITE:
        runs = (SystemRun("eager", "reference"), SystemRun("answers", "candidates", "c.py"))
        task = BenchTask(problem_id, f"{problem_id}.py", "1", "activation", runs)
        store.append([finish(row, "GPU-A", "0", 1.0) for row in executor(task, None)])
    return store


def markdown_table(text: str, first_header: str) -> list[dict]:
    """The rows of the Markdown table whose first column is `first_header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True)))
    return rows


def test_markdown_numbers_equal_the_jsonl(store):
    markdown = (store.directory / "report.md").read_text()
    rows = [json.loads(line) for line in store.results_path.read_text().splitlines()]

    table = {(r["problem"], r["system"]): r for r in markdown_table(markdown, "problem")}
    assert len(table) == len(rows) == 9
    compile_ms = {r["problem"]: r["time_ms"] for r in rows if r["system"] == "compile"}
    for row in rows:
        cells = table[(row["problem"], row["system"])]
        assert cells["verdict"] == row["status"]
        assert cells["time ms"] == fmt_ms(row["time_ms"])
        assert cells["eager ms"] == fmt_ms(row["eager_ms"])
        assert cells["×eager"] == fmt_speedup(row["speedup_vs_eager"])
        if row["system"] == "answers" and row["status"] == "correct":
            # judged without its own torch.compile timing: vs compile comes from the compile row
            assert cells["×compile"] == fmt_speedup(compile_ms[row["problem"]] / row["time_ms"])

    summary = {r["system"]: r for r in markdown_table(markdown, "system")}
    for system in ("eager", "compile", "answers"):
        mine = [r for r in rows if r["system"] == system]
        correct = [r for r in mine if r["status"] == "correct"]
        assert summary[system]["problems"] == "3"
        assert summary[system]["correct"] == str(len(correct))
        expected = math.exp(sum(math.log(r["speedup_vs_eager"]) for r in correct) / len(correct))
        assert summary[system]["geomean ×eager"] == fmt_speedup(expected)
        for p in (0, 1, 1.5, 2):
            hits = sum(1 for r in correct if p == 0 or r["speedup_vs_eager"] > p)
            assert summary[system][f"fast_{p:g}"] == fmt_fraction(hits / 3)
    # the fake candidate is 2x eager and 1.6x compile on the one problem it gets right
    assert summary["answers"]["fast_1.5"] == "33%" and summary["answers"]["fast_2"] == "0%"
    assert summary["answers"]["geomean ×compile"] == "1.60×"

    levels = markdown_table(markdown, "level")
    categories = {(r["category"], r["system"]): r for r in markdown_table(markdown, "category")}
    assert {r["level"] for r in levels} == {"level 1"}
    assert categories[("softmax", "answers")]["correct"] == "0"
    assert categories[("activation", "answers")]["problems"] == "2"
    for header in ("| date |", "| device |", "| torch |", "| kernelwright |", "| CUDA |", "| driver |"):
        assert header in markdown


class BusyJudge(FakeJudge):
    """The fake judge with the GPU busy share in its verdicts, as the judge measures it on CUDA."""

    def reference_report(self) -> dict:
        return {**super().reference_report(), "launch_bound": {"eager_gpu_busy_share": 0.25}}

    def evaluate(self, candidate: str) -> dict:
        verdict = super().evaluate(candidate)
        if verdict["status"] == "correct":
            verdict["launch_bound"] = {"eager_gpu_busy_share": 0.25, "candidate_gpu_busy_share": 0.8}
        return verdict


def test_gpu_busy_share_is_a_column_only_where_measured(store, tmp_path):
    assert "GPU busy" not in (store.directory / "report.md").read_text()   # the judge measured none

    suite, answers = make_tiny_suite(tmp_path / "suite"), make_answers(tmp_path / "answers")
    config = BenchConfig(suite=str(suite), systems=f"eager,compile,{answers}", device="cpu",
                         out=str(tmp_path / "out"))
    busy = run_bench(config, execute=FakeExecutor(judge=BusyJudge)).store
    write_report(busy)
    rows = {(r["problem"], r["system"]): r for r in busy.rows()}
    assert rows[("level1/01_ReLU", "eager")]["gpu_busy_share"] == 0.25
    assert rows[("level1/01_ReLU", "compile")]["gpu_busy_share"] is None   # not measured for torch.compile
    assert rows[("level1/01_ReLU", "answers")]["gpu_busy_share"] == 0.8
    assert rows[("level1/01_ReLU", "answers")]["eager_gpu_busy_share"] == 0.25
    markdown = (busy.directory / "report.md").read_text()
    assert "a low share means launch-bound" in markdown
    cells = {(r["problem"], r["system"]): r["GPU busy"] for r in markdown_table(markdown, "problem")}
    assert cells[("level1/01_ReLU", "eager")] == "25%" and cells[("level1/01_ReLU", "answers")] == "80%"
    assert cells[("level1/01_ReLU", "compile")] == "-" and cells[("level1/06_Sigmoid", "answers")] == "-"


def test_report_json_and_plots(store):
    report = json.loads((store.directory / "report.json").read_text())
    overall = report["summary"][0]["overall"]["all"]
    assert overall["answers"]["correct"] == 1 and overall["compile"]["geomean_vs_eager"] == 1.25
    assert len(report["rows"]) == 9 and "verdict" not in report["rows"][0]
    assert report["runs"][0]["environment"]["torch"]
    for name in ("speedup.png", "fast_p.png", "compile_time.png"):
        data = (store.directory / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000
        assert f"]({name})" in (store.directory / "report.md").read_text()


def test_metrics():
    assert geomean([2.0, 8.0]) == 4.0 and geomean([]) is None
    rows = [{"status": "correct", "speedup_vs_eager": 1.2}, {"status": "correct", "speedup_vs_eager": 0.9},
            {"status": "mismatch", "speedup_vs_eager": None}]
    assert fast_p(rows, 4, 0) == 0.5 and fast_p(rows, 4, 1) == 0.25 and fast_p(rows, 4, 1.5) == 0


def test_report_rerenders_and_compares(tmp_path, capsys):
    old = fake_results(tmp_path / "old", scale=0.5)
    new = fake_results(tmp_path / "new", scale=0.25)
    assert main(["report", str(new.directory)]) == 0
    assert (new.directory / "report.md").is_file()
    assert "bench summary" in capsys.readouterr().out

    assert main(["report", str(new.directory), "--compare", str(old.directory), "-o",
                 str(tmp_path / "delta.md")]) == 0
    text = capsys.readouterr().out
    assert text == (tmp_path / "delta.md").read_text()
    assert re.search(r"\| answers \| 2 → 2 \| 2\.00× → 4\.00× \|", text)
    assert "| level1/01_ReLU | answers | correct | 1 → 0.5 | 2.00× → 4.00× | 2.00× |" in text
    assert render_comparison(old.latest_rows(), old.latest_rows(), "a", "b").count("No verdict changed") == 1

    # the comparison file is not overwritten silently
    compare = ["report", str(new.directory), "--compare", str(old.directory), "-o",
               str(tmp_path / "delta.md")]
    (tmp_path / "delta.md").write_text("mine")
    assert main(compare) == 2 and (tmp_path / "delta.md").read_text() == "mine"
    assert "the file exists; add --force" in capsys.readouterr().err
    assert main([*compare, "--force"]) == 0 and (tmp_path / "delta.md").read_text() == text
    assert main([*compare[:-1], str(tmp_path / "missing" / "delta.md")]) == 2


def test_bench_output_dir_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    assert main(["bench", "--device", "cpu", "--output-dir", str(tmp_path / "taken")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_report_of_a_folder_without_results_is_a_usage_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "results.jsonl here" in " ".join(capsys.readouterr().err.split())


def test_plots_survive_degenerate_data(tmp_path):
    row = {"problem": "p", "system": "s", "device": "d", "status": "correct", "speedup_vs_eager": None,
           "speedup_vs_compile": None, "optimize_seconds": None, "build_seconds": 0.004}
    assert write_plots([row], tmp_path) == ["speedup.png", "fast_p.png", "compile_time.png"]


def test_a_heterogeneous_cluster_never_mixes_devices_in_a_speedup(tmp_path):
    """Rows from two GPU models (a Ray cluster of mixed nodes): each device gets its own summary, a
    candidate's speedup vs compile is never taken from another device's compile row, and --compare
    compares timings only on one device model."""
    store, executor = ResultsStore(tmp_path / "mixed"), FakeExecutor()
    placed = {"level1/01_ReLU": ("H100", "node-a"), "level1/06_Sigmoid": ("A100", "node-b")}
    for problem_id, (device, node) in placed.items():
        runs = (SystemRun("eager", "reference"), SystemRun("compile", "reference"),
                SystemRun("answers", "candidates", "c.py"))
        task = BenchTask(problem_id, f"{problem_id}.py", "1", "activation", runs, compile_baseline=False)
        store.append([finish(row, device, "0", 1.0) | {"node": node} for row in executor(task, None)])
    # Softmax's compile row on the H100, its candidate (judged without torch.compile) on the A100
    softmax = ("level1/23_Softmax", "level1/23_Softmax.py", "1", "softmax")
    compile_row, = executor(BenchTask(*softmax, (SystemRun("compile", "reference"),)), None)
    answers_row, = executor(BenchTask(*softmax, (SystemRun("answers", "candidates", "c.py"),),
                                      compile_baseline=False), None)
    store.append([finish(compile_row, "H100", "0", 1.0), finish(answers_row, "A100", "1", 1.0)])

    report = write_report(store)
    summaries = {s["device"]: s for s in report["summary"]}
    assert set(summaries) == {"A100", "H100"}
    assert summaries["A100"]["overall"]["all"]["answers"]["problems"] == 2   # Sigmoid and Softmax
    assert summaries["H100"]["overall"]["all"]["answers"]["correct"] == 1    # ReLU only
    rows = {r["system"]: r for r in report["rows"] if r["problem"] == "level1/23_Softmax"}
    assert rows["answers"]["speedup_vs_compile"] is None  # Softmax's only compile row ran on the H100
    markdown = (store.directory / "report.md").read_text()
    assert "## Summary on A100" in markdown and "## Summary on H100" in markdown

    old = ResultsStore(tmp_path / "old")
    before = {"device": "H100", "status": "correct", "speedup_vs_eager": 1.0}
    old.append([row | before for row in store.rows()])
    delta = render_comparison(store.latest_rows(), old.latest_rows(), "new", "old")
    assert "old has no rows on this device model" in delta
    # Sigmoid's verdict changed; its speedups (A100 now, H100 before) are not compared
    assert "| level1/06_Sigmoid | answers | correct → mismatch | - → - | 1.00× → - | other device |" in delta


def test_a_speedup_moves_when_it_leaves_its_rows_noise():
    """With spreads over the judge's rounds, a GPU-bound row's 6% gain is a change and a launch-bound
    row's 12% is not (±4% spreads each); without spreads the fixed 10% applies."""
    from kernelwright.bench.compare import noise

    def row(problem, speedup, spread):
        return {"problem": problem, "level": 1, "category": "c", "system": "kernelwright", "device": "H100",
                "status": "correct",
                "speedup_vs_eager": speedup, "speedup_spread": spread, "time_ms": 1.0}

    old = [row("gpu", 2.0, 0.001), row("launch", 2.0, 0.04), row("legacy", 2.0, None)]
    new = [row("gpu", 2.12, 0.001), row("launch", 2.24, 0.04), row("legacy", 2.16, None)]
    assert noise(new[0], old[0]) == 0.05 and noise(new[1], old[1]) == pytest.approx(0.16)
    assert noise(new[2], old[2]) == pytest.approx(0.10)
    delta = render_comparison(new, old, "new", "old")
    assert "| gpu | kernelwright |" in delta and "| launch | kernelwright |" not in delta
    assert "| legacy | kernelwright |" not in delta


def test_the_judge_time_section_sums_each_system_s_phases_and_waits():
    from kernelwright.bench.report import _judge_time_section

    profile = {"reference_s": 4.0, "build_s": 4.5, "trials_s": 20.0, "timing_s": 30.0,
               "timing_candidate_measure_s": 2.0, "timing_eager_measure_s": 2.5, "lock_wait_s": 25.0}
    rows = [{"system": "eager-copy", "seconds": 60.0, "judge_profile": profile},
            {"system": "eager-copy", "seconds": 40.0, "judge_profile": {**profile, "lock_wait_s": 5.0}},
            {"system": "eager", "seconds": 10.0, "judge_profile": None}]
    table = markdown_table("\n".join(_judge_time_section(rows)), "system")
    assert table == [{"system": "eager-copy", "rows": "2", "task s": "100", "reference s": "8",
                      "build s": "9", "trials s": "40", "timing s": "60", "timed series s": "9",
                      "waiting for other tasks s": "30"}]
    assert _judge_time_section(rows[2:]) == []


def test_the_outcome_section_shows_the_plans_of_files_behind_eager_or_compile():
    """Files behind torch.compile or eager, or fallen back whole, with what optimize made of them (their
    --profile's outcome), slowest against compile first; files ahead of both are left out."""
    from kernelwright.bench.report import _outcome_section

    def row(problem, eager, compile_, **outcome):
        outcome = {"layout": "nchw", "replay": False, "fallback": None, "kernels": {}, "dropped": [],
                   "notes": [], **outcome}
        return {"problem": problem, "system": "kernelwright", "speedup_vs_eager": eager,
                "speedup_vs_compile": compile_, "optimize_profile": {"outcome": outcome}}

    rows = [row("level1/01", 2.0, 1.5, kernels={"pointwise": 1}),
            row("level2/02", 1.6, 0.92, layout="channels_last", replay=True,
                kernels={"pointwise": 1, "reduction": 1}),
            row("level1/04", 0.98, 0.97, kernels={"pointwise": 1}, dropped=["kw_a: slower than ATen"]),
            row("level1/44", 1.0, 1.0, fallback="no kernel survived"),
            {"problem": "level1/01", "system": "eager", "speedup_vs_eager": 1.0, "speedup_vs_compile": 0.5}]
    table = markdown_table("\n".join(_outcome_section(rows)), "problem")
    assert [r["problem"] for r in table] == ["level2/02", "level1/04", "level1/44"]
    assert table[0]["layout"] == "channels_last" and table[0]["replay"] == "yes"
    assert table[0]["kernels"] == "1 pointwise, 1 reduction" and table[0]["fell back to ATen"] == "-"
    assert table[1]["fell back to ATen"] == "kw_a: slower than ATen"
    assert table[2]["kernels"] == "none"
    assert table[2]["fell back to ATen"] == "whole model: no kernel survived"
    assert _outcome_section(rows[:1]) == []
