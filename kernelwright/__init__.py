"""kernelwright: makes PyTorch models faster with custom CUDA kernels, automatically and verifiably."""

__version__ = "0.1.0"
