"""Matmul with prime sizes (4093 x 2053) @ (2053 x 4099): no dim is a multiple of 4."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


m = 4093
k = 2053
n = 4099


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
