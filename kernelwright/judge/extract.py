"""Turn a candidate (a `.py` file or a raw LLM answer) into the Python source to judge."""

from __future__ import annotations

import ast
import re
from pathlib import Path

# A fenced block: ``` or ~~~, an optional language tag, the body, the same fence closing it.
_FENCE = re.compile(
    r"^(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_DEFINES_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)


def extract_code(text: str) -> str | None:
    """The last fenced code block that defines `class ModelNew`, or None. LLM answers often contain
    several drafts; the last one is the answer (KernelBench's convention)."""
    blocks = [m.group("body") for m in _FENCE.finditer(text)]
    for body in reversed(blocks):
        if _DEFINES_MODELNEW.search(body):
            return body
    return None


def read_candidate(candidate: str | Path) -> tuple[str | None, str]:
    """(source, how it was obtained) or (None, why not). A `.py` file is used as is; anything else is
    treated as an LLM answer."""
    path = Path(candidate)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return None, f"cannot read the candidate {path}: {exc.strerror or exc}"
    if path.suffix == ".py":
        source, how = text, "python file"
    else:
        source, how = extract_code(text), "last fenced code block defining ModelNew"
        if source is None:
            has_block = bool(_FENCE.search(text))
            return None, (
                "the answer's code blocks do not define class ModelNew"
                if has_block
                else "the answer contains no fenced code block"
            )
    if not _DEFINES_MODELNEW.search(source):
        return None, "the candidate does not define class ModelNew"
    return source, how


def forbidden_imports(source: str) -> list[str]:
    """Modules a candidate may not import: kernelwright (it holds the problem loader; a ModelNew file is
    self-contained and imports only torch)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [name for name in names if name.split(".")[0] == "kernelwright"]
    return found
