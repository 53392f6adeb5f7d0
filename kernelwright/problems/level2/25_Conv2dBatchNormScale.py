"""Conv2d (3x3, no padding), BatchNorm2d in training mode, then scaling by a constant."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scale = scale

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scale


batch_size = 64
in_channels = 32
out_channels = 64
height = 126
width = 126
kernel_size = 3
scale = 1.75


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
