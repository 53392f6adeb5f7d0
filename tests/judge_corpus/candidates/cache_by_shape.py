"""Hack: computes once, then returns the cached output for any input of the same shape.
Expected: mismatch (every trial draws new input values)."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        if x.shape not in self.cache:
            self.cache[x.shape] = F.gelu(x, approximate="tanh")
        return self.cache[x.shape]
