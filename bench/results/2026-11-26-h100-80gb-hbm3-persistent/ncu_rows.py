"""The reduction kernels profiled in ncu_rows.txt: each run once (NCU=1, under ncu) or timed after a warm-up.

    python3 ncu_rows.py                      # CUDA-event time of one launch each
    NCU=1 ncu --clock-control none --kernel-name-base mangled -k regex:kw_reduce \
        --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis python3 ncu_rows.py
Run from the repository root.
"""

import sys

sys.path.insert(0, "tests/codegen")
sys.path.insert(0, "bench/kernels")
from bench_reductions import FORCINGS, forced_uncached  # noqa: E402
from profile_reductions import run  # noqa: E402
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
    run(GRAPHS, lambda spec: (spec.cluster, spec.persistent))


if __name__ == "__main__":
    main()
