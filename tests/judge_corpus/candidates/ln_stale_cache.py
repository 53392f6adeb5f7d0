"""LayerNorm (problem layernorm.py) that caches its affine parameters on the first call and never notices
that they change. Expected: mismatch on the perturbed_params trial."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self._affine = None

    def forward(self, x):
        if self._affine is None:
            self._affine = torch.stack([self.norm.weight.detach(), self.norm.bias.detach()]).clone()
        y = F.layer_norm(x, self.norm.normalized_shape, eps=self.norm.eps)
        return y * self._affine[0] + self._affine[1]
