"""The end-to-end suite test records which rules fired on each bundled problem; this prints the table
at the end of the run and says where the JSON was written."""

from __future__ import annotations

import pytest

SUITE_SUMMARY = pytest.StashKey[dict]()
SUMMARY_TEXT = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUITE_SUMMARY] = {}


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    text = config.stash.get(SUMMARY_TEXT, "")
    if text:
        terminalreporter.write_sep("-", "rewrite rules fired on the bundled suite")
        terminalreporter.write_line(text)
