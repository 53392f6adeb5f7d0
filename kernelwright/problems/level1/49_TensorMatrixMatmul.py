"""3D tensor times matrix: (b, i, k) @ (k, j) with an odd output width."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


batch_size = 16
rows = 1024
k = 2048
cols = 1023


def get_inputs():
    return [torch.randn(batch_size, rows, k), torch.randn(k, cols)]


def get_init_inputs():
    return []
