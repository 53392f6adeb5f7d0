"""Deep narrow MLP on one feature vector: 24 Linear + ReLU layers of width 512, then a linear head.

Launch-bound: 49 ATen ops a forward (25 matrix-vector products, 24 ReLUs); each product reads a 1 MiB
weight (under a microsecond of HBM bandwidth on an H100) and each ReLU touches 512 values.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, hidden_features, num_layers, out_features):
        super().__init__()
        layers = [nn.Linear(in_features, hidden_features), nn.ReLU()]
        for _ in range(num_layers - 1):
            layers += [nn.Linear(hidden_features, hidden_features), nn.ReLU()]
        layers.append(nn.Linear(hidden_features, out_features))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


batch_size = 1
in_features = 256
hidden_features = 512
num_layers = 24
out_features = 10


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, num_layers, out_features]
