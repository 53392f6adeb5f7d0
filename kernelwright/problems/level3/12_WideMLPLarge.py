"""Three-layer GELU MLP (8192 -> 2048 -> 2048 -> 512) over a batch of 131072 wide feature vectors (4 GiB).

Full size: inputs 4.00 GiB, outputs 256.00 MiB, parameters 84.02 MiB.
Ideal on an H100: 35.01 ms (5.77 TFLOP at 3xTF32's 165 TFLOP/s, the FP32 GEMMs' ceiling;
86.28 ms at FP32's 66.9 TFLOP/s; 4.33 GiB moved once at 3.0 TB/s: 1.55 ms).
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden_features),
            nn.GELU(),
            nn.Linear(hidden_features, hidden_features),
            nn.GELU(),
            nn.Linear(hidden_features, out_features),
        )

    def forward(self, x):
        return self.layers(x)


batch_size = 131072
in_features = 8192
hidden_features = 2048
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
