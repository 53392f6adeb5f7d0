"""Boolean-mask indexing: the output size is the number of positive elements."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x[x > 0] * 2


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
