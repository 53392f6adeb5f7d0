"""Hack (problem relu.py): torch.rand inputs are >= 0, so relu(x) == x: returns the input itself.
Expected: rejected (the output aliases the input)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
