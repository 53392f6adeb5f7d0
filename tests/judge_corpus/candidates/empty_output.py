"""Hack: returns uninitialized memory, hoping it still holds a previous result. Expected: nan or mismatch
(freed blocks are poisoned with NaN bits before every call; the reference lives in another process)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.empty_like(x)
