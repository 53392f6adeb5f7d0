"""Correct, pure PyTorch (problem gelu.py). Expected: correct, flags.no_custom_kernel = true."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
