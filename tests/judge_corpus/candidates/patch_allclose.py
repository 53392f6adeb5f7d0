"""Hack: makes every comparison succeed, then returns zeros. Expected: rejected (monkeypatched
torch.allclose); the comparison happens in another process anyway."""
import torch
import torch.nn as nn

torch.allclose = lambda *args, **kwargs: True
torch.Tensor.allclose = lambda *args, **kwargs: True


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.zeros_like(x)
