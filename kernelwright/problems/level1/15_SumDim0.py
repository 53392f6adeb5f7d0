"""Sum over dim 0 (column sums) of a tall 2D matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=0)


rows = 20480
cols = 16384


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
