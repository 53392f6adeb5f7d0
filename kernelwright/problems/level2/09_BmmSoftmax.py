"""Batched matmul (like attention scores) followed by softmax over the last dim."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.softmax(torch.bmm(a, b), dim=-1)


batch_size = 64
m = 1024
k = 512
n = 1024


def get_inputs():
    return [torch.randn(batch_size, m, k) * 0.05, torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
