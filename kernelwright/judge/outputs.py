"""Output structures: flattening nested outputs into leaves, and checking that a candidate returned plain,
materialized tensors (not subclasses, lazy wrappers or meta tensors)."""

from __future__ import annotations

import numbers
from typing import Any

import torch

Leaf = Any  # a torch.Tensor, a Python number, a bool or None


def flatten(value: Any, path: str = "output") -> list[tuple[str, Leaf]]:
    """[(path, leaf)] in a stable order; tuples/lists are indexed, dicts by sorted key."""
    if isinstance(value, (list, tuple)):
        leaves = []
        for i, item in enumerate(value):
            leaves += flatten(item, f"{path}[{i}]")
        return leaves
    if isinstance(value, dict):
        leaves = []
        for key in sorted(value, key=str):
            leaves += flatten(value[key], f"{path}[{key!r}]")
        return leaves
    return [(path, value)]


def structure(value: Any) -> Any:
    """A JSON-able skeleton of an output: 'tensor', 'number', 'none' in nested lists/dicts (a list and a
    tuple of the same items are the same structure)."""
    if isinstance(value, (list, tuple)):
        return [structure(v) for v in value]
    if isinstance(value, dict):
        return {str(k): structure(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, torch.Tensor):
        return "tensor"
    if value is None:
        return "none"
    if isinstance(value, (bool, numbers.Number)):
        return "number"
    return type(value).__name__


def not_plain(value: Any, device: str) -> str | None:
    """Why an output is not acceptable as returned (None when it is): every tensor must be exactly a
    `torch.Tensor` (a subclass can defer or fake work until it is inspected), strided, on `device`, and
    no leaf may be an arbitrary object."""
    for path, leaf in flatten(value):
        if isinstance(leaf, torch.Tensor):
            if type(leaf) is not torch.Tensor and not isinstance(leaf, torch.nn.Parameter):
                kind = f"{type(leaf).__module__}.{type(leaf).__qualname__}"
                return f"{path} is a tensor subclass ({kind}), not a plain torch.Tensor"
            if leaf.layout != torch.strided:
                return f"{path} has layout {leaf.layout}, not a materialized strided tensor"
            if leaf.device.type == "meta":
                return f"{path} is a meta tensor (no data)"
        elif not (leaf is None or isinstance(leaf, (bool, numbers.Number))):
            return f"{path} is a {type(leaf).__module__}.{type(leaf).__qualname__}, not a tensor or a number"
    return None


def wrong_device(value: Any, device: str) -> str | None:
    for path, leaf in flatten(value):
        if isinstance(leaf, torch.Tensor) and leaf.device.type != device:
            return f"{path} is on {leaf.device.type}, expected {device}"
    return None


def storage_span(tensor: torch.Tensor) -> tuple[int, int]:
    """[start, end) byte addresses of the tensor's whole storage."""
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def aliases(outputs: Any, inputs: list) -> str | None:
    """The first output sharing memory with an input, described; None when none does."""
    spans = [(i, storage_span(t)) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.numel()]
    for path, leaf in flatten(outputs):
        if not isinstance(leaf, torch.Tensor) or leaf.numel() == 0:
            continue
        start, end = storage_span(leaf)
        for i, (in_start, in_end) in spans:
            if start < in_end and in_start < end:
                return f"{path} shares memory with input {i}"
    return None


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN == NaN when the bits match), for any dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    b = b.to(a.device)
    # contiguous() first: reshape(-1) of a strided 1-D view (the non-contiguous trial) is that same view,
    # which cannot be reinterpreted as bytes
    def as_bytes(t: torch.Tensor) -> torch.Tensor:
        return t.detach().contiguous().view(-1).view(torch.uint8)

    return torch.equal(as_bytes(a), as_bytes(b))


def map_leaves(value: Any, fn) -> Any:
    """The same nested structure with `fn` applied to every tensor leaf."""
    if isinstance(value, (list, tuple)):
        return type(value)(map_leaves(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_leaves(v, fn) for k, v in value.items()}
    return fn(value) if isinstance(value, torch.Tensor) else value


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    return [leaf for _, leaf in flatten(value) if isinstance(leaf, torch.Tensor)]
