"""Feedback messages: each verdict becomes a message carrying what the model needs to fix it."""

from __future__ import annotations

from kernelwright.llm.feedback import MAX_DETAIL_LINES, feedback_message, is_success, no_code_verdict


def test_build_error_quotes_the_compiler():
    detail = "main.cpp:12:5: error: 'softmax_cuda' was not declared in this scope"
    message = feedback_message({"status": "build_error", "detail": detail}, require_speedup=True)
    assert message.startswith("Your code did not build")
    assert f"```\n{detail}\n```" in message and "```python" in message


def test_long_details_are_trimmed():
    detail = "\n".join(f"error {i}" for i in range(500))
    message = feedback_message({"status": "build_error", "detail": detail}, require_speedup=True)
    assert "error 0" in message and f"error {MAX_DETAIL_LINES}" not in message and "more lines" in message


def test_mismatch_structured_detail_and_timing():
    verdict = {
        "status": "mismatch",
        "detail": {"max_abs_error": 0.25, "where": [1, 2]},
        "timings": {
            "candidate": {"median_ms": 2.0}, "eager": {"median_ms": 3.0}, "compile": {"median_ms": 1.5},
        },
    }
    message = feedback_message(verdict, require_speedup=True)
    assert '"max_abs_error": 0.25' in message
    assert "yours 2.000 ms, eager PyTorch 3.000 ms (1.50x vs eager), torch.compile 1.500 ms" in message


def test_correct_but_slow_and_pytorch_only():
    verdict = {"status": "correct", "speedup_vs_eager": 0.5, "flags": {"no_custom_kernel": True},
               "timings": {"candidate": {"median_ms": 2.0}, "eager": {"median_ms": 1.0}}}
    message = feedback_message(verdict, require_speedup=True)
    assert "not faster than eager" in message and "(0.50x vs eager)" in message
    assert "only PyTorch operators" in message


def test_success_rules():
    fast = {"status": "correct", "speedup_vs_eager": 1.3}
    slow = {"status": "correct", "speedup_vs_eager": 0.9}
    untimed = {"status": "correct"}
    assert is_success(fast, True) and not is_success(slow, True) and not is_success(untimed, True)
    assert is_success(slow, False) and is_success(untimed, False)
    assert not is_success({"status": "mismatch", "speedup_vs_eager": 9.0}, False)
    assert not is_success(no_code_verdict(), False)
