"""Benchmark of the GEMM family: our CUTLASS 3xTF32 kernels against cuBLAS FP32 (TF32 off) and cuBLAS TF32,
with each one's error against a float64 product of the same inputs.

    python bench/kernels/bench_gemm.py OUT.json [--only NAME ...]

Workloads are `nn.Linear`-shaped (A row-major [M, K] times a weight stored [N, K], i.e. a column-major B),
the layout the issue's first measurements used. TFLOP/s counts 2*M*N*K. The roofline printed beside ours
is cuBLAS TF32's measured rate / 3: 3xTF32 issues three TF32 products per FP32 product, so that is the
ceiling of any 3xTF32 kernel on this GPU. Times: CUDA events, median of repeated runs, L2 flushed between
runs. Linear+GELU+softmax times the whole op chain: ours is the GEMM with its fused GELU epilogue followed
by torch.softmax (the softmax family's kernel in a real ModelNew).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _timing import time_ms

from kernelwright.codegen.gemm import render
from kernelwright.codegen.gemm_build import build_gemm_extension
from kernelwright.environment import collect_environment, cutlass_include_dir
from kernelwright.fuse.gemm import match
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import input_node, make_node, param_node

# name -> (M, N, K, with bias + GELU epilogue and a softmax after)
WORKLOADS = {
    "gemm_4096x4096x4096": (4096, 4096, 4096, False),
    "gemm_8192x8192x8192": (8192, 8192, 8192, False),
    "gemm_1024x8192x8192": (1024, 8192, 8192, False),
    "gemm_128x4096x4096": (128, 4096, 4096, False),
    "linear_gelu_softmax_1024x8192x8192": (1024, 8192, 8192, True),
}


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


def run(names: list[str]) -> list[dict]:
    groups = {}
    for name in names:
        found = match(graph_of(*WORKLOADS[name]), frozenset())
        assert len(found) == 1, f"{name}: expected one GEMM group, got {len(found)}"
        groups[name] = found[0]
    sources = {name: render(group) for name, group in groups.items()}
    start = time.perf_counter()
    module = build_gemm_extension(list(sources.values()))
    print(f"built {len(sources)} kernels in {time.perf_counter() - start:.1f} s", flush=True)
    flush = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")   # > H100's 50 MB L2
    rows = []
    for name in names:
        m, n, k, gelu = WORKLOADS[name]
        generator = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", generator=generator)
        w = torch.randn(n, k, device="cuda", generator=generator) / k ** 0.5
        b = torch.randn(n, device="cuda", generator=generator) if gelu else None
        kernel = getattr(module, sources[name].name)
        args = [x, w] + ([b] if gelu else [])

        def ours(args=args, kernel=kernel, gelu=gelu):
            y = kernel(args)[0]
            return torch.softmax(y, dim=1) if gelu else y

        def torch_chain(x=x, w=w, b=b, gelu=gelu):
            return eager(x, w, b, gelu)

        runs = 10 if m * n * k >= 2**39 else 30
        reference = eager(x.double(), w.double(), b.double() if gelu else None, gelu)
        row = {"name": name, "m": m, "n": n, "k": k, "kernel": sources[name].ir_comment}
        flops = 2.0 * m * n * k
        for label, fn, tf32 in (("torch_fp32", torch_chain, False), ("torch_tf32", torch_chain, True),
                                ("ours", ours, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            ms = time_ms(fn, flush, runs)
            error = (fn().double() - reference).abs().max().item()
            torch.backends.cuda.matmul.allow_tf32 = False
            row[label] = {"ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 2), "max_abs_err": error}
        row["speedup_vs_fp32"] = round(row["torch_fp32"]["ms"] / row["ours"]["ms"], 3)
        row["speedup_vs_tf32"] = round(row["torch_tf32"]["ms"] / row["ours"]["ms"], 3)
        row["roofline_3xtf32_tflops"] = round(row["torch_tf32"]["tflops"] / 3, 2)
        row["accuracy_ok"] = row["ours"]["max_abs_err"] <= 2 * row["torch_fp32"]["max_abs_err"]
        rows.append(row)
        print(f"{name:36s} fp32 {row['torch_fp32']['ms']:8.3f} ms  tf32 {row['torch_tf32']['ms']:8.3f} ms  "
              f"ours {row['ours']['ms']:8.3f} ms ({row['ours']['tflops']:6.1f} TF/s, 3xTF32 roofline "
              f"{row['roofline_3xtf32_tflops']:6.1f})  x{row['speedup_vs_fp32']:.2f} vs fp32  "
              f"err fp32/tf32/ours {row['torch_fp32']['max_abs_err']:.2e}/"
              f"{row['torch_tf32']['max_abs_err']:.2e}/{row['ours']['max_abs_err']:.2e}", flush=True)
        del reference
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="run only these workloads")
    options = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gemm needs a CUDA GPU")
    if cutlass_include_dir() is None:
        # Without them the matcher leaves every GEMM to ATen: there would be no kernel of ours to time.
        raise SystemExit("bench_gemm needs the CUTLASS headers, which were not found: "
                         "pip install nvidia-cutlass")
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = run(options.only or list(WORKLOADS))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps({"environment": collect_environment(), "results": rows}, indent=2))
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
