"""GEMM (no bias), divide by 2, sum over features (keepdim), scale: reducible to a matrix-vector product."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, hidden_size, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, in_features) * 0.02)
        self.scale = scale

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scale


batch_size = 8192
in_features = 4096
hidden_size = 4096
scale = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_size, scale]
