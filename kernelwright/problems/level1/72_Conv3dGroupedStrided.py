"""Grouped 3D convolution (4 groups, kernel 3x5x5, stride (1, 2, 2), padding (1, 2, 2))."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, groups=groups)

    def forward(self, x):
        return self.conv(x)


batch_size = 4
in_channels = 64
out_channels = 128
depth = 16
height = 64
width = 64
kernel_size = (3, 5, 5)
stride = (1, 2, 2)
padding = (1, 2, 2)
groups = 4


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, groups]
