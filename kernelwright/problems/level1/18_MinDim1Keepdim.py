"""Min over dim 1 with keepdim=True on a 3D tensor with odd sizes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.min(x, dim=1, keepdim=True).values


batch_size = 128
reduce_size = 2047
inner_size = 1279


def get_inputs():
    return [torch.randn(batch_size, reduce_size, inner_size)]


def get_init_inputs():
    return []
