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
    "ln_ignores_affine.py": ("layernorm", {"mismatch"}, {}, "(perturbed_params"),
    "ln_stale_cache.py": ("layernorm", {"mismatch"}, {}, "(perturbed_params"),
    "ln_renamed_param.py": ("layernorm", {"rejected"}, {}, "missing norm.weight, norm.bias; unexp"),
    "ln_version_cache.py": ("layernorm", {"correct"}, {}, ""),
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
    assert len(verdict["trials"]) == 10  # 5 seeds + x1000, all-negative, tiny, non-contiguous + perturbed
    assert [t["distribution"] for t in verdict["trials"]] == [
        "normal"] * 5 + ["scale1000", "all_negative", "tiny", "noncontiguous", "perturbed_params"]
    *run, perturbed = verdict["trials"]
    assert all(t["status"] == "correct" and t["max_abs_err"] < 1e-5 for t in run)
    # GELU has no parameters: nothing to perturb.
    assert perturbed["status"] == "skipped" and "no floating-point parameters" in perturbed["detail"]
    assert "1 skipped" in verdict["detail"]
    for name in ("candidate", "eager"):
        stats = verdict["timings"][name]
        assert stats["median_ms"] > 0 and stats["n"] >= 3 and stats["iqr_ms"] >= 0
    assert verdict["timings"]["compile"] is None
    assert verdict["speedup_vs_eager"] > 0
    assert verdict["seeds"]["model"] == 42 and len(verdict["seeds"]["inputs"]) == 10
    assert verdict["env"]["torch"]
    assert any(w["check"] == "pytorch_ops" for w in verdict["warnings"])


@pytest.mark.parametrize("name", ["bn_correct.py", "ln_version_cache.py"])
def test_perturbed_params_trial_runs_for_models_with_parameters(name, corpus_verdicts):
    verdict = corpus_verdicts[name]
    perturbed = verdict["trials"][-1]
    assert perturbed["distribution"] == "perturbed_params" and perturbed["status"] == "correct"
    assert perturbed["max_abs_err"] < 1e-4
    assert verdict["timings"]["candidate"]["n"] >= 3


def test_perturbed_params_can_be_disabled(cpu_judges):
    judge = cpu_judges("layernorm", replace(CPU_OPTIONS, perturb_params=False, timing=False))
    verdict = judge.evaluate(CANDIDATES / "ln_ignores_affine.py")
    assert verdict["status"] == "correct", verdict["detail"]
    assert "perturbed_params" not in {t["distribution"] for t in verdict["trials"]}
