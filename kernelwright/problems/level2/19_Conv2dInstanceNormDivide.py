"""Conv2d, InstanceNorm2d, then division by a constant."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, divisor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.InstanceNorm2d(out_channels)
        self.divisor = divisor

    def forward(self, x):
        return self.norm(self.conv(x)) / self.divisor


batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
divisor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, divisor]
