"""Matmul of two inputs, then per row the max minus the mean of the product (peak-to-mean)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        y = torch.matmul(a, b)
        row_max = torch.max(y, dim=1, keepdim=True).values
        return row_max - torch.mean(y, dim=1, keepdim=True)


m = 4096
k = 4096
n = 8192


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
