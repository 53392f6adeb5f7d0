"""LayerNorm (problem layernorm.py) with a derived tensor (weight and bias stacked) cached and recomputed
when either parameter's `_version` changes, as DESIGN.md §1 asks. Expected: correct."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self._cache_key = None
        self._affine = None

    def forward(self, x):
        weight, bias = self.norm.weight, self.norm.bias
        key = (weight._version, bias._version, weight.data_ptr(), bias.data_ptr())
        if key != self._cache_key:
            self._affine = torch.stack([weight.detach(), bias.detach()])
            self._cache_key = key
        y = F.layer_norm(x, self.norm.normalized_shape, eps=self.norm.eps)
        return y * self._affine[0] + self._affine[1]
