"""The reduction kernels profiled in ncu_rows.txt (after the group_reduce change): each run once under ncu,
or timed after a warm-up.

    python3 ncu_rows.py                      # CUDA-event time of one call each
    NCU=1 ncu --clock-control none --kernel-name-base mangled -k regex:kw_reduce --section SpeedOfLight \
        --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        python3 ncu_rows.py
Run from the repository root. A split group (GroupNorm, training BatchNorm) is two launches: statistics,
then the normalized output.
"""

import sys

sys.path.insert(0, "tests/codegen")
sys.path.insert(0, "bench/kernels")
from profile_reductions import run  # noqa: E402
from reduction_cases import batch_norm_train, group_norm, one  # noqa: E402

GRAPHS = {
    "groupnorm_32x128x224x224_g8": group_norm((32, 128, 224, 224), 8),
    "batchnorm_train_32x96x256x256": batch_norm_train((32, 96, 256, 256)),
    "softmax_1024x393216": one("softmax", (1024, 393216), dim=1),
    "logsumexp_32768x4093": one("logsumexp", (32768, 4093), dims=(1,), keepdim=True),
}


def main() -> None:
    run(GRAPHS, lambda spec: (spec.cluster, spec.split, spec.cache))


if __name__ == "__main__":
    main()
