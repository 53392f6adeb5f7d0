"""The build recipe under concurrency and after crashes (issue: a ResNet fell back with "cannot open shared
object file" while other tasks built the same extension): processes building overlapping extensions into one
cache all load them; stale locks, a crashed build's leftovers and a truncated library are survived.

On the CPU the recipe's cache (`_kw_cached`, which publishes both a model's kernel library and the shared
runtime) builds real (C++ only) extensions through the same code path as the emitted files: staging folder,
file lock, atomic publish, load. The GPU variant in tests/codegen/test_build_cache_gpu.py
does the same with CUDA sources."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright.codegen.build import BUILD_SOURCE

# A minimal C extension (no torch headers: builds in well under a second); load_inline defines
# TORCH_EXTENSION_NAME, so one source serves every name.
SOURCE = """
#include <Python.h>
#define KW_CAT(a, b) a##b
#define KW_INIT(name) KW_CAT(PyInit_, name)
#define KW_STR2(x) #x
#define KW_STR(x) KW_STR2(x)
static struct PyModuleDef kw_def = {PyModuleDef_HEAD_INIT, KW_STR(TORCH_EXTENSION_NAME), NULL, -1, NULL};
PyMODINIT_FUNC KW_INIT(TORCH_EXTENSION_NAME)(void) {
  PyObject* m = PyModule_Create(&kw_def);
  if (m) PyModule_AddIntConstant(m, "value", VALUE);
  return m;
}
"""

BUILDER = """
import random, sys, torch
from torch.utils.cpp_extension import load_inline
root, order = sys.argv[1], sys.argv[2].split(",")
namespace = {"torch": torch}
exec(open(sys.argv[3]).read(), namespace)
source = open(sys.argv[4]).read()
random.shuffle(order)
for item in order:
    name, value = item.split(":")
    text = source.replace("VALUE", value)
    def compile(staging, name=name, text=text):
        return load_inline(name=name, cpp_sources=[text], build_directory=staging, no_implicit_headers=True)
    module = namespace["_kw_cached"](root, name, "test", namespace["_kw_load"], compile)
    assert module.value == int(value), (name, module.value)
print("ok")
"""


def _recipe(tmp_path: Path) -> tuple[Path, Path]:
    recipe, source = tmp_path / "recipe.py", tmp_path / "ext.c"
    recipe.write_text(BUILD_SOURCE)
    source.write_text(SOURCE)
    return recipe, source


def _build(root: Path, items: list[str], recipe: Path, source: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILDER, str(root), ",".join(items), str(recipe),
                             str(source)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "MAX_JOBS": "1"})


def _published(root: Path, name: str) -> Path:
    folders = list((root / "builds").glob(f"{name}-*"))
    assert folders == [root / "builds" / f"{name}-test"], folders
    return folders[0] / f"{name}.so"


@pytest.mark.slow
def test_eight_processes_build_overlapping_extensions(tmp_path: Path):
    recipe, source = _recipe(tmp_path)
    names = [f"kw_race{i}:{i + 10}" for i in range(3)]
    procs = [_build(tmp_path / "cache", names if i % 2 else names[:2], recipe, source) for i in range(8)]
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0 and out.strip().endswith("ok"), out[-3000:]
    for item in names:
        name = item.split(":")[0]
        assert _published(tmp_path / "cache", name).is_file()


def test_a_crashed_build_and_a_truncated_library_are_rebuilt(tmp_path: Path):
    recipe, source = _recipe(tmp_path)
    root = tmp_path / "cache"
    proc = _build(root, ["kw_crash:7"], recipe, source)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    library = _published(root, "kw_crash")
    # What a crash can leave: torch's own lock file in the staging folder (it waits forever on it), our lock
    # file (an flock, not held by anyone now), and a library cut short by an older, non-atomic build.
    (library.parent / "staging").mkdir(exist_ok=True)
    (library.parent / "staging" / "lock").write_text("")
    library.write_bytes(library.read_bytes()[:100])
    proc = _build(root, ["kw_crash:7"], recipe, source)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0 and out.strip().endswith("ok"), out[-3000:]
    assert library.stat().st_size > 100



def test_missing_launchers_are_built_at_once_then_found_by_the_recipe(tmp_path: Path, monkeypatch):
    """A model calling several CUTLASS launchers (10-60 s of nvcc each) builds the missing ones side by side
    (one thread each, outside the emitted recipe, which may not start threads), through the recipe's cache:
    published once, then found by `_kw_launcher` without a build."""
    import threading
    import time

    from kernelwright.codegen import build

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    namespace = {"torch": __import__("torch")}
    exec(BUILD_SOURCE, namespace)  # noqa: S102 (the recipe as emitted files run it)
    building, most = set(), [0]
    lock = threading.Lock()

    def compile(name, sources, staging, arch, include, linked=()):
        with lock:
            building.add(name)
            most[0] = max(most[0], len(building))
        time.sleep(0.5)
        built = Path(staging, f"{name}.so")
        built.write_text(sources[0])
        with lock:
            building.discard(name)
        return str(built)          # as load_inline of a plain library returns its path

    namespace["_kw_compile"] = compile
    launchers = [(f"kw_gemm_{i}", f"// launcher {i}") for i in range(3)]
    build._prebuild_launchers(namespace, launchers)
    assert most[0] == 3
    namespace["_kw_compile"] = lambda *args, **kwargs: pytest.fail("a published launcher was built again")
    arch = namespace["_kw_arch"]()
    paths = [namespace["_kw_launcher"](str(tmp_path), arch, *launcher) for launcher in launchers]
    assert [Path(p).read_text() for p in paths] == [source for _, source in launchers]
