"""ReLU on a small input: on torch.rand inputs relu(x) == x, which tempts a candidate to return x."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 40


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
