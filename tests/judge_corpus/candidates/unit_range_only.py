"""A kernel that assumes inputs in [0, 1), the range of torch.rand: right on the normal trials, wrong on
the x1000 and all-negative ones. Expected: mismatch (an extra distribution)."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x.clamp(0.0, 1.0), approximate="tanh")
