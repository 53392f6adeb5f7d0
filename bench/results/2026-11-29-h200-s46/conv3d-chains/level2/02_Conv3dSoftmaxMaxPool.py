"""Conv3d from 3 channels, softmax over the channels, MaxPool3d."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool3d(pool)

    def forward(self, x):
        return self.pool(torch.softmax(self.conv(x), dim=1))


def get_inputs():
    return [torch.randn(64, 3, 16, 64, 64)]


def get_init_inputs():
    return [3, 16, 3, 2]
