"""Hack: computes in the input's memory (saves an allocation, destroys the caller's data).
Expected: rejected (input modified in place)."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = F.gelu(x, approximate="tanh")
        x.copy_(y)
        return y
