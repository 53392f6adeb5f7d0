"""Host time of an emitted file's forward: events vs wall vs enqueue-only, cProfile's top entries."""
import cProfile
import importlib.util
import io
import pstats
import statistics
import sys
import time

import torch


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def times(fn, n=200):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ev = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ev.append(a.elapsed_time(b))
    wall = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    enqueue = (time.perf_counter() - t0) * 1e3 / n
    torch.cuda.synchronize()
    return statistics.median(ev), statistics.median(wall), enqueue


for problem, emitted in zip(sys.argv[1::2], sys.argv[2::2], strict=True):
    p = load(problem, "problem")
    torch.manual_seed(0)
    inputs = [x.cuda() for x in p.get_inputs()]
    with torch.no_grad():
        eager = p.Model(*p.get_init_inputs()).cuda()
        new = load(emitted, "emitted").ModelNew(*p.get_init_inputs()).cuda()
        for label, model in (("eager", eager), ("ours", new)):
            ev, wall, enq = times(lambda model=model, inputs=inputs: model(*inputs))
            print(f"{problem.split('/')[-1]} {label}: events {ev:.3f} ms, wall (synced) {wall:.3f} ms, "
                  f"enqueue {enq:.3f} ms a call", flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            new(*inputs)
        prof.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
        print("\n".join(line for line in out.getvalue().splitlines()[6:22] if line.strip()))
