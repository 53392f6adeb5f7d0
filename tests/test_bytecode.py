"""The bytecode cache is used only where an install cannot keep valid bytecode beside its sources."""

from __future__ import annotations

import os
import py_compile
import sys

import pytest

from kernelwright.bytecode import bytecode_is_fresh, in_use, use_bytecode_cache


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An importable package `kw_bytecode_probe` in a temporary folder (no bytecode yet)."""
    root = tmp_path / "site"
    (root / "kw_bytecode_probe").mkdir(parents=True)
    source = root / "kw_bytecode_probe" / "__init__.py"
    source.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.delenv("KERNELWRIGHT_BYTECODE_CACHE", raising=False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return source


def test_fresh_bytecode_is_recognized_and_a_changed_source_is_not(package):
    assert not bytecode_is_fresh(str(package))                  # never compiled
    py_compile.compile(str(package), doraise=True)
    assert bytecode_is_fresh(str(package))
    stat = os.stat(package)
    os.utime(package, (stat.st_atime, stat.st_mtime + 10))      # the source changed since
    assert not bytecode_is_fresh(str(package))


def test_hash_based_bytecode_counts_as_fresh(package):
    mode = py_compile.PycInvalidationMode.CHECKED_HASH
    py_compile.compile(str(package), doraise=True, invalidation_mode=mode)
    os.utime(package, (0, 12345))
    assert bytecode_is_fresh(str(package))


def test_missing_bytecode_points_python_and_children_at_the_cache(package, tmp_path, monkeypatch):
    # PYTHONDONTWRITEBYTECODE keeps bytecode out of source folders; kernelwright's cache is written anyway
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    prefix = use_bytecode_cache("kw_bytecode_probe")
    assert prefix == str(tmp_path / "cache" / "pycache")
    assert sys.pycache_prefix == prefix and os.environ["PYTHONPYCACHEPREFIX"] == prefix
    assert not sys.dont_write_bytecode and "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert os.path.isdir(prefix) and in_use()
    # a process started from this one inherits the prefix, and writes there too
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert use_bytecode_cache("kw_bytecode_probe") == prefix and not sys.dont_write_bytecode


def test_the_cache_can_be_turned_off(package, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_BYTECODE_CACHE", "0")
    assert use_bytecode_cache("kw_bytecode_probe") is None and sys.pycache_prefix is None


def test_valid_bytecode_or_an_existing_prefix_leaves_python_alone(package, monkeypatch):
    py_compile.compile(str(package), doraise=True)
    assert use_bytecode_cache("kw_bytecode_probe") is None
    assert sys.pycache_prefix is None and "PYTHONPYCACHEPREFIX" not in os.environ
    os.remove(package.parent / "__pycache__" / os.listdir(package.parent / "__pycache__")[0])
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/somewhere/else")
    assert use_bytecode_cache("kw_bytecode_probe") is None
    monkeypatch.setattr(sys, "pycache_prefix", "/somewhere/else")
    assert not in_use()                   # doctor names another prefix as the user's, not kernelwright's
    assert use_bytecode_cache("kw_no_such_package_anywhere") is None
