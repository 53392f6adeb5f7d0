"""The A/A check (`eager-copy`: the reference judged as a candidate) and the crediting rule (a candidate
without a custom kernel counts as 1.00x eager, its measurement kept aside)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import TINY_SUITE, FakeExecutor, FakeJudge, make_tiny_suite
from test_report import markdown_table

from kernelwright.bench.plan import BenchTask, SystemRun
from kernelwright.bench.report import write_report
from kernelwright.bench.rows import candidate_row, reference_row
from kernelwright.bench.runner import BenchConfig, run_bench
from kernelwright.bench.store import ResultsStore
from kernelwright.bench.summary import with_derived_speedups
from kernelwright.cli import main

TASK = BenchTask("level1/01_ReLU", "relu.py", "1", "activation", ())
OURS = SystemRun("kernelwright", "kernelwright", "k.py")


def verdict(eager_ms: float, time_ms: float, compile_ms: float | None, custom: bool) -> dict:
    return {"status": "correct", "detail": "",
            "timings": {"candidate": {"median_ms": time_ms}, "eager": {"median_ms": eager_ms},
                        "compile": {"median_ms": compile_ms} if compile_ms else None},
            "speedup_vs_eager": eager_ms / time_ms,
            "speedup_vs_compile": compile_ms / time_ms if compile_ms else None,
            "flags": {"no_custom_kernel": not custom}}


def test_a_candidate_without_custom_kernels_is_credited_as_eager():
    fallback = candidate_row(TASK, OURS, verdict(1.32, 1.0, 0.66, False))
    assert fallback["credited"] is False
    assert fallback["speedup_vs_eager"] == 1.0 and fallback["speedup_vs_compile"] == pytest.approx(0.5)
    assert fallback["measured_speedup_vs_eager"] == pytest.approx(1.32)
    assert fallback["measured_speedup_vs_compile"] == pytest.approx(0.66)

    custom = candidate_row(TASK, SystemRun("answers", "candidates", "a.py"), verdict(1.32, 1.0, 0.66, True))
    assert custom["credited"] is True and custom["speedup_vs_eager"] == pytest.approx(1.32)
    copy = candidate_row(TASK, SystemRun("eager-copy", "copy", "c.py"), verdict(1.02, 1.0, 0.66, False))
    assert copy["credited"] is True and copy["speedup_vs_eager"] == pytest.approx(1.02)

    # judged without its own torch.compile timing: eager's ratio from the compile row, measured aside
    late = candidate_row(TASK, OURS, verdict(2.0, 1.0, None, False))
    compile_row = {"problem": TASK.problem_id, "device": None, "system": "compile", "status": "correct",
                   "time_ms": 1.0}
    derived = with_derived_speedups([compile_row, late])[1]
    assert derived["speedup_vs_compile"] == pytest.approx(0.5)
    assert derived["measured_speedup_vs_compile"] == pytest.approx(1.0)
    # the compile row's paired ratio to eager (1.6: eager 1.6x compile's time) bridges the row's own (2.0)
    paired = with_derived_speedups([{**compile_row, "speedup_vs_eager": 1.6}, late])[1]
    assert paired["speedup_vs_compile"] == pytest.approx(1 / 1.6)
    assert paired["measured_speedup_vs_compile"] == pytest.approx(2.0 / 1.6)


def test_reference_rows_take_the_paired_ratio_of_eager_to_compile():
    """The eager and compile rows' speedups are eager's ratio to compile paired by timing rounds where the
    reference report has it (each side's median of medians can come from different host episodes), else the
    ratio of the two medians."""
    report = {"status": "reference", "timings": {"eager": {"median_ms": 1.5}, "compile": {"median_ms": 1.0}},
              "eager_over_compile": 1.2}
    eager = reference_row(TASK, SystemRun("eager", "reference"), report)
    compiled = reference_row(TASK, SystemRun("compile", "reference"), report)
    assert eager["time_ms"] == 1.5 and eager["speedup_vs_eager"] == 1.0
    assert eager["speedup_vs_compile"] == pytest.approx(1 / 1.2)
    assert compiled["time_ms"] == 1.0 and compiled["speedup_vs_eager"] == 1.2
    assert compiled["speedup_vs_compile"] == 1.0
    unpaired = reference_row(TASK, SystemRun("compile", "reference"), {**report, "eager_over_compile": None})
    assert unpaired["speedup_vs_eager"] == 1.5
    alone = reference_row(TASK, SystemRun("eager", "reference"),
                          {"status": "reference", "timings": {"eager": {"median_ms": 1.5}, "compile": None}})
    assert alone["speedup_vs_eager"] == 1.0 and alone["speedup_vs_compile"] is None


def test_a_speedup_shows_its_spread_over_the_timing_rounds():
    from kernelwright.bench.report import _problem_table

    noisy = {**verdict(2.0, 1.0, 1.5, True), "speedup_vs_eager_spread": 0.04}
    steady = {**verdict(2.0, 1.0, 1.5, True), "speedup_vs_eager_spread": 0.002}
    rows = [{**candidate_row(TASK, OURS, v), "device": "gpu", "problem": name}
            for name, v in (("a", noisy), ("b", steady))]
    assert rows[0]["speedup_spread"] == 0.04
    table = "\n".join(_problem_table(rows))
    assert "±4%" in table and table.count("±") == 2   # the legend's and row a's
    fallback = {**candidate_row(TASK, OURS, {**noisy, "flags": {"no_custom_kernel": True}}), "device": "gpu"}
    assert "±" not in "\n".join(_problem_table([fallback]))   # 1.00x, not a measurement


def test_reduce_overhead_timing_reaches_the_row_and_the_report():
    """`bench --reduce-overhead`: the CUDA-graph torch.compile time and the speedup against it, per row."""
    timed = verdict(2.0, 0.5, 1.5, True)
    timed["timings"]["compile_reduce_overhead"] = {"median_ms": 0.25}
    timed.update(options={"reduce_overhead": True}, speedup_vs_compile_reduce_overhead=0.5)
    row = candidate_row(TASK, OURS, timed)
    assert row["compile_reduce_overhead_ms"] == 0.25 and row["speedup_vs_compile_reduce_overhead"] == 0.5
    fallback = verdict(2.0, 1.9, 1.5, False)
    fallback["timings"]["compile_reduce_overhead"] = {"median_ms": 0.25}
    fallback["options"] = {"reduce_overhead": True}
    assert candidate_row(TASK, OURS, fallback)["speedup_vs_compile_reduce_overhead"] == pytest.approx(0.125)
    plain = candidate_row(TASK, OURS, verdict(2.0, 0.5, 1.5, True))  # not asked for: no such fields
    assert "speedup_vs_compile_reduce_overhead" not in plain

    from kernelwright.bench.report import _problem_table
    row.update(device="gpu", category="activation")
    table = "\n".join(_problem_table([row]))
    assert "×reduce-overhead" in table and "0.50×" in table
    assert "reduce-overhead" not in "\n".join(_problem_table([{**plain, "device": "gpu", "category": "x"}]))


class NoKernelJudge(FakeJudge):
    """The ReLU candidate runs no custom kernel (a compiler's fallback to the Model)."""

    def evaluate(self, candidate: str) -> dict:
        verdict = super().evaluate(candidate)
        verdict["flags"] = {**verdict.get("flags", {}), "no_custom_kernel": self.problem_id.endswith("ReLU")}
        return verdict


def test_report_counts_uncredited_rows_as_one_and_marks_them(tiny_suite, answers, tmp_path):
    config = BenchConfig(suite=str(tiny_suite), systems=f"eager,compile,{answers}", device="cpu",
                         out=str(tmp_path / "out"))
    store = run_bench(config, execute=FakeExecutor(judge=NoKernelJudge)).store
    report = write_report(store)
    markdown = (store.directory / "report.md").read_text()
    relu = {(r["problem"], r["system"]): r for r in markdown_table(markdown, "problem")}[
        ("level1/01_ReLU", "answers")]
    assert relu["×eager"] == "1.00×†" and relu["×compile"] == "0.80×†"
    assert "not credited: measured 2.00×" in relu["note"]
    assert "Not credited (†): answers 1 of 1 correct" in markdown
    answers_score = report["summary"][0]["overall"]["all"]["answers"]
    assert answers_score["not_credited"] == 1 and answers_score["geomean_vs_eager"] == 1.0
    assert answers_score["fast_p"]["1"] == 0


class CopyJudge(FakeJudge):
    """The A/A candidate measured at a fixed ratio per problem."""

    ratios = {"level1/01_ReLU": 1.01, "level1/06_Sigmoid": 0.96, "level1/23_Softmax": 1.05}

    def evaluate(self, candidate: str) -> dict:
        timings = self._timings()
        ratio = self.ratios[self.problem_id]
        timings["candidate"] = {"median_ms": self.eager / ratio, "iqr_ms": 0.01, "n": 100}
        return {"status": "correct", "detail": "", "timings": timings, "speedup_vs_eager": ratio,
                "speedup_vs_compile": None, "flags": {"no_custom_kernel": True}}


def test_aa_check_section_and_the_copy_files(tiny_suite, tmp_path):
    config = BenchConfig(suite=str(tiny_suite), systems="eager,eager-copy", device="cpu",
                         out=str(tmp_path / "out"))
    store = run_bench(config, execute=FakeExecutor(judge=CopyJudge)).store
    report = write_report(store)
    (check,) = report["aa_check"]
    assert check["ratios"] == CopyJudge.ratios
    assert check["outside"] == ["level1/06_Sigmoid", "level1/23_Softmax"]
    assert check["worst"] == {"problem": "level1/23_Softmax", "ratio": 1.05}
    markdown = (store.directory / "report.md").read_text()
    assert "## A/A check (eager-copy: the reference judged as a candidate)" in markdown
    assert "3 problems timed, 1 within 1.00 ± 0.03, 2 outside; worst 1.05× (level1/23_Softmax)" in markdown
    table = {r["problem"]: r for r in markdown_table(markdown.split("## A/A check")[1], "problem")}
    assert table["level1/06_Sigmoid"]["ratio"] == "0.960" and table["level1/06_Sigmoid"]["within"] == "**no**"
    assert table["level1/01_ReLU"]["within"] == "yes"

    for problem_id in TINY_SUITE:
        path = store.candidates_dir() / "eager-copy" / f"{problem_id}.py"
        source, problem = path.read_text(), (tiny_suite / f"{problem_id}.py").read_text()
        added = source[len(problem.rstrip()):]
        assert source.startswith(problem.rstrip()) and "pass" not in added
        namespace: dict = {}
        exec(compile(source, str(path), "exec"), namespace)
        assert namespace["ModelNew"].__bases__ == (namespace["Model"],)


def test_aa_check_end_to_end_on_the_cpu(tmp_path):
    suite, out = make_tiny_suite(tmp_path / "suite"), tmp_path / "out"
    args = ["bench", str(suite), "--filter", "*ReLU", "--device", "cpu", "--shrink", "--systems",
            "eager,eager-copy", "--trials", "1", "--min-runs", "5", "--min-time", "0", "--out", str(out)]
    assert main(args) == 0
    rows = {r["system"]: r for r in ResultsStore(out).rows()}
    copy = rows["eager-copy"]
    assert copy["status"] == "correct", copy["detail"]
    assert copy["flags"]["no_custom_kernel"] is True and copy["credited"] is True
    # its eager time is its own, timed in rounds alternating with the copy's
    assert copy["speedup_vs_eager"] > 0 and copy["eager_ms"] > 0
    report = json.loads((out / "report.json").read_text())
    assert list(report["aa_check"][0]["ratios"]) == ["level1/01_ReLU"]
    assert re.search(r"On .*: 1 problems timed", (out / "report.md").read_text())
