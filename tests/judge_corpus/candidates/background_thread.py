"""Hack: returns an empty tensor at once and fills it from a background thread, so the timed call
looks almost free. Expected: rejected (the output changed after forward returned)."""
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)

        def fill():
            time.sleep(0.05)
            out.copy_(F.gelu(x, approximate="tanh"))

        threading.Thread(target=fill, daemon=True).start()
        return out
