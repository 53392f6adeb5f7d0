"""The LLM prompt: ask a model to rewrite a problem's `Model` as a `ModelNew` with custom CUDA kernels.

Same contract as the KernelBench prompt (one-shot example, then the architecture verbatim), in our own
words, with the rules our judge enforces spelled out so a model does not lose points on them.
"""

from __future__ import annotations

EXAMPLE_ARCHITECTURE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b, c):
        return a * b + c


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''

EXAMPLE_ANSWER = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# CUDA side: the kernel and a thin launcher (no torch headers, so it compiles fast).
cuda_source = r"""
#include <cuda_runtime.h>

__global__ void fma_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           const float* __restrict__ c, float* __restrict__ out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        out[i] = fmaf(a[i], b[i], c[i]);
    }
}

void fma_launch(const float* a, const float* b, const float* c, float* out, long long n,
                cudaStream_t stream) {
    int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    if (blocks > 65535LL * 8) blocks = 65535LL * 8;
    if (blocks > 0) fma_kernel<<<(unsigned)blocks, threads, 0, stream>>>(a, b, c, out, n);
}
"""

# C++ side: checks, allocation, and the binding torch calls.
cpp_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

void fma_launch(const float* a, const float* b, const float* c, float* out, long long n, cudaStream_t stream);

torch::Tensor fused_fma(torch::Tensor a, torch::Tensor b, torch::Tensor c) {
    TORCH_CHECK(a.is_cuda() && a.scalar_type() == torch::kFloat32, "expected float32 CUDA tensors");
    a = a.contiguous(); b = b.contiguous(); c = c.contiguous();
    auto out = torch::empty_like(a);
    fma_launch(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), out.data_ptr<float>(),
               a.numel(), at::cuda::getCurrentCUDAStream());
    return out;
}
"""

fused = load_inline(
    name="fused_fma_example",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["fused_fma"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b, c):
        return fused.fused_fma(a, b, c)
'''

INTRO = """You are an expert CUDA performance engineer. Rewrite the PyTorch architecture below so that it \
runs faster on the GPU, by replacing some or all of its operators with custom CUDA kernels.

You choose which operators to replace. Good answers fuse operators into one kernel (for example a matmul \
and its activation, or a chain of pointwise ops), change the algorithm where it pays (online softmax, \
Welford statistics, single-pass reductions, algebraic simplifications), and keep memory traffic minimal."""

RULES = """Rules your answer is judged by:
- Name the new class `ModelNew`, with the same constructor arguments as `Model` and the same parameters \
and buffers (same names, shapes and creation order), so a seeded construction gives identical weights.
- The outputs must match `Model`'s within float32 tolerance (atol = rtol = 1e-4) on several random inputs; \
do not enable TF32 or lower the precision.
- Embed the CUDA code with `torch.utils.cpp_extension.load_inline`; launch on the current CUDA stream.
- Do not cache outputs, mutate inputs, or call the original `Model`.
- Reply with one complete Python file in a single ```python code block, with no testing code."""


def build_prompt(architecture_source: str, include_example: bool = True, hardware: str | None = None) -> str:
    """The full prompt for one problem; `architecture_source` is quoted verbatim."""
    parts = [INTRO]
    if include_example:
        parts.append(
            "Here is an example of the syntax. The example architecture is:\n\n"
            f"```python\n{EXAMPLE_ARCHITECTURE}```\n\n"
            "An optimized version with a custom CUDA kernel looks like this:\n\n"
            f"```python\n{EXAMPLE_ANSWER}```"
        )
    if hardware:
        parts.append(f"The target GPU is an {hardware}.")
    architecture = architecture_source.rstrip()
    parts.append(f"You are given the following architecture:\n\n```python\n{architecture}\n```")
    parts.append(RULES)
    parts.append("Write the optimized architecture `ModelNew` now.")
    return "\n\n".join(parts) + "\n"
