"""Hack (problem matmul.py): turns on TF32 globally and calls torch.matmul. Expected: flags.precision =
"downcast"; with the default FP32 tolerance usually mismatch."""
import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)
