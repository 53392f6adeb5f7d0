"""The problem's source as copied into a ModelNew file, made readable by KernelBench's static checker
(`kernelwright/judge/kernelbench.py`) without changing what it defines.

The checker rejects any file in which, outside comments, the word `pass`, `try:` or `except <name>` occurs:
it reads them as a silent fallback to PyTorch. A copied problem trips it with prose ("Forward pass of the
model.") and with empty bodies. Two rewrites, both on tokens (never a regex over code):
- docstrings: those words become `run`, `attempt` and `but` (prose only; a docstring is no behaviour);
- a `pass` statement becomes `...`, an expression statement that does nothing, like `pass`.

Every other token is kept byte for byte, comments included (the checker cuts comments itself). A `try`
statement or a string that is not a docstring is left alone: changing it could change the program, so the
checker's verdict on such a file stays a finding for `eval --kernelbench-static` to report.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

# (pattern over docstring text, replacement); each defuses one of the checker's strict rules.
_DOCSTRING_WORDS = (
    (re.compile(r"\bpass\b"), "run"),
    (re.compile(r"\bPass\b"), "Run"),
    (re.compile(r"\bPASS\b"), "RUN"),
    (re.compile(r"\btry(?=\s*:)"), "attempt"),
    (re.compile(r"\bexcept(?=\s*:|\s+\w)"), "but"),
)


def checker_safe_source(source: str) -> str:
    """`source` with its docstrings' trigger words replaced and `pass` statements written `...`. Raises
    SyntaxError for a source that does not parse (a problem file always does: it was loaded)."""
    docstrings = _docstring_lines(ast.parse(source))
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines = source.splitlines(keepends=True)
    # Replace from the end, so the (row, col) positions of earlier tokens stay valid.
    for token in reversed(tokens):
        if token.type == tokenize.NAME and token.string == "pass":
            replacement = "..."
        elif token.type == tokenize.STRING and token.start[0] in docstrings:
            replacement = _reword(token.string)
        else:
            continue
        if replacement != token.string:
            lines = _replace(lines, token, replacement)
    return "".join(lines)


def _docstring_lines(tree: ast.Module) -> set[int]:
    """First lines of the docstrings of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                found.add(first.lineno)
    return found


def _reword(text: str) -> str:
    for pattern, replacement in _DOCSTRING_WORDS:
        text = pattern.sub(replacement, text)
    return text


def _replace(lines: list[str], token: tokenize.TokenInfo, replacement: str) -> list[str]:
    (start_row, start_col), (end_row, end_col) = token.start, token.end
    head = lines[start_row - 1][:start_col]
    tail = lines[end_row - 1][end_col:]
    return [*lines[:start_row - 1], *(head + replacement + tail).splitlines(keepends=True), *lines[end_row:]]
