"""Pre-norm transformer MLP block: x + fc2(gelu(fc1(layernorm(x))))."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden_size, mlp_size):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        self.fc1 = nn.Linear(hidden_size, mlp_size)
        self.fc2 = nn.Linear(mlp_size, hidden_size)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


batch_size = 8
seq_len = 1024
hidden_size = 1024
mlp_size = 4096


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, mlp_size]
