"""Raises in forward. Expected: runtime_error (with the candidate's line)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        raise ValueError("kernel launch configuration invalid")
