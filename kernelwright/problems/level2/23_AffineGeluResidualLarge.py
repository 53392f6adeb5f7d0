"""Per-channel scale and shift, tanh-GELU, residual add: a pointwise chain over a 32 x 8192 x 4096 activation.

Full size: inputs 4.00 GiB, outputs 4.00 GiB, parameters 32.00 KiB.
Ideal on an H100: 2.86 ms (8.00 GiB moved once at 3.0 TB/s).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.shift = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x):
        return x + F.gelu(x * self.scale + self.shift, approximate="tanh")


batch_size = 32
tokens = 8192
channels = 4096


def get_inputs():
    return [torch.randn(batch_size, tokens, channels)]


def get_init_inputs():
    return [channels]
