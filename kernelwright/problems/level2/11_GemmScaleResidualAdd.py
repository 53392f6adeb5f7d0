"""Square linear layer, scaled, plus the input as a residual: x + scale * linear(x)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x):
        return x + self.scale * self.linear(x)


batch_size = 8192
features = 4096
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]
