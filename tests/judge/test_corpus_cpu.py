"""The hostile corpus (tests/judge_corpus/candidates) on the CPU: every defence that needs no GPU, with the
verdict each candidate must get. GPU-only hacks are in test_gpu.py."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from corpus import CANDIDATES, CPU_OPTIONS, PROBLEMS

from kernelwright.judge import Judge

# candidate file -> (problem, allowed statuses, flags that must hold, text the detail must contain)
EXPECTED = {
    "correct_gelu.py": ("gelu", {"correct"}, {"no_custom_kernel": True, "precision": "fp32"}, ""),
    "cache_by_shape.py": ("gelu", {"mismatch"}, {}, "trial 1"),
    "cache_by_address.py": ("gelu", {"mismatch"}, {}, "trial 1"),
    "mutate_input.py": ("gelu", {"rejected"}, {}, "modified input 0 in place"),
    "alias_input.py": ("relu", {"rejected"}, {}, "shares memory with input 0"),
    "background_thread.py": ("gelu", {"rejected"}, {}, "changed after forward returned"),
    "patch_timer.py": ("gelu", {"rejected"}, {}, "monkeypatched time.perf_counter"),
    "patch_cuda_timing.py": ("gelu", {"rejected"}, {}, "monkeypatched torch.cuda.synchronize"),
    "patch_allclose.py": ("gelu", {"rejected"}, {}, "monkeypatched torch.allclose"),
    "tf32_flags.py": ("gelu", {"correct"}, {"precision": "downcast"}, ""),
    "read_problem.py": ("gelu", {"rejected"}, {}, "another process"),
    "import_reference.py": ("gelu", {"rejected"}, {}, "uses kernelwright"),
    "tensor_subclass.py": ("gelu", {"rejected"}, {}, "tensor subclass"),
    "lazy_output.py": ("gelu", {"rejected"}, {}, "not a tensor"),
    "empty_output.py": ("gelu", {"nan", "mismatch"}, {}, ""),
    "silent_fallback.py": ("gelu", {"correct"}, {"fallback_detected": True}, ""),
    "nondeterministic.py": ("gelu", {"correct"}, {"nondeterministic": True}, ""),
    "contiguous_only.py": ("gelu", {"mismatch"}, {}, "noncontiguous"),
    "unit_range_only.py": ("gelu", {"mismatch"}, {}, "scale1000"),
    "wrong_shape.py": ("gelu", {"wrong_shape"}, {}, "expected shape (32, 48)"),
    "wrong_dtype.py": ("gelu", {"wrong_dtype"}, {}, "torch.float64"),
    "nan_output.py": ("gelu", {"nan"}, {}, "(0, 0)"),
    "raises.py": ("gelu", {"runtime_error"}, {}, "candidate line"),
    "segfault.py": ("gelu", {"runtime_error"}, {}, "SIGSEGV"),
    "oom.py": ("gelu", {"oom"}, {}, ""),
    "bn_no_running_stats.py": ("batchnorm_train", {"mismatch"}, {}, "buffer bn."),
    "bn_correct.py": ("batchnorm_train", {"correct"}, {}, ""),
    "syntax_error.md": ("gelu", {"build_error"}, {}, "candidate.py:5"),
    "no_code_block.md": ("gelu", {"rejected"}, {}, "no fenced code block"),
    "no_modelnew.md": ("gelu", {"rejected"}, {}, "do not define class ModelNew"),
}


@pytest.fixture(scope="module")
def corpus_verdicts():
    """All verdicts, judged two at a time (each judgement is mostly a fresh interpreter importing torch;
    CI has two cores). Each thread has its own Judge per problem: a Judge serves one candidate at a time."""
    local = threading.local()
    judges = []
    lock = threading.Lock()

    def judge(name: str) -> dict:
        problem = EXPECTED[name][0]
        mine = local.__dict__.setdefault("judges", {})
        if problem not in mine:
            mine[problem] = Judge(PROBLEMS / f"{problem}.py", CPU_OPTIONS)
            with lock:
                judges.append(mine[problem])
        return mine[problem].evaluate(CANDIDATES / name)

    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = dict(zip(sorted(EXPECTED), pool.map(judge, sorted(EXPECTED)), strict=True))
    for j in judges:
        j.close()
    return verdicts


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_verdict(name, corpus_verdicts):
    problem, statuses, flags, detail = EXPECTED[name]
    verdict = corpus_verdicts[name]
    assert verdict["status"] in statuses, verdict["detail"]
    for flag, value in flags.items():
        assert verdict["flags"][flag] == value, (flag, verdict["flags"])
    assert detail in verdict["detail"]


def test_hang_times_out_and_is_killed(cpu_judges):
    judge = cpu_judges("gelu", replace(CPU_OPTIONS, run_timeout_s=3.0))
    verdict = judge.evaluate(CANDIDATES / "hang.py")
    assert verdict["status"] == "timeout"
    assert "3 s" in verdict["detail"]


def test_every_corpus_file_has_an_expectation():
    files = {p.name for p in CANDIDATES.iterdir() if p.suffix in (".py", ".md")}
    assert files == set(EXPECTED) | {"hang.py"}


def test_correct_verdict_is_complete(corpus_verdicts):
    verdict = corpus_verdicts["correct_gelu.py"]
    assert len(verdict["trials"]) == 9  # 5 seeds + x1000, all-negative, tiny, non-contiguous
    assert {t["distribution"] for t in verdict["trials"]} == {
        "normal", "scale1000", "all_negative", "tiny", "noncontiguous"}
    assert all(t["status"] == "correct" and t["max_abs_err"] < 1e-5 for t in verdict["trials"])
    for name in ("candidate", "eager"):
        stats = verdict["timings"][name]
        assert stats["median_ms"] > 0 and stats["n"] >= 3 and stats["iqr_ms"] >= 0
    assert verdict["timings"]["compile"] is None
    assert verdict["speedup_vs_eager"] > 0
    assert verdict["seeds"]["model"] == 42 and len(verdict["seeds"]["inputs"]) == 9
    assert verdict["env"]["torch"]
    assert any(w["check"] == "pytorch_ops" for w in verdict["warnings"])
