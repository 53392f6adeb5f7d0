"""Conv1d (kernel 5, same padding), GELU, then max pooling with window 2."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pool_size = pool_size

    def forward(self, x):
        x = F.gelu(self.conv(x))
        return F.max_pool1d(x, self.pool_size)


batch_size = 32
in_channels = 128
out_channels = 256
length = 8192
kernel_size = 5
pool_size = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_size]
