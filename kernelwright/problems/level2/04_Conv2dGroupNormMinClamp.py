"""Conv2d, GroupNorm (8 groups), min over channels (keepdim), clamp to [-2, 2]."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, clamp_min, clamp_max):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.norm(self.conv(x))
        x = torch.min(x, dim=1, keepdim=True).values
        return torch.clamp(x, min=self.clamp_min, max=self.clamp_max)


batch_size = 64
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
num_groups = 8
clamp_min = -2.0
clamp_max = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, clamp_min, clamp_max]
