"""ConvTranspose3d (stride 1, padding 1), InstanceNorm3d, Tanh."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, padding=1)
        self.norm = nn.InstanceNorm3d(out_channels)

    def forward(self, x):
        return torch.tanh(self.norm(self.conv_t(x)))


def get_inputs():
    return [torch.randn(16, 64, 16, 32, 32)]


def get_init_inputs():
    return [64, 32, 3]
