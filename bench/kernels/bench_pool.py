"""Pool-family kernels beside eager and torch.compile, each with its achieved bandwidth against a device copy.

    python bench/kernels/bench_pool.py OUT.json [--only NAME ...] [--no-compile]

Workloads at KernelBench-like sizes (hundreds of MB): overlapping windows (3x3 stride 1 and stride 2, a 3D
pool of stride 2), and non-overlapping ones as the control. "+rowsN" forces N output rows a thread against
the planner's choice (`PoolSpec.rows`: each input row the thread's windows span loaded once for all).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "codegen"))
from _timing import build_groups, start, time_ms  # noqa: E402
from pool_cases import avg_pool, max_pool  # noqa: E402

from kernelwright.fuse import plan_fusion  # noqa: E402
from kernelwright.ir.graph import Graph  # noqa: E402
from kernelwright.ir.ops import input_node  # noqa: E402

F = torch.nn.functional


def _pool(shape: tuple[int, ...], make: Callable) -> Callable[[], Graph]:
    def graph() -> Graph:
        x = input_node("x", 0, shape)
        return Graph((x,), (), (make(x),))
    return graph


# name -> (graph, eager)
WORKLOADS: dict[str, tuple[Callable[[], Graph], Callable | None]] = {
    "avg2d_k3_s1_p1_24x128x256x256": (_pool((24, 128, 256, 256), lambda x: avg_pool(x, 2, 3, 1, 1)),
                                      lambda x: F.avg_pool2d(x, 3, 1, 1)),
    "max2d_k3_s2_p1_32x128x224x224": (_pool((32, 128, 224, 224), lambda x: max_pool(x, 2, 3, 2, 1)),
                                      lambda x: F.max_pool2d(x, 3, 2, 1)),
    "max2d_k2_s2_64x64x512x512": (_pool((64, 64, 512, 512), lambda x: max_pool(x, 2, 2, 2)),
                                  lambda x: F.max_pool2d(x, 2, 2)),
    "avg3d_k3_s2_p1_16x32x64x64x64": (_pool((16, 32, 64, 64, 64), lambda x: avg_pool(x, 3, 3, 2, 1)),
                                      lambda x: F.avg_pool3d(x, 3, 2, 1)),
    "max1d_k5_s2_p2_64x128x24576": (_pool((64, 128, 24576), lambda x: max_pool(x, 1, 5, 2, 2)),
                                    lambda x: F.max_pool1d(x, 5, 2, 2)),
}
FORCED = {"+rows1": ("avg2d_k3_s1_p1_24x128x256x256",),
          "+rows4": ("max2d_k3_s2_p1_32x128x224x224", "avg3d_k3_s2_p1_16x32x64x64x64")}
WORKLOADS.update({name + suffix: (WORKLOADS[name][0], None)
                  for suffix, names in FORCED.items() for name in names})


def pool_group(name: str, graph: Graph):
    """The workload's pool group, at N output rows a thread for "+rowsN"."""
    (group,) = [g for g in plan_fusion(graph).groups if g.family == "pool"]
    _, forced, rows = name.rpartition("+rows")
    if forced:
        group = dataclasses.replace(group, config=(dataclasses.replace(group.config[0], rows=int(rows)),))
    return group


def main() -> None:
    args, flush, results, names = start(__doc__.splitlines()[0], WORKLOADS)
    graphs = {name: WORKLOADS[name][0]() for name in names}
    built = build_groups(graphs, pool_group)
    for name in names:
        kernel, group = built[name]
        eager = WORKLOADS[name][1]
        x = torch.randn(graphs[name].inputs[0].shape, device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(0))
        (ours,) = kernel([x])
        moved = (x.numel() + ours.numel()) * 4
        ours_ms = time_ms(lambda k=kernel, a=x: k([a]), flush)
        spec = group.config[0]
        row = {"ours_ms": ours_ms, "bytes": moved, "ours_gbs": moved / ours_ms / 1e6,
               "planned": f"{spec.layout} vec{spec.vec} rows{spec.rows}"}
        row["of_copy"] = row["ours_gbs"] / results["copy_gbs"]
        if eager is not None:
            reference = eager(x)
            row["max_abs_err"] = float((ours - reference).abs().max())
            row["eager_ms"] = time_ms(lambda f=eager, a=x: f(a), flush)
            if not args.no_compile:
                compiled = torch.compile(eager)
                row["compile_ms"] = time_ms(lambda f=compiled, a=x: f(a), flush)
            del reference
        results["workloads"][name] = row
        args.out.write_text(json.dumps(results, indent=2))
        extra = "".join(f"  {k} {row[k]:.3f} ms" for k in ("eager_ms", "compile_ms") if k in row)
        print(f"{name:38s} ours {ours_ms:8.3f} ms  {row['ours_gbs']:7.0f} GB/s "
              f"({100 * row['of_copy']:5.1f}% of copy){extra}  [{row['planned']}]", flush=True)
        del x, ours
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
