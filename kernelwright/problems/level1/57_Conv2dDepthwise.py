"""Depthwise 2D convolution (3x3, groups = channels) on an odd-sized (127 x 127) feature map."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x):
        return self.conv(x)


batch_size = 48
channels = 256
height = 127
width = 127
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
