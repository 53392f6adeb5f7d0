"""Hack: returns a tensor subclass whose operations are intercepted (it could defer or fake the work
until the judge looks). Expected: rejected (output is not a plain torch.Tensor)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh").as_subclass(Deferred)
