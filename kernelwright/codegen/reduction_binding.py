"""The C++ binding of the reduction and scan families (convention in `codegen/kernel.py`, shared prelude
in `codegen/binding.py`): check the inputs, make them contiguous (the kernels address them with
compile-time strides), allocate the outputs (and the launcher's workspace, where it has one), call the
launcher on the current stream."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelwright.ir.graph import Node


def binding_source(name: str, inputs: Sequence[Node], outputs: Sequence[Node],
                   workspace: bool = False) -> str:
    """`workspace`: the launcher takes a `void* workspace` of `size_t NAME_workspace()` bytes, allocated per
    call on the current stream (scratch that must not be shared by launches on two streams)."""
    params = [f"const float* in{k}" for k in range(len(inputs))]
    params += [f"{'long long' if o.dtype == torch.int64 else 'float'}* out{k}" for k, o in enumerate(outputs)]
    params += ["void* workspace"] if workspace else []
    lines = [
        f"int {name}_launch({', '.join(params + ['cudaStream_t stream'])});",
        *([f"size_t {name}_workspace();"] if workspace else []),
        "",
        f"std::vector<at::Tensor> {name}(std::vector<at::Tensor> inputs) {{",
        f'  KW_CHECK(inputs.size() == {len(inputs)}, "{name}: expected {len(inputs)} inputs, got ", '
        "inputs.size());",
    ]
    # every input is checked as given before any of them is copied or read
    for k, node in enumerate(inputs):
        shape = ", ".join(str(s) for s in node.shape)
        lines.append(f'  kw_check_input(inputs[{k}], at::kFloat, {{{shape}}}, "{name}", {k});')
    lines += [f"  const at::Tensor in{k} = inputs[{k}].contiguous();" for k in range(len(inputs))]
    lines.append("  const c10::cuda::OptionalCUDAGuard guard(in0.device());")
    for k, node in enumerate(outputs):
        dtype = "at::kLong" if node.dtype == torch.int64 else "at::kFloat"
        shape = ", ".join(str(s) for s in node.shape)
        lines.append(f"  at::Tensor out{k} = at::empty({{{shape}}}, in0.options().dtype({dtype}));")
    if workspace:
        lines.append(f"  at::Tensor workspace = at::empty({{static_cast<int64_t>({name}_workspace())}}, "
                     "in0.options().dtype(at::kByte));")
    args = [f"in{k}.data_ptr<float>()" for k in range(len(inputs))]
    args += [f"reinterpret_cast<long long*>(out{k}.data_ptr<int64_t>())" if o.dtype == torch.int64
             else f"out{k}.data_ptr<float>()" for k, o in enumerate(outputs)]
    args += ["workspace.data_ptr()"] if workspace else []
    args.append("c10::cuda::getCurrentCUDAStream().stream()")
    lines += [f'  kw_check_launch({name}_launch({", ".join(args)}), "{name}");',
              f"  return {{{', '.join(f'out{k}' for k in range(len(outputs)))}}};",
              "}"]
    return "\n".join(lines) + "\n"
