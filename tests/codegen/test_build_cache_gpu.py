"""The build cache under concurrency on the GPU: 8 processes import overlapping emitted ModelNew files into
one cold cache at once (each import builds or loads the file's extension), as bench tasks, judge workers and
a user's own imports do; every one must load every extension and find its kernels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright.compiler import OptimizeOptions, optimize
from kernelwright.problem import load_shrunk

pytestmark = pytest.mark.gpu

PROBLEMS = ["level1/01_ReLU", "level1/23_Softmax", "level2/16_LinearSwishScaleClamp"]

IMPORTER = """
import importlib.util, random, sys
paths = sys.argv[1:]
random.shuffle(paths)
for path in paths:
    spec = importlib.util.spec_from_file_location("emitted_" + str(abs(hash(path))), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    called = [line.split("_kw_ext.")[1].split("(")[0] for line in open(path) if "_kw_ext." in line]
    assert called and all(callable(getattr(module._kw_ext, name)) for name in called), path
print("ok")
"""


def test_eight_processes_import_overlapping_emitted_files(tmp_path: Path):
    files = []
    for problem_id in PROBLEMS:
        result = optimize(load_shrunk(problem_id), OptimizeOptions(verify=False))
        assert result.fallback_reason is None, result.fallback_reason
        path = tmp_path / f"{problem_id.replace('/', '_')}.py"
        path.write_text(result.source)
        files.append(str(path))
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", IMPORTER, *(files if i % 2 else files[:2])],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for i in range(8)]
    for proc in procs:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0 and out.strip().endswith("ok"), out[-3000:]
    published = list((tmp_path / "cache" / "builds").glob("kw_*/kw_*.so"))
    runtimes = [p for p in published if p.name.startswith("kw_runtime_")]
    assert len(runtimes) == 1 and len(published) == len(PROBLEMS) + 1, published   # one runtime shared by all



PREBUILD = """
import importlib.util, sys, threading, torch
from kernelwright.codegen.build import prebuild_runtime, runtime_library

assert not runtime_library().exists()
prebuild = threading.Thread(target=prebuild_runtime)
prebuild.start()
spec = importlib.util.spec_from_file_location("emitted", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)           # builds its kernels, then imports the runtime
prebuild.join()
assert runtime_library().exists()
torch.manual_seed(0)
x = torch.randn(*map(int, sys.argv[2].split(",")), device="cuda")   # the shrunk problem's input shape
assert torch.equal(module.ModelNew().cuda()(x), torch.relu(x))
print("ok")
"""


def test_the_runtime_prebuilt_beside_a_kernel_build_is_imported_once(tmp_path: Path):
    """A cold cache: the runtime prebuilt (not imported) in a thread while an emitted file builds its
    kernels; the file then imports the published runtime and its kernel runs (a second import of the
    pybind11 module would fail to register its types)."""
    problem = load_shrunk("level1/01_ReLU")
    result = optimize(problem, OptimizeOptions(verify=False))
    path = tmp_path / "relu.py"
    path.write_text(result.source)
    shape = ",".join(map(str, problem.inputs()[0].shape))
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", PREBUILD, str(path), shape], capture_output=True, text=True,
                          env=env, timeout=900)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
