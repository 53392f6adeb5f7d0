"""Softplus (beta 1, threshold 20) on a large 2D tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.softplus(x)


batch_size = 16384
dim = 12288


def get_inputs():
    return [torch.randn(batch_size, dim) * 10.0]


def get_init_inputs():
    return []
