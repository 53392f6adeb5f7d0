"""Grouped 2D convolution (5x5 kernel, 8 groups)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, groups=groups)

    def forward(self, x):
        return self.conv(x)


batch_size = 32
in_channels = 256
out_channels = 256
height = 128
width = 128
kernel_size = 5
groups = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
