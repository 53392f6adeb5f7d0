"""Linear, swish (x * sigmoid(x)), scale, clamp to [-1, 1]."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale, clamp_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.clamp_value = clamp_value

    def forward(self, x):
        x = self.linear(x)
        x = x * torch.sigmoid(x)
        x = x * self.scale
        return torch.clamp(x, -self.clamp_value, self.clamp_value)


batch_size = 8192
in_features = 4096
out_features = 4096
scale = 2.0
clamp_value = 1.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale, clamp_value]
