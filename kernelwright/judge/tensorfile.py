"""How the judge's processes hand tensors to each other: a file in the judge's work folder per message.

Two forms, read by the same `load`:
- plain: `torch.save` without a checksum (the files live for one trial, on this host), read back
  memory-mapped (pages are copied once, straight to their device);
- shared (`save(..., share=True)`, the judge on CUDA): every CUDA tensor is sent as a CUDA IPC handle to
  the sender's memory (torch.multiprocessing's mechanism: the receiver maps the same allocation; the sender's
  memory stays reserved until the receiver drops its tensor); only the structure, small CPU tensors and the
  handles go through the file. A trial of a 4 GiB input and a 4 GiB output then moves no tensor data through
  the host at all, where the plain form copied each of them GPU -> host -> file -> host -> GPU.

Only the trusted side shares. A handle maps the sender's whole cudaMalloc segment, readable and writable,
so the reference worker shares nothing but copies made for the candidate in a private memory pool: the
trial's inputs (the reference runs its Model on its own draw) and empty output buffers, which the candidate
fills (`fill_output_buffers`) and names in its plain outputs file (`restore_output_buffers`). These are
made once per layout and refilled every trial (`ReferenceWorker.slot`): what is shared stays the size of one
trial's inputs and outputs however many trials run. The reference never opens a handle the candidate made
(`load(..., accept_shared=False)`). Each shared file is loaded exactly once (a second load would release the
sender's reference count twice).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernelwright.judge.outputs import flatten, map_leaves

SHARED_FORMAT = "kernelwright-cuda-ipc-1"
TRANSPORT_ENV = "KERNELWRIGHT_JUDGE_TRANSPORT"  # "files": never share CUDA memory (machines without IPC)
_MARKER = "__kernelwright_cuda_tensor__"
BUFFER_MARKER = "__kernelwright_output_buffer__"


def sharing_enabled(device: str) -> bool:
    """Whether the judge shares CUDA tensors between its processes (on CUDA, unless turned off)."""
    return device == "cuda" and os.environ.get(TRANSPORT_ENV, "").strip().lower() != "files"


def save(value: object, path: str | Path, share: bool = False) -> None:
    """Write `value` (tensors, numbers, strings in lists/tuples/dicts) for another process's `load`. With
    `share`, CUDA tensors go as IPC handles (see the module docstring); the others are written plainly."""
    if share:
        handles: list[dict] = []
        value = {"format": SHARED_FORMAT, "value": _replace_cuda(value, handles), "cuda": handles}
    _save_plain(value, path)


def load(path: str | Path, map_location: str | torch.device | None = None,
         accept_shared: bool = True) -> object:
    """What `save` wrote: tensors (and plain containers) only. Shared CUDA tensors come back mapped from the
    sender's memory (copy them before use: the sender's memory is not this process's). `accept_shared=False`
    (the reference reading the candidate's files) refuses a shared file."""
    value = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    if isinstance(value, dict) and value.get("format") == SHARED_FORMAT:
        if not accept_shared:
            raise ValueError("a file of shared CUDA tensors, which this process does not accept")
        tensors = [_open(handle) for handle in value["cuda"]]
        return _unmark(value["value"], _MARKER, lambda index: tensors[int(index)])
    return value


def output_buffers(outputs: Any,
                   allocate: Callable[..., torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """{path: dense tensor} for every non-empty CUDA tensor leaf of `outputs` (paths as `outputs.flatten`
    names them), same shape and dtype, from `allocate(shape, stride, dtype, device)` (the reference's
    shared slots; by default a new tensor)."""
    allocate = allocate or _new_tensor
    return {path: allocate(leaf.shape, _dense_strides(leaf.shape), leaf.dtype, leaf.device)
            for path, leaf in flatten(outputs)
            if isinstance(leaf, torch.Tensor) and leaf.is_cuda and leaf.numel() > 0}


def _new_tensor(shape: torch.Size, stride: tuple[int, ...], dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    return torch.empty_strided(shape, stride, dtype=dtype, device=device)


def _dense_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(tuple(shape)):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def snapshot(outputs: Any, buffers: dict[str, torch.Tensor]) -> Any:
    """`outputs` copied now: each tensor whose path has a buffer of its shape, dtype and device copied into
    that buffer (the reference's memory: no second copy of a large output here), every other one cloned."""
    def copy(value: torch.Tensor, path: str) -> torch.Tensor:
        buffer = _buffer_for(value, path, buffers)
        return value.detach().clone() if buffer is None else buffer.copy_(value.detach())

    return _map_with_paths(outputs, copy)


def fill_output_buffers(outputs: Any, buffers: dict[str, torch.Tensor]) -> Any:
    """`outputs` for a plain file: each tensor whose path has a buffer of its shape, dtype and device is
    copied into it (unless it is that buffer: a `snapshot`), waited for, and replaced by a marker; every other
    tensor goes to the CPU."""
    def move(value: torch.Tensor, path: str) -> Any:
        buffer = _buffer_for(value, path, buffers)
        if buffer is None:
            return value.detach().cpu()
        if value is not buffer:
            buffer.copy_(value.detach())
        return {BUFFER_MARKER: path}

    moved = _map_with_paths(outputs, move)
    if any(buffer.is_cuda for buffer in buffers.values()):
        torch.cuda.synchronize()  # the copies are complete before the reply
    return moved


def _buffer_for(value: torch.Tensor, path: str, buffers: dict[str, torch.Tensor]) -> torch.Tensor | None:
    buffer = buffers.get(path)
    if (buffer is not None and buffer.shape == value.shape and buffer.dtype == value.dtype
            and buffer.device == value.device):
        return buffer
    return None


def _map_with_paths(value: Any, fn: Callable[[torch.Tensor, str], Any], path: str = "output") -> Any:
    """`value` with `fn(tensor, path)` applied to every tensor leaf, paths as `outputs.flatten` names them."""
    if isinstance(value, (list, tuple)):
        return type(value)(_map_with_paths(v, fn, f"{path}[{i}]") for i, v in enumerate(value))
    if isinstance(value, dict):
        return {k: _map_with_paths(v, fn, f"{path}[{k!r}]") for k, v in value.items()}
    return fn(value, path) if isinstance(value, torch.Tensor) else value


def restore_output_buffers(value: Any, buffers: dict[str, torch.Tensor]) -> Any:
    """The candidate's outputs with each marker replaced by the reference's own buffer of that path."""
    def buffer(path: object) -> torch.Tensor:
        if not isinstance(path, str) or path not in buffers:
            raise ValueError(f"the outputs name an output buffer that was not given: {path!r}")
        return buffers[path]

    return _unmark(value, BUFFER_MARKER, buffer)


def copy_keep_layout(value: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """A copy of `value` on `device` with the same strides (a non-contiguous trial stays non-contiguous;
    `clone` makes a strided rank-1 view contiguous), in memory of the current allocation context."""
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device).copy_(value)


def _save_plain(value: object, path: str | Path) -> None:
    config = getattr(getattr(torch.utils, "serialization", None), "config", None)
    options = getattr(config, "save", None)
    if options is None or not hasattr(options, "compute_crc32"):
        torch.save(value, path)
        return
    previous = options.compute_crc32
    options.compute_crc32 = False
    try:
        torch.save(value, path)
    finally:
        options.compute_crc32 = previous


def _replace_cuda(value: Any, handles: list[dict]) -> Any:
    """`value` with each non-empty CUDA tensor replaced by a marker holding its index in `handles`."""
    def mark(tensor: torch.Tensor) -> Any:
        if not tensor.is_cuda or tensor.numel() == 0:
            return tensor
        handles.append(_share(tensor))
        return {_MARKER: len(handles) - 1}

    return map_leaves(value, mark)


def _unmark(value: Any, marker: str, lookup) -> Any:
    """`value` with each {marker: key} replaced by lookup(key)."""
    if isinstance(value, dict) and set(value) == {marker}:
        return lookup(value[marker])
    if isinstance(value, (list, tuple)):
        return type(value)(_unmark(v, marker, lookup) for v in value)
    if isinstance(value, dict):
        return {k: _unmark(v, marker, lookup) for k, v in value.items()}
    return value


def _share(tensor: torch.Tensor) -> dict:
    """The fields torch.multiprocessing sends for a CUDA tensor, as JSON-able plain values."""
    tensor = tensor.detach()
    (device, handle, storage_bytes, storage_offset_bytes, counter_handle, counter_offset, event_handle,
     event_sync) = tensor.untyped_storage()._share_cuda_()
    return {
        "size": list(tensor.shape), "stride": list(tensor.stride()), "offset": tensor.storage_offset(),
        "dtype": str(tensor.dtype).removeprefix("torch."), "device": int(device), "handle": _hex(handle),
        "storage_bytes": int(storage_bytes), "storage_offset_bytes": int(storage_offset_bytes),
        "counter_handle": _hex(counter_handle), "counter_offset": int(counter_offset),
        "event_handle": _hex(event_handle), "event_sync": bool(event_sync),
    }


def _open(fields: dict) -> torch.Tensor:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    def integers(key: str) -> list[int]:
        values = fields[key]
        if not isinstance(values, list) or not all(type(v) is int for v in values):
            raise ValueError(f"shared tensor: bad {key}")
        return values

    for key in ("offset", "device", "storage_bytes", "storage_offset_bytes", "counter_offset"):
        if type(fields.get(key)) is not int or fields[key] < 0:
            raise ValueError(f"shared tensor: bad {key}")
    dtype = getattr(torch, str(fields.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"shared tensor: unsupported dtype {fields.get('dtype')!r}")
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(integers("size")), tuple(integers("stride")), fields["offset"],
        torch.UntypedStorage, dtype, fields["device"], _bytes(fields["handle"]),
        fields["storage_bytes"], fields["storage_offset_bytes"], False, _bytes(fields["counter_handle"]),
        fields["counter_offset"], _bytes(fields["event_handle"]), bool(fields["event_sync"]),
    )


def _hex(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).hex()


def _bytes(value: object) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("shared tensor: bad handle")
    return bytes.fromhex(value)
