"""Probe of the SM90 3xTF32 GEMM (TMA + wgmma, A split in registers and B's small part in shared memory,
FP32 promotion of the tensor cores' partial sums: `kernelwright/codegen/cuda/kw_gemm_sm90_x3.cuh`), issue #22.

    python bench/kernels/gemm_sm90_x3.py OUT.json [--variants 128x128s4,128x64s6] [--promotion 1,4,16]

Builds the launcher that `optimize` emits (`codegen/gemm_sm90x3.py`), one library per variant (its tile
width and stages rendered, the promotion interval and the rest set by -D; nvcc in parallel), then for each
shape: its error against float64 (on a sample of rows) beside torch FP32's and cuBLAS TF32's, and its time
(CUDA events, cold L2, median of 20) beside torch FP32 (TF32 off) and cuBLAS TF32, with the FP32-equivalent
TFLOP/s and the SM clock and power draw while it ran (`_timing.ClockSampler`: the power limit lowers the
clock). Operands are K-major ([M, K] and [N, K], an nn.Linear weight's layout): a row-major B is given
transposed here, outside the timing (the planner's copy would be a bandwidth-bound pass).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import ClockSampler, l2_flush, time_ms  # noqa: E402

from kernelwright.codegen import gemm_sm90x3  # noqa: E402
from kernelwright.environment import cutlass_include_dir, nvcc_path  # noqa: E402
from kernelwright.fuse.gemm import GemmConfig, Sm90x3Roles  # noqa: E402

HERE = Path(__file__).parent
HEADERS = HERE.parent.parent / "kernelwright" / "codegen" / "cuda"

# name: (M, N, K, batch)
SHAPES = {
    "4096^3": (4096, 4096, 4096, 1),
    "8192^3": (8192, 8192, 8192, 1),
    "1024x8192x8192": (1024, 8192, 8192, 1),
    "bmm 128 x 512x768x1024": (512, 768, 1024, 128),
    "7001x3001x5004": (7001, 3001, 5004, 1),
    "65536x24576x48": (65536, 24576, 48, 1),
    "40000x40x2000": (40000, 40, 2000, 1),
    "odd 1000x1001x1004": (1000, 1001, 1004, 1),
    # few output tiles, deep K: 64 / 144 tiles of 128x128 (the narrow tile's rule, fuse.gemm.sm90x3_tile_for)
    "512x2048x8192": (512, 2048, 8192, 1),
    "1536x1536x1004": (1536, 1536, 1004, 1),
    "2048x2048x2048": (2048, 2048, 2048, 1),
    # attention scores (Q.K^T of 64 heads, head size 64): K of two k-tiles, the whole sum in the tensor
    # cores' partial (no FP32 promotion before the end), where --promotion 1 would promote every k-tile
    "bmm 64 x 1024x1024x64": (1024, 1024, 64, 64),
    "bmm 64 x 1024x1024x96": (1024, 1024, 96, 64),
    "bmm 64 x 1024x1024x128": (1024, 1024, 128, 64),
}


# The product's C entry points around the launcher as `optimize` renders it (codegen/gemm_sm90x3.py)
PROBE_ENTRY = """
extern "C" const char* x3_gemm(const float* a, const float* b, float* d, int m, int n, int k, int l,
                               long long lda, long long ldb, long long ldd, long long bsa, long long bsb,
                               long long bsd, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return kw_probe_gemm(a, lda, bsa, b, ldb, bsb, d, ldd, bsd, m, n, k, l, KW_X3_STRIPS, workspace,
                       workspace_bytes, stream);
}
extern "C" size_t x3_smem() { return sizeof(typename kw_probe_sm90::KernelTma::SharedStorage); }
"""


def build(variant: str, promotion: int, out: Path, reuse: bool = False) -> ctypes.CDLL:
    """The launcher of `codegen/gemm_sm90x3.py` with the variant's tile and knobs, as a library (`reuse`:
    the one built from the same source, if any: the profiled process of --ncu)."""
    match = re.fullmatch(r"128x(\d+)s(\d+)(?:w(\d+))?(d?)(t?)([nmb]?)", variant)
    if match is None:
        raise SystemExit(f"variant {variant!r}: expected 128xNsS, then optional wW, d, t, and n, m or b")
    tile_n, stages, strips, direct, swap, flag = match.groups()
    mode = "_nmb".find(flag) if flag else 0
    source = out / f"x3_{variant}_p{promotion}.cu"
    config = GemmConfig(kernel="sm90x3", block=(128, int(tile_n), 32))
    roles = Sm90x3Roles(True, "MN", False, False) if swap else Sm90x3Roles(False, "K", False, False)
    text = gemm_sm90x3.render_cuda("kw_probe", None, config, "", stages=int(stages), roles=roles)
    text += PROBE_ENTRY
    fresh = not source.exists() or source.read_text() != text
    source.write_text(text)
    lib = source.with_suffix(".so")
    command = [str(nvcc_path()), "-std=c++17", "-O3", "-DNDEBUG", "-arch=sm_90a", "--expt-relaxed-constexpr",
               "-Xcompiler", "-fPIC", "-shared", f"-I{cutlass_include_dir()}", f"-I{HEADERS}",
               f"-DKW_X3_PROMOTION={promotion}",
               f"-DKW_X3_PROBE_MODE={mode}", f"-DKW_X3_TMA_STORE={int(not direct)}",
               f"-DKW_X3_STRIPS={strips or 1}",
               str(source), "-o", str(lib)]
    if fresh or not reuse or not lib.exists():
        subprocess.run(command, check=True)
    dll = ctypes.CDLL(str(lib))
    dll.x3_gemm.restype = ctypes.c_char_p
    dll.x3_gemm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4 + [ctypes.c_longlong] * 6 + [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    dll.x3_smem.restype = ctypes.c_size_t
    dll.swapped = bool(swap)
    return dll


def run(dll, a, bt, d, workspace, b=None) -> None:
    """d [L, M, N] = a [L, M, K] . bt [L, N, K]^T; a swapped variant computes d^T = b^T . a^T from `b`
    [L, K, N] (bt's row-major twin) in registers and writes d^T column-major (d itself)"""
    batch, m, k = a.shape
    n = bt.shape[1]
    first, second, rows, cols = (b, a, n, m) if dll.swapped else (a, bt, m, n)
    error = dll.x3_gemm(first.data_ptr(), second.data_ptr(), d.data_ptr(), rows, cols, k, batch,
                        first.stride(1), second.stride(1), d.stride(1), first.stride(0) if batch > 1 else 0,
                        second.stride(0) if batch > 1 else 0, d.stride(0) if batch > 1 else 0,
                        workspace.data_ptr(), workspace.numel(), torch.cuda.current_stream().cuda_stream)
    if error is not None:
        raise RuntimeError(error.decode())


def error_vs_float64(out: torch.Tensor, a: torch.Tensor, bt: torch.Tensor, rows: int = 256) -> float:
    """Max abs error against float64 on the first `rows` rows of each of the first two batches."""
    worst = 0.0
    for batch in range(min(2, a.shape[0])):
        exact = a[batch, :rows].double() @ bt[batch].double().T
        worst = max(worst, (out[batch, :rows].double() - exact).abs().max().item())
    return worst


def measure(name: str, dlls: dict, flush, workspace) -> dict:
    """One shape: torch FP32, cuBLAS TF32 and each built variant (tile, stages, promotion interval), timed
    and checked."""
    m, n, k, batch = SHAPES[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(batch, m, k, device="cuda", generator=gen)
    bt = torch.randn(batch, n, k, device="cuda", generator=gen)
    b = bt.transpose(1, 2)
    d = torch.empty(batch, m, n, device="cuda")
    flop = 2.0 * m * n * k * batch
    row = {"shape": name, "m": m, "n": n, "k": k, "batch": batch}
    torch.backends.cuda.matmul.allow_tf32 = False
    row["fp32_err"] = error_vs_float64(torch.bmm(a, b), a, bt)
    row["fp32_ms"] = time_ms(lambda: torch.bmm(a, b, out=d), flush, runs=20)
    torch.backends.cuda.matmul.allow_tf32 = True
    row["tf32_err"] = error_vs_float64(torch.bmm(a, b), a, bt)
    row["tf32_ms"] = time_ms(lambda: torch.bmm(a, b, out=d), flush, runs=20)
    torch.backends.cuda.matmul.allow_tf32 = False
    # non-negative operands: every product of one sign, where a biased split (one that always shrinks |x|)
    # adds up over K instead of cancelling
    a_pos, bt_pos = a.abs(), bt.abs()
    row["fp32_err_nonneg"] = error_vs_float64(torch.bmm(a_pos, bt_pos.transpose(1, 2)), a_pos, bt_pos)
    # B as torch.matmul takes it, [L, K, N] row-major, for the swapped variants (read in place), and what
    # the others' K-major copy of it costs (the planner's pass before an unswapped launch)
    b_rows = bt.transpose(1, 2).contiguous() if any(dll.swapped for dll in dlls.values()) else None
    if b_rows is not None:
        row["kmajor_copy_ms"] = time_ms(lambda: bt.copy_(b_rows.transpose(1, 2)), flush, runs=20)
    for key, dll in dlls.items():
        try:
            run(dll, a_pos, bt_pos, d, workspace, b=bt_pos.transpose(1, 2).contiguous())
            torch.cuda.synchronize()
            row[key + "_err_nonneg"] = error_vs_float64(d, a_pos, bt_pos)
            run(dll, a, bt, d, workspace, b=b_rows)
            torch.cuda.synchronize()
            row[key + "_err"] = error_vs_float64(d, a, bt)
            with ClockSampler() as clocks:
                row[key + "_ms"] = time_ms(lambda dll=dll: run(dll, a, bt, d, workspace, b=b_rows), flush,
                                           runs=20)
            row[key + "_clocks"] = clocks.summary()
        except RuntimeError as exc:
            row[key + "_error"] = str(exc)
    parts = [f"{name:24s} FP32 {row['fp32_ms']:.3f} ms (err {row['fp32_err']:.2e}, "
             f"non-negative {row['fp32_err_nonneg']:.2e})",
             f"TF32 {row['tf32_ms']:.3f} (err {row['tf32_err']:.2e})"]
    if "kmajor_copy_ms" in row:
        parts.append(f"B's K-major copy {row['kmajor_copy_ms']:.3f}")
    for key in row:
        if key.endswith("_ms") and "/" in key:
            base = key[:-3]
            clocks = row.get(base + "_clocks")
            at = f", {clocks['sm_mhz']:.0f} MHz (min {clocks['sm_mhz_min']:.0f}) {clocks['watts']:.0f} W" \
                if clocks else ""
            parts.append(f"{base} {row[key]:.3f} ms = {row['fp32_ms'] / row[key]:.2f}x "
                         f"({flop / row[key] / 1e9:.0f} TFLOP/s, err {row[base + '_err']:.2e}, "
                         f"non-negative {row[base + '_err_nonneg']:.2e}{at})")
        elif key.endswith("_error"):
            parts.append(f"{key[:-6]} FAILED: {row[key]}")
    print(" | ".join(parts), flush=True)
    return row


# Nsight Compute counters of --ncu: time, tensor-pipe (wgmma) activity, issue slots, shared memory
# traffic of the load/store unit (the split's loads and stores, not wgmma's operand reads) and its bank
# conflicts, the SM clock
NCU_METRICS = ("gpu__time_duration.sum",
               "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__inst_issued.avg.pct_of_peak_sustained_active",
               "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
               "sm__cycles_elapsed.avg.per_second",
               "launch__registers_per_thread")


def forward(name: str, dlls: dict) -> None:
    """One launch each of torch FP32, cuBLAS TF32 and every variant on shape `name`, each between
    cudaProfilerStart and Stop (the process `--ncu` runs under ncu); prints their order."""
    m, n, k, batch = SHAPES[name]
    a = torch.randn(batch, m, k, device="cuda")
    bt = torch.randn(batch, n, k, device="cuda")
    b_rows = bt.transpose(1, 2).contiguous()
    d = torch.empty(batch, m, n, device="cuda")
    workspace = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    systems = {"torch FP32": lambda: torch.bmm(a, bt.transpose(1, 2), out=d),
               "cuBLAS TF32": lambda: torch.bmm(a, bt.transpose(1, 2), out=d)}
    systems |= {key: (lambda dll=dll: run(dll, a, bt, d, workspace, b=b_rows)) for key, dll in dlls.items()}
    for system, launch in systems.items():
        torch.backends.cuda.matmul.allow_tf32 = system == "cuBLAS TF32"
        launch()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        launch()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    print("NCU-SYSTEMS " + json.dumps(list(systems)), flush=True)


def profile(argv: list[str], shapes: list[str], out: Path) -> str:
    """Each shape's systems under Nsight Compute (a process per shape), as a markdown table."""
    sys.path.insert(0, str(HERE.parent.parent / "scripts"))
    from profile_kernels import kernel_rows

    lines = ["| shape | system | us | FP32-equivalent TFLOP/s | tensor pipe % | issue % | LSU smem "
             "wavefronts | bank conflicts | SM MHz | regs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in shapes:
        m, n, k, batch = SHAPES[name]
        command = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
                   "--print-units", "base", "--metrics", ",".join(NCU_METRICS), sys.executable, __file__,
                   *argv, "--forward", name]
        done = subprocess.run(command, capture_output=True, text=True)
        (out / f"ncu_{re.sub(r'[^0-9a-z]+', '_', name)}.csv").write_text(done.stdout + done.stderr)
        order = next((json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines()
                      if line.startswith("NCU-SYSTEMS ")), [])
        rows = kernel_rows(done.stdout, NCU_METRICS)
        if done.returncode != 0 or len(rows) != len(order):
            lines.append(f"| {name} | ncu exit {done.returncode}, {len(rows)} kernels for {len(order)} "
                         "systems (see its csv) | | | | | | | | |")
            continue
        for system, row in zip(order, rows, strict=True):
            values = [row[metric] for metric in NCU_METRICS]
            ns, gmma, hmma, issue, wavefronts, conflicts, hz, regs = (v if v is not None else float("nan")
                                                                      for v in values)
            gmma = max((v for v in (gmma, hmma) if v == v), default=float("nan"))   # whichever ncu has
            lines.append(f"| {name} | {system} | {ns / 1e3:.1f} | {2.0 * m * n * k * batch / ns / 1e3:.1f} | "
                         f"{gmma:.1f} | {issue:.1f} | {wavefronts:.3g} | {conflicts:.3g} | {hz / 1e6:.0f} | "
                         f"{regs:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    # 128 x TILE_N s STAGES, then "wW": output tiles in strips W wide (the scheduler's swizzle: 1, 2, 4 or
    # 8; the default 1), "d": the direct epilogue only (no TMA store), "t": swapped (B [K, N] row-major
    # split in registers, D written column-major: fuse.gemm.sm90x3_roles); for timing only, a
    # final "n": no split (three products of the raw tiles), "m": one TF32 product, "b": no split of B
    parser.add_argument("--variants", default="128x128s4")
    parser.add_argument("--promotion", default="1,4")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    # after the timings, Nsight Compute's counters of these shapes (a markdown table beside OUT)
    parser.add_argument("--ncu", default="", help="shapes to profile with ncu, comma-separated")
    parser.add_argument("--forward", default="", help=argparse.SUPPRESS)   # the process --ncu profiles
    args = parser.parse_args()
    out = Path(args.out).parent
    builds = [(v, int(p)) for v in args.variants.split(",") for p in args.promotion.split(",")]
    with ThreadPoolExecutor(len(builds)) as pool:
        libs = pool.map(lambda b: build(*b, out, reuse=bool(args.forward)), builds)
        dlls = {f"{v}/p{p}": dll for (v, p), dll in zip(builds, libs, strict=True)}
    if args.forward:
        forward(args.forward, dlls)
        return
    for v, dll in dlls.items():
        print(f"{v}: {dll.x3_smem() / 1024:.0f} KB shared memory a block")
    flush, workspace = l2_flush(), torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for name in args.shapes.split(","):
        rows.append(measure(name, dlls, flush, workspace))
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                          "rows": rows}, indent=1))
    if args.ncu:
        argv = [args.out, "--variants", args.variants, "--promotion", args.promotion]
        table = profile(argv, args.ncu.split(","), out)
        Path(args.out).with_suffix(".ncu.md").write_text(table)
        print(table)


if __name__ == "__main__":
    main()
