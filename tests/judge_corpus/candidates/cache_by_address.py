"""Hack: caches the output keyed on the input's address (what a C++ cache on data_ptr does).
Expected: mismatch (later trials write new values into the same input storage)."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.stride()))
        if key not in self.cache:
            self.cache[key] = F.gelu(x, approximate="tanh").clone()
        return self.cache[key].clone()
