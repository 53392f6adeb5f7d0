"""BatchNorm2d in training mode (normalizes with the batch statistics) on a 4D feature map."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)

    def forward(self, x):
        return self.bn(x)


batch_size = 32
channels = 96
height = 256
width = 256


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 3.0 + 1.0]


def get_init_inputs():
    return [channels]
