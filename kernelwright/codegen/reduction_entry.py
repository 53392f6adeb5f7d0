"""The entry points of the reduction, pool and scan families (convention in `codegen/kernel.py`): every
input is made contiguous (the kernels address them with compile-time strides) and the launcher gets the
raw pointers, the workspace where it has one, and the stream."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelwright.codegen.kernel import KernelSpec, entry_points, typed, typed_inputs
from kernelwright.codegen.pointwise import c_type
from kernelwright.ir.graph import Node


def contiguous_entry(name: str, inputs: Sequence[Node], outputs: Sequence[Node],
                     workspace: bool = False) -> tuple[str, KernelSpec]:
    """The C entry points and the spec of a launcher `int NAME_launch(const float* in0.. (each input's own
    C type: `const bool*` for a mask), float* out0.. (long long* for int64 outputs), [void* workspace,]
    cudaStream_t)`. `workspace`: the launcher takes
    `size_t NAME_workspace()` bytes of scratch, allocated per call on the current stream (scratch that must
    not be shared by launches on two streams)."""
    args = [f"static_cast<const {c_type(i.dtype)}*>(in[{k}].data)" for k, i in enumerate(inputs)]
    args += [f"static_cast<{'long long' if o.dtype == torch.int64 else 'float'}*>(out[{k}])"
             for k, o in enumerate(outputs)]
    args += ["workspace"] if workspace else []
    body = f"  return kw::launch_error({name}_launch({', '.join(args + ['stream'])}));"
    cuda = entry_points(name, body, f"{name}_workspace()" if workspace else "0")
    # No input names in the spec: the kernel's name does not hash them, and equal groups share one kernel.
    operands = tuple((k, (("contiguous",),), None) for k in range(len(inputs)))
    spec = KernelSpec(typed_inputs(inputs, names=False), operands, typed(outputs))
    return cuda, spec
