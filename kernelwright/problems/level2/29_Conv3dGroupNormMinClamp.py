"""Conv3d, GroupNorm (8 groups), min over channels (keepdim), clamp to [0, 1]."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups, clamp_min, clamp_max):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(groups, out_channels)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.norm(self.conv(x))
        x = torch.min(x, dim=1, keepdim=True)[0]
        return torch.clamp(x, self.clamp_min, self.clamp_max)


batch_size = 16
in_channels = 16
out_channels = 64
depth = 18
height = 34
width = 34
kernel_size = 3
groups = 8
clamp_min = 0.0
clamp_max = 1.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups, clamp_min, clamp_max]
