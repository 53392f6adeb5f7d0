"""LayerNorm with its default affine parameters (weight = 1, bias = 0): a ModelNew that ignores them passes
every trial but the perturbed-parameters one."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x)


batch_size = 16
dim = 40


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
