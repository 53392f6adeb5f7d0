"""GRU cell written with nn.Linear and sigmoid/tanh, unrolled over 8 time steps; returns every hidden state."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.input_proj = nn.Linear(input_size, 3 * hidden_size)
        self.hidden_proj = nn.Linear(hidden_size, 3 * hidden_size)

    def forward(self, x, h0):
        h = h0
        outputs = []
        for t in range(x.size(1)):
            i_r, i_z, i_n = self.input_proj(x[:, t]).chunk(3, dim=1)
            h_r, h_z, h_n = self.hidden_proj(h).chunk(3, dim=1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            h = (1 - z) * n + z * h
            outputs.append(h)
        return torch.stack(outputs, dim=1)


batch_size = 512
num_steps = 8
input_size = 1024
hidden_size = 2048


def get_inputs():
    return [torch.randn(batch_size, num_steps, input_size), torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size]
