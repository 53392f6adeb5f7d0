"""Mish on a 2D tensor with odd sizes (8191 x 24573)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.mish(x)


batch_size = 8191
dim = 24573


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
