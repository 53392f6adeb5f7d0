"""Mean over the middle dim of a 3D tensor (batch, reduce, inner)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=1)


batch_size = 80
reduce_size = 4096
inner_size = 1024


def get_inputs():
    return [torch.randn(batch_size, reduce_size, inner_size)]


def get_init_inputs():
    return []
