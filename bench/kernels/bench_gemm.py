"""Benchmark of the GEMM family: our 3xTF32 kernels (CUTLASS, and split operands on cuBLAS TF32)
against cuBLAS FP32 (TF32 off) and cuBLAS TF32,
with each one's error against a float64 product of the same inputs.

    python bench/kernels/bench_gemm.py OUT.json [--only NAME ...] [--no-variants]

Workloads are `nn.Linear`-shaped (A row-major [M, K] times a weight stored [N, K], i.e. a column-major B),
the layout of the level2 problems: small M (a batch of 128-1024 rows) against N, K of 1024-8192, and the
large squares. TFLOP/s counts 2*M*N*K. The roofline printed beside ours is cuBLAS TF32's measured rate / 3:
3xTF32 issues three TF32 products per FP32 product, so that is the ceiling of any 3xTF32 kernel on this
GPU. Times: CUDA events, median of repeated runs, L2 flushed between runs. Linear+GELU+softmax times the
whole op chain: ours is the GEMM with its fused GELU epilogue followed by torch.softmax (the softmax
family's kernel in a real ModelNew).

"ours" is the variant the planner picks (`kernelwright.fuse.gemm.tile_config`). For the small-M workloads
the other tile shapes and split-K factors are timed too (`variants` in the JSON, best one named), the
evidence for that rule. Variants differing only in their split share one CUTLASS instantiation, so the
sweep costs a few entry points, not builds.
Accuracy: `accuracy_ok` is max |ours - float64| <= 2x torch FP32's.
The JSON is rewritten after every workload, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch
from _timing import time_ms

from kernelwright.codegen.gemm import render
from kernelwright.codegen.gemm_build import build_gemm_extension
from kernelwright.environment import collect_environment, cutlass_include_dir
from kernelwright.fuse.gemm import BIG_TILE, MIN_SPLIT_K, SM_COUNT, SMALL_TILE, GemmConfig, describe, match
from kernelwright.fuse.plan import FusedGroup
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import input_node, make_node, param_node

# name -> (M, N, K, with bias + GELU epilogue and a softmax after); small M first (they are quick)
WORKLOADS = {
    "gemm_128x1024x1024": (128, 1024, 1024, False),
    "gemm_128x4096x4096": (128, 4096, 4096, False),
    "gemm_256x8192x8192": (256, 8192, 8192, False),
    "gemm_1024x4096x4096": (1024, 4096, 4096, False),
    "gemm_4096x4096x4096": (4096, 4096, 4096, False),
    "gemm_1024x8192x8192": (1024, 8192, 8192, False),
    "gemm_8192x8192x8192": (8192, 8192, 8192, False),
    "linear_gelu_softmax_1024x8192x8192": (1024, 8192, 8192, True),
    # no size a multiple of 4: the split reads the weight across unaligned rows, the product is padded
    "gemm_7001x3001x5003": (7001, 3001, 5003, False),
}
# Workloads with at most this many rows (and no epilogue) also time the variant sweep; a split is swept
# while tiles * split stays within two waves at two CTAs per SM.
SWEEP_MAX_M = 1024
SWEEP_SPLITS = (2, 4, 8, 16)
SWEEP_MAX_CTAS = 4 * SM_COUNT


def graph_of(m: int, n: int, k: int, gelu: bool) -> Graph:
    x, w = input_node("x", 0, (m, k)), param_node("fc.weight", (n, k))
    if not gelu:
        return Graph(inputs=(x,), params=(w,), outputs=(make_node("linear", [x, w]),))
    b = param_node("fc.bias", (n,))
    y = make_node("gelu", [make_node("linear", [x, w, b])], approximate="none")
    return Graph(inputs=(x,), params=(w, b), outputs=(y,))


def eager(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, gelu: bool) -> torch.Tensor:
    y = torch.nn.functional.linear(x, w, b)
    return torch.softmax(torch.nn.functional.gelu(y), dim=1) if gelu else y


def sweep(group: FusedGroup) -> dict[str, GemmConfig]:
    """The variants timed beside the planner's choice: both tile shapes data-parallel, under CUTLASS's
    own stream-K heuristic, and split-K by each factor that leaves every split MIN_SPLIT_K of K and the
    grid within SWEEP_MAX_CTAS."""
    view = describe(group)
    chosen = group.config
    aligns = dict(align_a=chosen.align_a, align_b=chosen.align_b, align_c=chosen.align_c)
    found = {}
    for label, tile in (("128x64", BIG_TILE), ("64x64", SMALL_TILE)):
        tile = tile._replace(**aligns)
        tiles = -(-view.m // tile.block[0]) * -(-view.n // tile.block[1])
        found[f"dp_{label}"] = tile
        found[f"streamk_{label}"] = tile._replace(swizzle="streamk")
        for split in SWEEP_SPLITS:
            if view.k // split >= MIN_SPLIT_K and tiles * split <= SWEEP_MAX_CTAS:
                found[f"splitk{split}_{label}"] = tile._replace(swizzle="streamk", split_k=split)
    return {name: config for name, config in found.items() if config != chosen}


def plan(names: list[str], variants: bool) -> dict[str, dict[str, FusedGroup]]:
    """workload -> {"ours": the planner's group, variant name: the same group with another config}."""
    planned = {}
    for name in names:
        m, n, k, gelu = WORKLOADS[name]
        found = match(graph_of(m, n, k, gelu), frozenset())
        assert len(found) == 1, f"{name}: expected one GEMM group, got {len(found)}"
        groups = {"ours": found[0]}
        if variants:
            # the other route always (CUTLASS's 128x64 tiles against 3xTF32 on cuBLAS), the tile and split
            # sweep on small-M products without epilogue
            chosen = found[0].config
            routes = {f"tf32x3_c{chunks}": GemmConfig(kernel="tf32x3", split_k=chunks)
                      for chunks in (1, 2, 4, 8)}
            routes["dp_128x64"] = BIG_TILE._replace(align_a=chosen.align_a, align_b=chosen.align_b,
                                                    align_c=chosen.align_c)
            found_variants = {label: c for label, c in routes.items() if c != chosen}
            if m <= SWEEP_MAX_M and not gelu:
                found_variants.update(sweep(found[0]))
            groups.update({label: dataclasses.replace(found[0], config=config)
                           for label, config in found_variants.items()})
        planned[name] = groups
    return planned


def measure(fn, reference: torch.Tensor, flush: torch.Tensor, runs: int, flops: float, tf32: bool) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        ms = time_ms(fn, flush, runs)
        error = (fn().double() - reference).abs().max().item()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    return {"ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 2), "max_abs_err": error}


def run(names: list[str], variants: bool, out: Path) -> list[dict]:
    environment = collect_environment()
    planned = plan(names, variants)
    sources = {(name, label): render(group)
               for name, groups in planned.items() for label, group in groups.items()}
    start = time.perf_counter()
    module = build_gemm_extension(list(sources.values()))
    n_units = len({s.cuda for s in sources.values()})
    print(f"built {len(sources)} kernels ({n_units} CUDA units) in {time.perf_counter() - start:.1f} s",
          flush=True)
    flush = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")   # > H100's 50 MB L2
    rows: list[dict] = []
    for name in names:
        m, n, k, gelu = WORKLOADS[name]
        generator = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", generator=generator)
        w = torch.randn(n, k, device="cuda", generator=generator) / k ** 0.5
        b = torch.randn(n, device="cuda", generator=generator) if gelu else None
        args = [x, w] + ([b] if gelu else [])

        def call(kernel, args=args, gelu=gelu):
            y = kernel(args)[0]
            return torch.softmax(y, dim=1) if gelu else y

        def torch_chain(x=x, w=w, b=b, gelu=gelu):
            return eager(x, w, b, gelu)

        runs = 10 if m * n * k >= 2**39 else 30
        flops = 2.0 * m * n * k
        reference = eager(x.double(), w.double(), b.double() if gelu else None, gelu)
        row = {"name": name, "m": m, "n": n, "k": k, "kernel": sources[(name, "ours")].ir_comment}
        row["torch_fp32"] = measure(torch_chain, reference, flush, runs, flops, False)
        row["torch_tf32"] = measure(torch_chain, reference, flush, runs, flops, True)
        bar = 2 * row["torch_fp32"]["max_abs_err"]
        timed = {}
        for label in planned[name]:
            kernel = getattr(module, sources[(name, label)].name)
            result = measure(lambda kernel=kernel: call(kernel), reference, flush, runs, flops, False)
            timed[label] = {**result, "accuracy_ok": result["max_abs_err"] <= bar,
                            "kernel": sources[(name, label)].ir_comment}
        ours = timed.pop("ours")
        row["ours"] = {key: ours[key] for key in ("ms", "tflops", "max_abs_err")}
        row["speedup_vs_fp32"] = round(row["torch_fp32"]["ms"] / ours["ms"], 3)
        row["speedup_vs_tf32"] = round(row["torch_tf32"]["ms"] / ours["ms"], 3)
        row["roofline_3xtf32_tflops"] = round(row["torch_tf32"]["tflops"] / 3, 2)
        row["accuracy_ok"] = ours["accuracy_ok"]
        if timed:
            row["variants"] = timed
            fastest = min((v for v in timed.items() if v[1]["accuracy_ok"]), key=lambda v: v[1]["ms"],
                          default=None)
            row["best_variant"] = None if fastest is None else {
                "name": fastest[0], "ms": fastest[1]["ms"],
                "speedup_vs_ours": round(ours["ms"] / fastest[1]["ms"], 3)}
        rows.append(row)
        _print(row)
        write(out, environment, rows)
        del reference
        torch.cuda.empty_cache()
    return rows


def _print(row: dict) -> None:
    fp32, tf32, ours = row["torch_fp32"], row["torch_tf32"], row["ours"]
    print(f"{row['name']:36s} fp32 {fp32['ms']:8.3f} ms  tf32 {tf32['ms']:8.3f} ms  "
          f"ours {ours['ms']:8.3f} ms ({ours['tflops']:6.1f} TF/s, 3xTF32 roofline "
          f"{row['roofline_3xtf32_tflops']:6.1f})  x{row['speedup_vs_fp32']:.2f} vs fp32  "
          f"err fp32/tf32/ours {fp32['max_abs_err']:.2e}/{tf32['max_abs_err']:.2e}/{ours['max_abs_err']:.2e}"
          f"{'' if row['accuracy_ok'] else '  ACCURACY FAIL'}", flush=True)
    print(f"    ours: {row['kernel']}", flush=True)
    for label, variant in sorted(row.get("variants", {}).items(), key=lambda v: v[1]["ms"]):
        flag = "" if variant["accuracy_ok"] else "  ACCURACY FAIL"
        print(f"    {label:18s} {variant['ms']:8.3f} ms  x{fp32['ms'] / variant['ms']:.2f} vs fp32  "
              f"err {variant['max_abs_err']:.2e}{flag}", flush=True)


def write(out: Path, environment: dict, rows: list[dict]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": environment, "results": rows}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="JSON file to write (rewritten after every workload)")
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="run only these workloads")
    parser.add_argument("--no-variants", action="store_true",
                        help="time only the planner's choice (no tile/split sweep on small-M workloads)")
    options = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gemm needs a CUDA GPU")
    if cutlass_include_dir() is None:
        # Without them the matcher leaves every GEMM to ATen: there would be no kernel of ours to time.
        raise SystemExit("bench_gemm needs the CUTLASS headers, which were not found: "
                         "pip install nvidia-cutlass")
    torch.backends.cuda.matmul.allow_tf32 = False
    run(options.only or list(WORKLOADS), not options.no_variants, options.out)
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
