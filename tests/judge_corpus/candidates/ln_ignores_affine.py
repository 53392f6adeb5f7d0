"""LayerNorm (problem layernorm.py) hard-coded without its affine weight and bias: right only while they are
still 1 and 0. Expected: mismatch on the perturbed_params trial."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return F.layer_norm(x, self.norm.normalized_shape, eps=self.norm.eps)
