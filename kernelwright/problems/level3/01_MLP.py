"""Four-layer MLP (Linear + ReLU stack) on a batch of feature vectors."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size_1, hidden_size_2, hidden_size_3, output_size):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_size, hidden_size_1),
            nn.ReLU(),
            nn.Linear(hidden_size_1, hidden_size_2),
            nn.ReLU(),
            nn.Linear(hidden_size_2, hidden_size_3),
            nn.ReLU(),
            nn.Linear(hidden_size_3, output_size),
        )

    def forward(self, x):
        return self.layers(x)


batch_size = 2048
input_size = 4096
hidden_size_1 = 4096
hidden_size_2 = 2048
hidden_size_3 = 1024
output_size = 1000


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size_1, hidden_size_2, hidden_size_3, output_size]
