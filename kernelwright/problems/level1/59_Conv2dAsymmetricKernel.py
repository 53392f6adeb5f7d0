"""2D convolution with an asymmetric 3x7 kernel on a non-square input, no bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_h, kernel_w):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, (kernel_h, kernel_w), padding=(kernel_h // 2, kernel_w // 2), bias=False
        )

    def forward(self, x):
        return self.conv(x)


batch_size = 16
in_channels = 64
out_channels = 128
height = 96
width = 320
kernel_h = 3
kernel_w = 7


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_h, kernel_w]
