"""A kernel that writes far out of bounds: an illegal memory access that poisons the CUDA context.
Expected: runtime_error (CUDA error); the judge itself survives and judges the next candidate."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void wild_write(float* y) { y[(1LL << 40) + threadIdx.x] = 1.0f; }

torch::Tensor broken(torch::Tensor x) {
    auto y = torch::empty_like(x);
    wild_write<<<1, 32>>>(y.data_ptr<float>());
    return y;
}
"""

ext = load_inline(name="kw_corpus_illegal_address", cpp_sources="torch::Tensor broken(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["broken"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.broken(x)
