"""Conv2d (3x3, no padding), the max over the channels at every pixel (kept as one channel), scaled, sigmoid."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = scale

    def forward(self, x):
        x = torch.amax(self.conv(x), dim=1, keepdim=True)
        return torch.sigmoid(x * self.scale)


batch_size = 32
in_channels = 64
out_channels = 96
height = 130
width = 130
kernel_size = 3
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
