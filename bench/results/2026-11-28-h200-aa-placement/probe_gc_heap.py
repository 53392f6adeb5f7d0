# CPU probe (this workstation, 2026-11-28): a launch-bound forward (40 tiny Linear layers, batch 2, one
# thread) timed with a small heap, with 3 million live Python objects, and with those and the collector off.
import gc
import statistics
import time

import torch

torch.set_num_threads(1)
m = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(40)])
x = torch.randn(2, 8)


def t():
    ts = []
    for _ in range(2000):
        a = time.perf_counter()
        m(x)
        ts.append(time.perf_counter() - a)
    return round(statistics.median(ts) * 1e6, 1), round(statistics.mean(ts) * 1e6, 1)


with torch.no_grad():
    print("small heap, gc on: median, mean us", t())
    heap = [{"a": i, "b": [i]} for i in range(3_000_000)]
    print("big heap, gc on", t())
    gc.disable()
    print("big heap, gc off", t())
    gc.enable()
