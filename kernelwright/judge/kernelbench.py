"""KernelBench's static checker (`validate_kernel_static`, backend cuda, fp32), reimplemented from its
published rules, so that a person can see before submitting whether a leaderboard or a training pipeline
that applies them would reject a file. Nothing of KernelBench is vendored or imported.

How the published checker reads a file: every line is cut at its first `#` or `//` (comments in Python and
in the CUDA/C++ strings alike), then regexes run over what is left. Its strict set rejects the file; its
warning set only reports.

The strict rules quoted from its documentation: no `try:`, no `except:`, no `except <name>`, no word
`pass`; the file contains `__global__` and `load_inline` or `cpp_extension`; no thread, lazy-tensor-subclass
or timer-patching patterns. The exact regexes of those last three, and the whole warning set, are not
quoted there: the ones below (marked "ours") are our reimplementation of what the rule names describe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    check: str
    pattern: str          # over the comment-stripped text
    message: str
    published: bool       # the regex is KernelBench's as published; False: our reimplementation


# A match of any of these rejects the file.
FORBIDDEN: tuple[Rule, ...] = (
    Rule("try", r"\btry\s*:", "a try: block (read as a silent fallback to PyTorch)", True),
    Rule("bare_except", r"\bexcept\s*:", "a bare except: (read as a silent fallback)", True),
    Rule("except", r"\bexcept\s+\w+", "an except clause (read as a silent fallback)", True),
    Rule("pass", r"\bpass\b", "the word `pass` (read as an empty fallback)", True),
    Rule("threads", r"\bimport\s+threading\b|\bthreading\.\w|\bconcurrent\.futures\b|\bmultiprocessing\b|"
                    r"\bstd::thread\b|\bpthread_create\b",
         "threads or processes (work that escapes timing)", False),
    Rule("lazy_tensor", r"\b_make_subclass\b|\b_make_wrapper_subclass\b|__torch_dispatch__|"
                        r"__torch_function__|\bclass\s+\w+\s*\(\s*(torch\.)?Tensor\s*\)",
         "a tensor subclass (lazy results computed outside timing)", False),
    Rule("timer_patch", r"\b(time\.(time|perf_counter|perf_counter_ns|monotonic|process_time)|"
                        r"torch\.cuda\.(synchronize|Event|current_stream)|elapsed_time|"
                        r"(torch\.cuda\.)?Event\.elapsed_time)\s*=(?!=)|"
                        r"\bsetattr\(\s*(time|torch\.cuda|torch\.cuda\.Event)\s*,",
         "assigns to a timer or synchronization function", False),
)

# Each of these groups must match somewhere, or the file is rejected.
REQUIRED: tuple[Rule, ...] = (
    Rule("global_kernel", r"__global__", "no `__global__` kernel in the file", True),
    Rule("extension", r"\bload_inline\b|\bcpp_extension\b",
         "no `load_inline` or `cpp_extension` (no CUDA extension is built)", True),
)

# Reported, never rejected (ours).
WARNINGS: tuple[Rule, ...] = (
    Rule("streams", r"\btorch\.cuda\.(Stream|stream)\b|\bcudaStreamCreate\w*",
         "creates or switches CUDA streams (work off the timed stream)", False),
    Rule("precision", r"\.half\(\)|\.bfloat16\(\)|\btorch\.(float16|bfloat16|half)\b|\ballow_tf32\b|"
                      r"\bautocast\b|\b__half\b|\b__nv_bfloat16\b",
         "lower precision than FP32 somewhere", False),
    Rule("torch_compute", r"\b(torch\.nn\.functional|F)\.(linear|conv\w*|softmax|log_softmax|layer_norm|"
                          r"group_norm|batch_norm|gelu|relu|silu|scaled_dot_product_attention)\s*\(|"
                          r"\btorch\.(matmul|mm|bmm|addmm|einsum|softmax|conv\dd)\s*\(",
         "calls a PyTorch compute op (the kernel may not do the work)", False),
    Rule("triton", r"\btriton\b", "uses Triton (not the cuda backend)", False),
)


def strip_comments(source: str) -> str:
    """Every line cut at its first `#` or `//`, as the checker reads a file."""
    return "\n".join(re.split(r"#|//", line, maxsplit=1)[0] for line in source.splitlines())


def kernelbench_static(source: str) -> dict:
    """{"strict": [finding], "warnings": [finding], "passes_strict": bool}; a finding is
    {"check", "line", "message", "published"} (line None for a missing requirement)."""
    text = strip_comments(source)
    strict = [_finding(rule, text, match) for rule in FORBIDDEN for match in _first(rule, text)]
    strict += [_finding(rule, text, None) for rule in REQUIRED if not re.search(rule.pattern, text)]
    warnings = [_finding(rule, text, match) for rule in WARNINGS for match in _first(rule, text)]
    return {"strict": strict, "warnings": warnings, "passes_strict": not strict}


def _first(rule: Rule, text: str) -> list[re.Match]:
    match = re.search(rule.pattern, text)
    return [match] if match else []


def _finding(rule: Rule, text: str, match: re.Match | None) -> dict:
    line = text.count("\n", 0, match.start()) + 1 if match else None
    message = f"{rule.message} ({match.group(0).strip()})" if match else rule.message
    return {"check": rule.check, "line": line, "message": message, "published": rule.published}
