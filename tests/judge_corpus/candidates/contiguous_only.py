"""Reads the input's memory as if it were contiguous (what a raw data_ptr kernel without .contiguous()
does). Expected: mismatch on the non-contiguous trial."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        flat = torch.as_strided(x, (x.numel(),), (1,))
        return F.gelu(flat, approximate="tanh").view(x.shape)
