"""Matrix multiplication with a narrow output: C = A @ B, A (40000 x 2000), B (2000 x 40). Reading A
(320 MB) is most of the work."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


m = 40000
k = 2000
n = 40


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
