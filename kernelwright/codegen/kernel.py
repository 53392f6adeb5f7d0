"""What every kernel family renders: the CUDA side and the C++ binding of one fused group.

Binding convention (all families): the C++ function is
`std::vector<at::Tensor> NAME(std::vector<at::Tensor> inputs)`, inputs in `group.inputs` order (const
leaves are baked into the code, never passed), outputs returned in `group.outputs` order. The CUDA side
includes only `cuda_runtime.h` and our device headers (`#include "kw_common.cuh"` lines are replaced by
the header text when the extension is assembled) and exposes a launcher taking raw pointers, sizes and a
`cudaStream_t`; the binding declares that launcher, gets the stream from
`c10::cuda::getCurrentCUDAStream()` and calls it. Keeping torch headers out of the `.cu` is what makes
nvcc fast (about 1 s instead of about 60 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

TEMPLATE_DIR = Path(__file__).parent / "cuda"


@dataclass(frozen=True)
class KernelSource:
    name: str          # C identifier of the host function exposed to Python
    cuda: str          # kernels + a launcher taking raw pointers/sizes/cudaStream_t; no torch headers
    cpp: str           # the binding: takes the tensors, checks them, allocates outputs, calls the launcher
    ir_comment: str    # the IR this kernel implements (printed above it in the emitted file)


def source_template(filename: str, fragment: bool = False) -> Template:
    """A source template of `codegen/cuda/`: a kernel (`.cu.in`) or a binding (`.cpp.in`) with
    `string.Template` holes (`$name`, `${name}`; `$$` is a `$`). A `fragment` fills a hole of another
    template on a line of its own: its file's final newline belongs to that line, so it is dropped."""
    text = (TEMPLATE_DIR / filename).read_text()
    return Template(text.removesuffix("\n") if fragment else text)
