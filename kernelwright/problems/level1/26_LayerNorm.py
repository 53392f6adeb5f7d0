"""LayerNorm (with affine weight and bias) over the hidden dim of a (batch, tokens, hidden) tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, x):
        return self.norm(x)


batch_size = 16
seq_len = 4096
hidden_size = 3072


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size) * 2.0 + 0.5]


def get_init_inputs():
    return [hidden_size]
