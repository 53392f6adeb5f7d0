"""Concurrency helper for the GPU tests: the same work launched on two streams at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def alternate_on_side_streams(calls: Sequence[Callable[[], object]], rounds: int) -> list[list]:
    """Each call on a side stream of its own, `rounds` times, the streams taking turns without waiting for
    each other (so their launches overlap on the GPU); returns each stream's results, in order, once every
    stream's work is done and the current stream has waited for it."""
    streams = [torch.cuda.Stream() for _ in calls]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    results: list[list] = [[] for _ in calls]
    for _ in range(rounds):
        for k, (stream, call) in enumerate(zip(streams, calls, strict=True)):
            with torch.cuda.stream(stream):
                results[k].append(call())
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return results
