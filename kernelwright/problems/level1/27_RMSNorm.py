"""RMSNorm written out by hand (x * rsqrt(mean(x^2) + eps) * weight) over an odd hidden size."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


batch_size = 16
seq_len = 4096
hidden_size = 3071
eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, eps]
