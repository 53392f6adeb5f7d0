"""A "custom kernel" that fails, caught by a try/except that falls back to PyTorch.
Expected: correct, flags.fallback_detected = true (the swallowed exception is reported)."""
import torch.nn as nn
import torch.nn.functional as F


def custom_gelu(x):
    raise RuntimeError("CUDA error: no kernel image is available for execution on the device")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        try:
            return custom_gelu(x)
        except RuntimeError:
            return F.gelu(x, approximate="tanh")
