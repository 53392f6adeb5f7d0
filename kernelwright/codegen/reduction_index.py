"""Index arithmetic of the reduction and scan families: how each tensor is addressed from (row, position
in the row) coordinates, with adjacent dims merged so the generated code divides as little as possible.

A kernel iterates a *domain* (a shape and its reduced dims). Every tensor it touches is an `Access`: a
stride per domain dim, 0 where the tensor is broadcast. Sizes are compile-time constants in the generated
code, so the divisions by them compile to multiply-shift sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def broadcast_strides(view: Sequence[int], ndim: int) -> tuple[int, ...]:
    """Strides over `ndim` dims of a contiguous tensor of shape `view` broadcast (right-aligned, numpy
    rules) to them: 0 along every dim where `view` has size 1 or no dim."""
    own = contiguous_strides(view)
    strides = [0] * ndim
    for offset in range(1, len(view) + 1):
        if view[-offset] != 1:
            strides[-offset] = own[-offset]
    return tuple(strides)


def domain_strides(view: Sequence[int], context: Sequence[int], context_dims: Sequence[int],
                   split: Sequence[int], domain: Sequence[int]) -> tuple[int, ...]:
    """Strides over `domain` of a contiguous tensor of shape `view`, broadcast (right-aligned, numpy
    rules) against `context`, whose dims are the IR dims `context_dims`; IR dim d spans `split[d]`
    consecutive domain dims (a split dim's outer part steps by the inner part's size)."""
    assert len(context) == len(context_dims)
    per_ir = [0] * len(split)
    for d, stride in zip(context_dims, broadcast_strides(view, len(context)), strict=True):
        per_ir[d] = stride
    strides, start = [], 0
    for d, parts in enumerate(split):
        sizes = domain[start:start + parts]
        inner = 1
        part_strides = []
        for size in reversed(sizes):
            part_strides.append(per_ir[d] * inner)
            inner *= size
        strides.extend(reversed(part_strides))
        start += parts
    return tuple(strides)


@dataclass(frozen=True)
class Layout:
    """The domain after dropping size-1 dims and merging neighbours of the same kind that every access
    walks contiguously. `accesses[i]` are the merged strides of the i-th access."""

    sizes: tuple[int, ...]
    reduced: tuple[bool, ...]
    accesses: tuple[tuple[int, ...], ...]

    @property
    def kept_dims(self) -> list[int]:
        return [d for d, r in enumerate(self.reduced) if not r]

    @property
    def reduced_dims(self) -> list[int]:
        return [d for d, r in enumerate(self.reduced) if r]

    def innermost_stride(self, access: int) -> int:
        return self.accesses[access][-1] if self.sizes else 0


def merge_layout(domain: Sequence[int], reduce: Sequence[int], accesses: Sequence[Sequence[int]]) -> Layout:
    dims = [d for d, s in enumerate(domain) if s != 1]
    sizes = [domain[d] for d in dims]
    reduced = [d in reduce for d in dims]
    strides = [[a[d] for d in dims] for a in accesses]
    d = len(sizes) - 2
    while d >= 0:
        if reduced[d] == reduced[d + 1] and all(s[d] == s[d + 1] * sizes[d + 1] for s in strides):
            sizes[d:d + 2] = [sizes[d] * sizes[d + 1]]
            reduced[d:d + 2] = [reduced[d]]
            for s in strides:
                s[d:d + 2] = [s[d + 1]]
        d -= 1
    return Layout(tuple(sizes), tuple(reduced), tuple(tuple(s) for s in strides))


def decompose(index: str, dims: Sequence[int], sizes: Sequence[int], prefix: str, idx_t: str) -> list[str]:
    """Statements splitting the linear `index` over `dims` (row-major) into coordinates `<prefix><d>`."""
    if not dims:
        return []
    lines = []
    rest = index
    for position, d in enumerate(reversed(dims)):
        if position == len(dims) - 1:
            lines.append(f"const {idx_t} {prefix}{d} = {rest};")
        else:
            lines.append(f"const {idx_t} {prefix}{d} = {rest} % {sizes[d]};")
            nxt = f"{prefix}q{d}"
            lines.append(f"const {idx_t} {nxt} = {rest} / {sizes[d]};")
            rest = nxt
    return lines


def offset(dims: Sequence[int], strides: Sequence[int], prefix: str) -> str:
    terms = [f"{prefix}{d}" if strides[d] == 1 else f"{prefix}{d} * {strides[d]}" for d in dims if strides[d]]
    return " + ".join(terms) if terms else "0"


def index_type(*extents: int) -> str:
    """32-bit indexing when every offset fits, which saves registers and integer work; 64-bit beyond."""
    return "int" if max(extents, default=0) < 2**31 - 1 else "long long"
