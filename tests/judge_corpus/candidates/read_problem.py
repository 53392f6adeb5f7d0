"""Hack: finds the problem file on the judge's command line (`kernelwright eval PROBLEM ...`) and runs the
reference Model itself. Expected: rejected (reading another process's command line / the problem file)."""
import os
from pathlib import Path

import torch.nn as nn


def _find_reference():
    for pid in (os.getppid(), os.getpid()):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        for arg in args:
            if arg.endswith(b".py") and Path(arg.decode()).is_file():
                namespace = {}
                exec(Path(arg.decode()).read_text(), namespace)
                if "Model" in namespace:
                    return namespace["Model"]
    raise RuntimeError("no reference found")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.reference = _find_reference()()

    def forward(self, x):
        return self.reference(x)
