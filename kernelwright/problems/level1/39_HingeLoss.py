"""Hinge loss written out: mean(clamp(1 - predictions * targets, min=0)) with +-1 targets."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 16384
dim = 10240


def get_inputs():
    return [torch.randn(batch_size, dim), (torch.rand(batch_size, dim) < 0.5).float() * 2 - 1]


def get_init_inputs():
    return []
