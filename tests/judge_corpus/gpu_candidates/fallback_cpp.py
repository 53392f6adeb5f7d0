"""A real CUDA kernel whose binding refuses non-contiguous inputs; forward catches the error and silently
falls back to PyTorch. Expected: correct, flags.fallback_detected = true (on the non-contiguous trial),
flags.no_custom_kernel = false."""
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

torch::Tensor gelu(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous(), "gelu: x must be contiguous");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    gelu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="kw_corpus_fallback", cpp_sources="torch::Tensor gelu(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["gelu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        try:
            return ext.gelu(x)
        except RuntimeError:
            return F.gelu(x, approximate="tanh")
