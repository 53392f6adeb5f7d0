"""Static report on a candidate's source, in the spirit of KernelBench's static checker: patterns that
often hide a reward hack or a precision loss. Findings are warnings for a person to read, never a verdict
(the runtime defences decide); each is {"check", "line", "message"}."""

from __future__ import annotations

import ast
import re

# (check, regex over the whole source, message). The regexes see Python and the CUDA/C++ strings alike.
PATTERN_RULES: list[tuple[str, str, str]] = [
    (
        "streams",
        r"torch\.cuda\.Stream\b|torch\.cuda\.stream\(|cudaStreamCreate|cudaStreamNonBlocking",
        "creates or switches CUDA streams: work off the current stream escapes CUDA-event timing",
    ),
    (
        "threads",
        r"\bimport threading\b|\bthreading\.|concurrent\.futures|\bmultiprocessing\b|std::thread|"
        r"\basyncio\b",
        "uses threads or processes: background work escapes timing and may race the output",
    ),
    (
        "timing_patch",
        r"(?m)^[^#\n]*\b(time\.(time|perf_counter|monotonic)|torch\.cuda\.(synchronize|Event|"
        r"current_stream)|elapsed_time)\s*=(?!=)",
        "assigns to a timing function",
    ),
    (
        "monkeypatch",
        r"(?m)^[^#\n]*\b(torch|F|nn|time)\.[\w.]+\s*=(?!=)|\bsetattr\(\s*(torch|time|F|nn)\b",
        "assigns to an attribute of torch/time (monkeypatching)",
    ),
    (
        "precision",
        r"allow_tf32|set_float32_matmul_precision|allow_(fp16|bf16)_reduced_precision|autocast|"
        r"set_default_dtype|\.half\(\)|\.bfloat16\(\)|torch\.(float16|bfloat16|half)\b|__half\b|__nv_bfloat16|"
        r"__float2half|wmma::|\bmma\.sync\b",
        "lowers precision (TF32/FP16/BF16) somewhere",
    ),
    (
        "caching",
        r"data_ptr\(\)\s*(in|==|!=)|\bid\(\s*\w+\s*\)|functools\.(lru_)?cache\b|@cache\b",
        "keys something on a tensor's address or caches results across calls",
    ),
    (
        "empty_output",
        r"torch\.empty(_like)?\(",
        "allocates with torch.empty: fine if every element is written",
    ),
]

# torch calls that allocate, reshape or query without computing; anything else in forward is compute.
_NON_COMPUTE = {
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "tensor",
    "as_tensor",
    "arange",
    "view",
    "reshape",
    "contiguous",
    "size",
    "numel",
    "is_contiguous",
    "device",
    "dtype",
    "stride",
    "unsqueeze",
    "squeeze",
    "flatten",
    "expand",
    "permute",
    "transpose",
    "no_grad",
    "is_tensor",
    "Size",
    "cuda",
    "to",
    "is_floating_point",
    "current_stream",
    "current_device",
}
_TORCH_ROOTS = {"torch", "F", "nn"}


def static_report(source: str) -> list[dict]:
    warnings = []
    for check, pattern, message in PATTERN_RULES:
        for match in re.finditer(pattern, source):
            line = source.count("\n", 0, match.start()) + 1
            warnings.append(
                {"check": check, "line": line, "message": f"{message} ({match.group(0).strip()})"}
            )
            break  # one finding per rule is enough to point a reader at it
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return warnings + [{"check": "syntax", "line": exc.lineno, "message": f"syntax error: {exc.msg}"}]
    forward = _modelnew_forward(tree)
    if forward is not None:
        ops = _torch_compute_calls(forward)
        if ops:
            warnings.append(
                {
                    "check": "pytorch_ops",
                    "line": forward.lineno,
                    "message": "forward calls PyTorch compute ops: " + ", ".join(sorted(ops)),
                }
            )
        for node in ast.walk(forward):
            if isinstance(node, ast.Try) and node.handlers:
                warnings.append(
                    {
                        "check": "fallback",
                        "line": node.lineno,
                        "message": "forward has try/except: a silent fallback hides kernel failures",
                    }
                )
                break
    return warnings


def _modelnew_forward(tree: ast.Module) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
    return None


def _torch_compute_calls(function: ast.FunctionDef) -> set[str]:
    found = set()
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        root, dotted = _dotted_name(node.func)
        if root in _TORCH_ROOTS and node.func.attr not in _NON_COMPUTE:
            found.add(dotted)
    return found


def _dotted_name(node: ast.expr) -> tuple[str, str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    root = node.id if isinstance(node, ast.Name) else ""
    return root, ".".join([root, *reversed(parts)])
