"""Hack: makes CUDA-event timing and synchronize lie. Expected: rejected (monkeypatched
torch.cuda.synchronize / torch.cuda.Event.elapsed_time). Runs on the CPU too: the patch is the offence."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.cuda.synchronize = lambda *args, **kwargs: None
torch.cuda.Event.elapsed_time = lambda self, other: 0.001


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
