"""A candidate that imports an already-built extension (as our emitted files do from their build cache)
still has its kernel calls counted: `no_custom_kernel` must not be claimed for it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig

import pytest

C_SOURCE = r"""
#include <Python.h>
static PyObject* twice(PyObject* self, PyObject* arg) { return PyNumber_Add(arg, arg); }
static PyMethodDef methods[] = {{"twice", twice, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "kwtiny", NULL, -1, methods};
PyMODINIT_FUNC PyInit_kwtiny(void) { return PyModule_Create(&def); }
"""

SCRIPT = r"""
import importlib.machinery, importlib.util, sys
from kernelwright.judge.guard import ExtensionRecorder
recorder = ExtensionRecorder()
recorder.install()
library = sys.argv[1]
loader = importlib.machinery.ExtensionFileLoader("kwtiny", library)
spec = importlib.util.spec_from_file_location("kwtiny", library, loader=loader)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert module.twice(21) == 42
import numpy.linalg  # an installed package's compiled modules are not candidate kernels
print("modules", len(recorder.modules), "calls", recorder.calls)
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a tiny extension")
def test_directly_imported_extension_is_recorded(tmp_path):
    source = tmp_path / "kwtiny.c"
    source.write_text(C_SOURCE)
    library = tmp_path / f"kwtiny{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["gcc", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(source), "-o",
                    str(library)], check=True)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(library)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "modules 1 calls 1" in done.stdout
