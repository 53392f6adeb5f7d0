"""Crashes the interpreter (what an illegal memory access in a careless extension does to a process).
Expected: runtime_error (the candidate process died: SIGSEGV); the judge survives."""
import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        ctypes.string_at(0)
        return x
