"""Linear, mean over the output features (keepdim), scale: algebraically a matrix-vector product."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        x = self.linear(x)
        x = torch.mean(x, dim=1, keepdim=True)
        return x * self.scale


batch_size = 8192
in_features = 4096
out_features = 8192
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
