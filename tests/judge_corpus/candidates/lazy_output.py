"""Hack: returns a lazy object that computes only when converted, so the timed call does no work.
Expected: rejected (output is not a tensor)."""
import torch.nn as nn
import torch.nn.functional as F


class Lazy:
    def __init__(self, x):
        self.x = x

    def __torch_function__(self, func, types, args=(), kwargs=None):
        args = [F.gelu(a.x, approximate="tanh") if isinstance(a, Lazy) else a for a in args]
        return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return Lazy(x)
