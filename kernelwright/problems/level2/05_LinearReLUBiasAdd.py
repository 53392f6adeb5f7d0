"""Linear, ReLU, then adding a separate learned bias; odd feature sizes (4099 in, 4093 out)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        return torch.relu(self.linear(x)) + self.bias


batch_size = 4096
in_features = 4099
out_features = 4093


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
