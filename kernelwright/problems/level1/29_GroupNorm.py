"""GroupNorm with 8 groups on a 4D feature map."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, num_channels)

    def forward(self, x):
        return self.norm(x)


batch_size = 32
channels = 128
num_groups = 8
height = 224
width = 224


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 2.0 - 1.0]


def get_init_inputs():
    return [num_groups, channels]
