"""Conv3d (padding 1), GroupNorm (8 groups of 4 channels), Mish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return F.mish(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(32, 16, 16, 32, 32)]


def get_init_inputs():
    return [16, 32, 3, 8]
