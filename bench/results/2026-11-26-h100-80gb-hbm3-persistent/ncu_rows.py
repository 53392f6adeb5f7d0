"""The reduction kernels profiled in ncu_rows.txt: each run once (NCU=1, under ncu) or timed after a warm-up.

    python3 ncu_rows.py                      # CUDA-event time of one launch each
    NCU=1 ncu --clock-control none --kernel-name-base mangled -k regex:kw_reduce \
        --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis python3 ncu_rows.py
Run from the repository root.
"""

import os
import sys

import torch

sys.path.insert(0, "tests/codegen")
sys.path.insert(0, "bench/kernels")
from bench_reductions import FORCINGS, build, forced_uncached  # noqa: E402
from reduction_cases import layer_norm, log_softmax_divergence, one  # noqa: E402

FORCINGS["+uncached"] = forced_uncached
GRAPHS = {
    "softmax_1024x393216": one("softmax", (1024, 393216), dim=1),
    "softmax_1024x393216+persist": one("softmax", (1024, 393216), dim=1),
    "kl_2048x81920": log_softmax_divergence((2048, 81920), row_sums=True),
    "kl_2048x81920+uncached": log_softmax_divergence((2048, 81920), row_sums=True),
    "layernorm_4096x65536": layer_norm((4096, 65536), 1, True),
}


def main() -> None:
    built = build(GRAPHS)
    for name, graph in GRAPHS.items():
        kernel, group = built[name]
        gen = torch.Generator(device="cuda").manual_seed(0)
        leaves = {id(n): torch.randn(n.shape, device="cuda", generator=gen) for n in graph.inputs}
        leaves.update({id(p): torch.rand(p.shape, device="cuda", generator=gen) + 0.5 for p in graph.params})
        args = [leaves[id(n)] for n in group.inputs]
        if os.environ.get("NCU"):
            kernel(args)
            torch.cuda.synchronize()
            print(name, flush=True)
            continue
        for _ in range(2):
            kernel(args)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        kernel(args)
        end.record()
        end.synchronize()
        spec = group.config[0]
        print(name, spec.cluster, spec.persistent, f"{start.elapsed_time(end):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
