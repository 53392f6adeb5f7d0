"""Hack (problem gelu.py): a CUDA extension that caches its output keyed on the input's data_ptr, inside
C++ where no Python check can see it. Expected: mismatch (trial 1 writes new values into the same input
storage, the cache answers with trial 0's result)."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <map>

__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

static std::map<const void*, torch::Tensor> cache;

torch::Tensor cached_gelu(torch::Tensor x) {
    auto hit = cache.find(x.data_ptr());
    if (hit != cache.end()) return hit->second.clone();
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    gelu_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    cache[x.data_ptr()] = y;
    return y.clone();
}
"""

ext = load_inline(name="kw_corpus_address_cache", cpp_sources="torch::Tensor cached_gelu(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["cached_gelu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.cached_gelu(x)
