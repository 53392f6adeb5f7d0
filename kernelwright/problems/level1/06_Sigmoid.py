"""Sigmoid on a 2D tensor with odd (prime-ish) sizes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)


batch_size = 12289
dim = 16381


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
