"""CUDA/C++ source per kernel family (`registry.RENDERERS`) printed into the templates of `cuda/`
(`kernel.source_template`), the shared device headers (`cuda/kw_common.cuh`, `cuda/kw_reduce.cuh`) and the
build system (`build.py`). Codegen only prints what `fuse/` decided."""

from kernelwright.codegen.kernel import KernelSource
from kernelwright.codegen.registry import RENDERERS, render_group

__all__ = ["RENDERERS", "KernelSource", "render_group"]
