"""LSTM cell written with nn.Linear and sigmoid/tanh, unrolled over 12 time steps; returns every hidden state."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.input_proj = nn.Linear(input_size, 4 * hidden_size)
        self.hidden_proj = nn.Linear(hidden_size, 4 * hidden_size)

    def forward(self, x, h0, c0):
        h, c = h0, c0
        outputs = []
        for t in range(x.size(1)):
            gates = self.input_proj(x[:, t]) + self.hidden_proj(h)
            i, f, g, o = gates.chunk(4, dim=1)
            i = torch.sigmoid(i)
            f = torch.sigmoid(f)
            g = torch.tanh(g)
            o = torch.sigmoid(o)
            c = f * c + i * g
            h = o * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


batch_size = 256
num_steps = 12
input_size = 2048
hidden_size = 2048


def get_inputs():
    return [
        torch.randn(batch_size, num_steps, input_size),
        torch.randn(batch_size, hidden_size),
        torch.randn(batch_size, hidden_size),
    ]


def get_init_inputs():
    return [input_size, hidden_size]
