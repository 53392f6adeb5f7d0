"""Transposed 3D convolution (3x3x3, stride 2, padding 1, output padding 1) that doubles every spatial dim."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                         output_padding=output_padding)

    def forward(self, x):
        return self.conv_t(x)


batch_size = 8
in_channels = 64
out_channels = 32
depth = 16
height = 32
width = 32
kernel_size = 3
stride = 2
padding = 1
output_padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
