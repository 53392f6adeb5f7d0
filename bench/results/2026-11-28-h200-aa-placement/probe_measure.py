# One process: level2/28 timed by the judge's measure() (queued runs) three times, by sync-per-run with a
# 200 us GPU sleep before each run, and each kernel's median time under the profiler. Run as
#   for n in 1 5 9 13 3 7; do taskset -c $n python3 probe_measure.py level2/28_ConvT3dReLUGroupNorm; done
import json
import os
import statistics
import sys

import torch

from kernelwright.judge.timing import measure
from kernelwright.problem import load_problem

pid = sys.argv[1]
p = load_problem(pid)
model = p.build_model(seed=42, device="cuda")
inputs = p.inputs(seed=42, device="cuda")
out = {"pid": os.getpid(), "cpu0": sorted(os.sched_getaffinity(0))[:2]}
with torch.no_grad():
    out["measure"] = [round(measure(lambda: model(*inputs), "cuda", 100, 0.3, locked=True)["median_ms"], 4)
                      for _ in range(3)]
    flush = torch.empty(2 * 60 * 2**20 // 4, dtype=torch.int32, device="cuda")
    ev = []
    for _ in range(40):
        flush.zero_()
        torch.cuda._sleep(400_000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        model(*inputs)
        e.record()
        e.synchronize()
        ev.append(s.elapsed_time(e))
    out["sleep_sync"] = round(statistics.median(ev), 4)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            flush.zero_()
            model(*inputs)
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            rows.setdefault(e.name[:60], []).append(e.device_time)
    out["prof"] = {k: round(statistics.median(v), 1) for k, v in rows.items()}
print(json.dumps(out), flush=True)
