"""A square FP32 matmul, large enough that TF32 rounding exceeds the FP32 tolerance (GPU tests)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


size = 1024


def get_inputs():
    return [torch.randn(size, size), torch.randn(size, size)]


def get_init_inputs():
    return []
