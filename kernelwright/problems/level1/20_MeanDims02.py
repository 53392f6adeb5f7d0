"""Mean over the non-adjacent dims 0 and 2 of a (batch, channels, length) tensor (per-channel statistics)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=(0, 2))


batch_size = 256
channels = 512
length = 2560


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
