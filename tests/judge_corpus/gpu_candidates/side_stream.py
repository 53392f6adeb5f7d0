"""Hack (problem gelu.py): does the work on a side stream after a long spin, so the current stream, which
the timing events are recorded on, looks idle. Expected: rejected (the output changed after forward
returned); the timing cross-check would flag it too."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, x):
        out = torch.empty_like(x)
        with torch.cuda.stream(self.stream):
            torch.cuda._sleep(50_000_000)  # tens of milliseconds of spinning on the side stream
            out.copy_(F.gelu(x, approximate="tanh"))
        return out
