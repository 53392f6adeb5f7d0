"""The conv bar of issue 8: Conv2d 3x3 (batch 16, 64 -> 128 channels, 256 x 256, same padding),
then bias and ReLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch_size = 16
in_channels = 64
out_channels = 128
size = 256
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
