"""The precompiled prelude of the build recipe (codegen/build.py, `_KwPrelude`): the binding's first C++
source, compiled once per (prelude, torch, compiler, flags) into `$KERNELWRIGHT_CACHE/pch/<key>/` and used
by every later build's host compile (issue 19: parsing the prelude's headers was most of a build).

On the CPU the recipe builds C++-only extensions through torch's own ninja build, as in
test_build_cache.py; a small prelude (one light torch header and Python.h) keeps those builds short. The real
prelude is checked on a real binding unit with g++ alone; tests/codegen/test_build_cache_gpu.py times it in
whole builds on the GPU."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_binding_compile import CUDA_INCLUDE, split_row_reduction, tf32x3_linear

from kernelwright.codegen.binding import assemble
from kernelwright.codegen.build import BUILD_SOURCE, _build_steps
from kernelwright.codegen.registry import render_group

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("ninja") is None,
                                reason="needs g++ and ninja")

CFLAGS = ["-O3", "-Winvalid-pch"]  # what _kw_compile passes
# "#include <torch/" marks a prelude worth precompiling; this one compiles in well under a second.
PRELUDE = """
#include <torch/headeronly/version.h>
#include <Python.h>
#define KW_CAT(a, b) a##b
#define KW_INIT(name) KW_CAT(PyInit_, name)
#define KW_STR2(x) #x
#define KW_STR(x) KW_STR2(x)
static long kw_twice(long v) { return 2 * v; }
"""
MODULE = """
static struct PyModuleDef kw_def = {PyModuleDef_HEAD_INIT, KW_STR(TORCH_EXTENSION_NAME), NULL, -1, NULL};
PyMODINIT_FUNC KW_INIT(TORCH_EXTENSION_NAME)(void) {
  PyObject* m = PyModule_Create(&kw_def);
  if (m) PyModule_AddIntConstant(m, "value", kw_twice(VALUE));
  return m;
}
"""

RACER = """
import os, sys, time, torch
namespace = {"torch": torch}
exec(open(sys.argv[1]).read(), namespace)
prelude = open(sys.argv[2]).read()
root, staging, go, seconds = sys.argv[3:7]
os.makedirs(staging)
while not os.path.exists(go):
    time.sleep(0.005)
with namespace["_KwPrelude"](prelude, CFLAGS, False, root, staging) as folder:
    time.sleep(float(seconds))  # the extension's own build
made = os.path.exists(os.path.join(staging, "kw_steps.tsv"))
print("made" if made else "used" if folder else "plain")
""".replace("CFLAGS", repr(CFLAGS))


def recipe() -> dict:
    namespace = {"torch": torch}
    exec(BUILD_SOURCE, namespace)
    return namespace


def uses_header(folder: Path, tmp_path: Path, cflags: list[str] = CFLAGS) -> bool:
    """Whether g++, with the flags torch's build gives main.cpp, takes kw_prelude.h from folder's .gch."""
    cxx, flags, post = recipe()["_kw_host_command"](str(tmp_path / "probe-use"), cflags, False, str(folder))
    shutil.rmtree(tmp_path / "probe-use")
    source = tmp_path / "use.cpp"
    source.write_text('#include "kw_prelude.h"\nint kw_use;\n')
    done = subprocess.run([*cxx, *flags, "-DTORCH_EXTENSION_NAME=kw_use", "-H", "-fsyntax-only", str(source),
                           *post], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return f"! {folder}/kw_prelude.h.gch" in done.stderr.splitlines()


def race(tmp_path: Path, count: int, seconds: float, root: Path) -> list[subprocess.Popen]:
    recipe_file, prelude_file, go = tmp_path / "recipe.py", tmp_path / "prelude.h", tmp_path / "go"
    recipe_file.write_text(BUILD_SOURCE)
    prelude_file.write_text(PRELUDE)
    go.unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(recipe_file), str(prelude_file), str(root),
                               str(tmp_path / f"staging-{seconds}-{i}"), str(go), str(seconds)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(count)]
    time.sleep(1.0)  # every racer has imported torch and waits for the start
    go.write_text("")
    return procs


def test_the_key_follows_the_prelude_the_flags_and_the_compiler(monkeypatch):
    key = recipe()["_kw_pch_key"]
    first = key(PRELUDE, CFLAGS, False)
    assert first == key(PRELUDE, list(CFLAGS), False) and len(first) == 16
    assert key(PRELUDE + "// changed\n", CFLAGS, False) != first
    assert key(PRELUDE, ["-O2", "-Winvalid-pch"], False) != first
    monkeypatch.setenv("CXX", "g++")
    assert key(PRELUDE, CFLAGS, False) != first


def test_concurrent_builders_publish_one_whole_header(tmp_path: Path):
    root = tmp_path / "cache"
    procs = race(tmp_path, 6, 2.0, root)
    outcomes = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
        outcomes.append(out.strip().splitlines()[-1])
    # One makes it beside its build; the others, finding it in the making, build as before (none waits).
    assert outcomes.count("made") == 1 and set(outcomes) <= {"made", "plain", "used"}, outcomes
    (folder,) = [path for path in (root / "pch").iterdir() if path.is_dir()]
    assert sorted(p.name for p in folder.iterdir()) == ["kw_prelude.cmd", "kw_prelude.h", "kw_prelude.h.gch",
                                                        "kw_prelude.h.log"]
    assert (folder / "kw_prelude.h").read_text() == PRELUDE
    assert uses_header(folder, tmp_path)


def test_a_builder_killed_mid_way_leaves_nothing_stuck(tmp_path: Path):
    root = tmp_path / "cache"
    key = recipe()["_kw_pch_key"](PRELUDE, CFLAGS, False)
    (victim,) = race(tmp_path, 1, 600, root)
    staging = root / "pch" / f"{key}.staging"
    deadline = time.monotonic() + 120
    while not (staging / "kw_prelude.h").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    (builder,) = race(tmp_path, 1, 0.0, root)
    out, _ = builder.communicate(timeout=600)
    assert out.strip().endswith("made"), out[-3000:]
    assert not staging.exists() and uses_header(root / "pch" / key, tmp_path)


def test_extensions_build_with_the_precompiled_prelude(tmp_path: Path):
    namespace, root = recipe(), tmp_path / "cache"
    built = []
    for name, value in (("kw_pch_a", 3), ("kw_pch_b", 5)):
        module, seconds = namespace["_kw_build"](name, [PRELUDE, MODULE.replace("VALUE", str(value))], [],
                                                 str(root))
        assert module.value == 2 * value
        built.append((module, dict(_build_steps(module, seconds))))
    (_, first), (second_module, second) = built
    # The first build made the header beside its own compile; the second compiled main.cpp with it.
    assert first["kw_prelude.h.gch"] > 0 and "main.o" in first
    assert "kw_prelude.h.gch" not in second and "main.o" in second
    staging = Path(second_module.__file__).parent
    (folder,) = [path for path in (root / "pch").iterdir() if path.is_dir()]
    assert (staging / "main.cpp").read_text().startswith('#include "kw_prelude.h"\n')
    ninja = (staging / "build.ninja").read_text()
    assert f"-I{folder}" in ninja and "-Winvalid-pch" in ninja


def test_a_binding_error_is_still_the_compilers(tmp_path: Path):
    build, root = recipe()["_kw_build"], str(tmp_path / "cache")
    broken = MODULE.replace("VALUE", "kw_no_such_value")
    # While the header is made beside the build (the failed build drops it), then with the header.
    with pytest.raises(RuntimeError, match="kw_no_such_value"):
        build("kw_pch_broken1", [PRELUDE, broken], [], root)
    assert not [path for path in (tmp_path / "cache" / "pch").iterdir() if path.suffix != ".lock"]
    build("kw_pch_fine", [PRELUDE, MODULE.replace("VALUE", "1")], [], root)
    with pytest.raises(RuntimeError, match="kw_no_such_value") as raised:
        build("kw_pch_broken2", [PRELUDE, broken], [], root)
    assert "main.cpp:" in str(raised.value) and "-Winvalid-pch" in str(raised.value)


def test_a_header_that_cannot_be_made_costs_the_build_nothing(tmp_path: Path, monkeypatch):
    namespace, root, probes = recipe(), tmp_path / "cache", []

    def broken_probe(*args):
        probes.append(args)
        raise RuntimeError("no build.ninja")

    namespace["_kw_host_command"] = broken_probe
    for name, value in (("kw_nopch_a", 1), ("kw_nopch_b", 2)):
        sources = [PRELUDE, MODULE.replace("VALUE", str(value))]
        module, _ = namespace["_kw_build"](name, sources, [], str(root))
        assert module.value == 2 * value
    assert len(probes) == 1  # the failure is recorded, and not tried again at once
    (failed,) = (root / "pch").glob("*.failed")
    assert "no build.ninja" in failed.read_text()
    assert not [path for path in (root / "pch").iterdir() if path.is_dir()]
    monkeypatch.setenv("KERNELWRIGHT_NO_PCH", "1")
    module, _ = recipe()["_kw_build"]("kw_nopch_c", [PRELUDE, MODULE.replace("VALUE", "3")], [],
                                      str(tmp_path / "off"))
    assert module.value == 6 and not (tmp_path / "off" / "pch").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda_runtime_api.h").exists(),
                    reason="needs the CUDA runtime headers")
def test_a_real_binding_unit_compiles_with_the_precompiled_prelude(tmp_path: Path):
    """The emitted prelude (ATen, c10's CUDA guard and stream, torch's pybind casters) precompiled, then a
    binding unit of two stateful kernels compiled with it: g++ -H marks the header used ("!")."""
    sources = assemble([render_group(tf32x3_linear()), render_group(split_row_reduction())])
    # A CPU build of torch ships c10/cuda without the header its CMake generates; an empty one stands in.
    shim = tmp_path / "shim" / "c10" / "cuda" / "impl"
    shim.mkdir(parents=True)
    (shim / "cuda_cmake_macros.h").write_text("#pragma once\n")
    cflags = [*CFLAGS, f"-I{tmp_path / 'shim'}", f"-I{CUDA_INCLUDE}"]
    namespace, staging = recipe(), tmp_path / "staging"
    staging.mkdir()
    with namespace["_KwPrelude"](sources.cpp_sources[0], cflags, False, str(tmp_path / "cache"),
                                 str(staging)) as folder:
        assert folder is None  # none yet: this build would parse the prelude while the header is made
    made = (staging / "kw_steps.tsv").read_text().split("\t")
    with namespace["_KwPrelude"](sources.cpp_sources[0], cflags, False, str(tmp_path / "cache"),
                                 str(staging)) as folder:
        assert folder is not None
    cxx, flags, post = namespace["_kw_host_command"](str(tmp_path / "probe"), cflags, False, folder)
    main = tmp_path / "main.cpp"
    main.write_text("\n".join(['#include "kw_prelude.h"\n', *sources.cpp_sources[1:]]))
    start = time.perf_counter()
    done = subprocess.run([*cxx, *flags, "-DTORCH_EXTENSION_NAME=kw_binding", "-H", "-c", str(main), "-o",
                           str(tmp_path / "main.o"), *post], capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"! {folder}/kw_prelude.h.gch" in done.stderr.splitlines()
    print(f"\nprecompiled prelude {made[1].strip()} s, binding unit with it {seconds:.1f} s")
