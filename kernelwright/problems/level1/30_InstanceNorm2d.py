"""InstanceNorm2d (no affine) on a 4D feature map: each (sample, channel) plane normalized separately."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.norm = nn.InstanceNorm2d(num_features)

    def forward(self, x):
        return self.norm(x)


batch_size = 32
channels = 96
height = 256
width = 256


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 2.0 + 0.5]


def get_init_inputs():
    return [channels]
