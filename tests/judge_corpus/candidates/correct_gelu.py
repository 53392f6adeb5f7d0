"""Correct, pure PyTorch (problem gelu.py). Expected: correct, flags.no_custom_kernel = true.

It imports `load_inline` without calling it: the judge wraps the loader before the candidate is imported,
and that wrapper must not read as "the candidate uses kernelwright" (seen on the GPU, session 3). Its
source mentions allow_tf32 (here): the static report warns, but flags.precision stays "fp32" (only a
measured change of torch's precision switches is a downcast; our own 3xTF32 GEMM files were flagged)."""
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
