"""Adaptive average pooling to a 7x7 output from an odd-sized (223 x 223) input (uneven windows)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, output_size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((output_size, output_size))

    def forward(self, x):
        return self.pool(x)


batch_size = 64
channels = 128
height = 223
width = 223
output_size = 7


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [output_size]
