"""Every kind of state an emitted file keeps or uses per call, in one model (one extension) for the GPU tests
of issue 18 #6 and #7 (tests/emit/test_weights_and_streams_gpu.py):
- `fc`: a Linear large enough for the 3xTF32 route, whose weight split the binding keeps between calls,
  then a softmax over rows (reduction family);
- `scaled` times `scale`: folded into derived weights (Python, every call) that a 3xTF32 GEMM reads;
- a mean of squares over 4M elements: a split-row reduction (partials and counters per launch);
- a pointwise chain;
- `big`: an 8192x8192 weight, for the timing of the split's fingerprint check against the split itself."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, big_features):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.scaled = nn.Linear(features, features)
        self.scale = nn.Parameter(torch.rand(features) + 0.5)
        self.big = nn.Linear(big_features, big_features, bias=False)

    def forward(self, x, y, w, z):
        probabilities = torch.softmax(self.fc(x), dim=-1)
        scaled = self.scaled(x) * self.scale
        loss = torch.mean((y - 0.25) ** 2)
        gated = torch.sigmoid(w) * 3.0 - 1.0
        return probabilities, scaled, loss, gated, self.big(z)


rows = 4096
features = 1024
loss_elements = 4194304
big_rows = 1024
big_features = 8192


def get_inputs():
    return [torch.randn(rows, features), torch.randn(loss_elements), torch.randn(rows, features),
            torch.randn(big_rows, big_features)]


def get_init_inputs():
    return [features, big_features]
