"""ConvTranspose3d (no bias), ReLU, then GroupNorm (4 groups)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, bias=False)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return self.norm(torch.relu(self.conv_t(x)))


batch_size = 16
in_channels = 32
out_channels = 64
depth = 14
height = 30
width = 30
kernel_size = 3
groups = 4


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
