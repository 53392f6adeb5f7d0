"""diag(v) @ M: the dense diagonal matrix is built then multiplied (a row scaling)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, v, m):
        return torch.diag(v) @ m


n = 4096
cols = 6144


def get_inputs():
    return [torch.randn(n), torch.randn(n, cols)]


def get_init_inputs():
    return []
