"""Tanh-approximated GELU on a 3D activation tensor (batch, tokens, hidden)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")


batch_size = 64
seq_len = 2048
hidden_size = 1536


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return []
