"""CUDA/C++ source per kernel family (`registry.RENDERERS`), the shared device header
(`cuda/kw_common.cuh`) and the build system (`build.py`). Codegen only prints what `fuse/` decided."""

from kernelwright.codegen.kernel import KernelSource
from kernelwright.codegen.registry import RENDERERS, render_group

__all__ = ["RENDERERS", "KernelSource", "render_group"]
