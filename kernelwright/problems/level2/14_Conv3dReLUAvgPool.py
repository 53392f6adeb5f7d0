"""Conv3d (3x3x3, same padding), ReLU, then 2x2x2 average pooling."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pool_size = pool_size

    def forward(self, x):
        x = torch.relu(self.conv(x))
        return F.avg_pool3d(x, self.pool_size)


batch_size = 16
in_channels = 32
out_channels = 64
depth = 32
height = 64
width = 64
kernel_size = 3
pool_size = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_size]
