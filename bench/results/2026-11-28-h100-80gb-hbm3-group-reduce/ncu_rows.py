"""The reduction kernels profiled in ncu_rows.txt (after the group_reduce change): each run once under ncu,
or timed after a warm-up.

    python3 ncu_rows.py                      # CUDA-event time of one call each
    NCU=1 ncu --clock-control none --kernel-name-base mangled -k regex:kw_reduce --section SpeedOfLight \
        --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        python3 ncu_rows.py
Run from the repository root. A split group (GroupNorm, training BatchNorm) is two launches: statistics,
then the normalized output.
"""

import os
import sys

import torch

sys.path.insert(0, "tests/codegen")
sys.path.insert(0, "bench/kernels")
from bench_reductions import build  # noqa: E402
from reduction_cases import batch_norm_train, group_norm, one  # noqa: E402

GRAPHS = {
    "groupnorm_32x128x224x224_g8": group_norm((32, 128, 224, 224), 8),
    "batchnorm_train_32x96x256x256": batch_norm_train((32, 96, 256, 256)),
    "softmax_1024x393216": one("softmax", (1024, 393216), dim=1),
    "logsumexp_32768x4093": one("logsumexp", (32768, 4093), dims=(1,), keepdim=True),
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
        print(name, spec.cluster, spec.split, spec.cache, f"{start.elapsed_time(end):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
