"""Every data file the package reads at run time is declared in pyproject's package-data: a regular
(non-editable) install ships only those (the `.cu.in` kernel templates were once left out)."""

from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent


def test_every_package_data_file_is_declared():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = REPO / "kernelwright"
    declared = {path for pattern in patterns["kernelwright"] for path in package.glob(pattern)}
    undeclared = [
        str(path.relative_to(package))
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
        and path not in declared
    ]
    assert not undeclared, f"not in [tool.setuptools.package-data]: {undeclared}"
