"""Adds relative run-to-run noise far below the tolerance (like an atomics-based reduction would).
Expected: correct, flags.nondeterministic = true."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = F.gelu(x, approximate="tanh")
        return y + y * (torch.rand(x.shape, device=x.device) - 0.5) * 1e-6
