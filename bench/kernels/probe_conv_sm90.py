"""Route (b) of issue #20, measured: CUTLASS's sm90 implicit-GEMM convolution with the epilogue fused
(`cuda/conv_sm90_evt.cu`: y = relu(conv(x, w) + bias), NHWC, TF32 wgmma) against cuDNN's channels-last
convolution alone (no bias: what our plans call) and with bias and ReLU as eager runs them. Each tile
configuration is built with nvcc (in parallel) and loaded with ctypes; errors are against a float64 run.

    python bench/kernels/probe_conv_sm90.py OUT.json [TM:TN:TK:STAGES:CM:CN[:FLAG...] ...]

FLAGs: `:pp` builds the configuration under `cuda/kw_conv_pingpong.cuh` (persistent, two consumer warpgroups
taking alternate tiles) instead of CUTLASS's ConvUniversal; `:stats` (with `:pp`) also sums each channel's
y and y*y in the epilogue (a following BatchNorm's statistics), checked against float64 sums of y, the
tiles' partials reduced by CUTLASS's final row reduction; `:stats2` the same sums, each tile's partial
stored and a second kernel reducing them (the timing covers both kernels); `:nchw` (with `:pp`) writes y
as NCHW from the accumulators (no TMA store), and `:stats3` (with `:nchw`) sums that store's staged tile
into the same partials; STAGES 0: as many as shared memory holds.

Prints a row per (configuration, shape); the JSON holds the same numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import l2_flush, time_ms  # noqa: E402

SOURCE = Path(__file__).parent / "cuda" / "conv_sm90_evt.cu"
# kw_conv_pingpong.cuh: the compiler's own copy (kernelwright/codegen/cuda), which the conv family builds
HEADERS = Path(__file__).resolve().parents[2] / "kernelwright" / "codegen" / "cuda"
CONFIGS = ["128:128:32:0:1:1", "128:64:32:4:1:1", "128:128:32:0:1:1:pp", "128:64:32:0:1:1:pp",
           "128:128:64:0:1:1:pp", "64:128:32:0:1:1:pp", "128:128:32:0:1:1:pp:stats",
           "128:128:32:5:1:1:pp:stats2"]
# (N, C, H, W), K, kernel, padding, stride, dilation: a level-2 chain's conv, a late ResNet stage, a 1x1,
# odd sizes, one pixel, C = 3 (refused), and 108 pixels x 200 channels (M and N tails, P*Q a multiple of 4)
SHAPES = [((32, 64, 128, 128), 128, 3, 1, 1, 1), ((128, 256, 14, 14), 256, 3, 1, 1, 1),
          ((64, 128, 56, 56), 64, 1, 0, 1, 1), ((2, 4, 9, 13), 8, 3, 1, 2, 1),
          ((8, 32, 33, 17), 64, 5, 2, 1, 2),
          ((1, 4, 1, 1), 4, 1, 0, 1, 1), ((16, 3, 64, 64), 16, 3, 1, 1, 1), ((3, 8, 6, 6), 200, 3, 1, 1, 1)]


def build(config: str, folder: Path) -> Path | str:
    """The built library of one configuration, or why nvcc failed."""
    from cutlass_library import __file__ as library

    root = Path(library).parent / "source"
    tm, tn, tk, stages, cm, cn, *flags = config.split(":")
    out = folder / f"conv_{config.replace(':', '_')}.so"
    # NDEBUG: without it CUTLASS's device-side asserts are calls to __assertfail between wgmma issue and wait,
    # and ptxas serializes every wgmma of the kernel (warning C7510)
    command = ["nvcc", "-std=c++17", "--expt-relaxed-constexpr", "-O3", "-DNDEBUG",
               "-gencode=arch=compute_90a,code=sm_90a", f"-I{root / 'include'}",
               f"-I{root / 'tools' / 'util' / 'include'}", f"-I{HEADERS}", "-Xcompiler", "-fPIC",
               "-shared", f"-DTM={tm}", f"-DTN={tn}", f"-DTK={tk}", f"-DSTAGES={stages}", f"-DCM={cm}",
               f"-DCN={cn}", f"-DPINGPONG={int('pp' in flags)}", f"-DNCHW={int('nchw' in flags)}",
               f"-DSTATS={3 if 'stats3' in flags else 2 if 'stats2' in flags else int('stats' in flags)}",
               "-o", str(out), str(SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True)
    errors = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "error" in line]
    return out if done.returncode == 0 else f"build failed: {' | '.join(errors[:3])[:300]}"


class Conv:
    def __init__(self, library: Path, stats: bool, nchw: bool = False):
        self.launch = ctypes.CDLL(str(library)).kw_conv_launch
        self.launch.restype = ctypes.c_char_p
        self.stats = stats
        self.nchw = nchw
        self.workspace = torch.empty(0, dtype=torch.uint8, device="cuda")

    def __call__(self, x, w_krsc, bias, y, sums, pad, stride, dil) -> str | None:
        n, c, h, wd = x.shape
        k, r, s, _ = w_krsc.shape
        ints = [ctypes.c_int(v) for v in (n, h, wd, c, k, r, s, pad, pad, stride, stride, dil, dil)]
        pointers = [ctypes.c_void_p(t.data_ptr()) for t in (x, w_krsc, bias, y, sums)]
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        size = ctypes.c_size_t(0)
        self.launch(*pointers, *ints, None, ctypes.byref(size), stream)
        if size.value > self.workspace.numel():
            self.workspace = torch.empty(size.value, dtype=torch.uint8, device="cuda")
        error = self.launch(*pointers, *ints, ctypes.c_void_p(self.workspace.data_ptr()), None, stream)
        return error.decode() if error else None


def probe(conv: Conv, shape, k, r, pad, stride, dil, flush) -> dict:
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(k, shape[1], r, r, device="cuda") / (shape[1] * r * r) ** 0.5
    bias = torch.randn(k, device="cuda")
    w_krsc = w.permute(0, 2, 3, 1).contiguous()
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), stride, pad, dil))
    y = torch.empty(ref.shape, device="cuda")
    if not conv.nchw:
        y = y.contiguous(memory_format=torch.channels_last)
    sums = torch.zeros(2 * k, device="cuda")
    row = {"shape": list(shape), "k": k, "kernel": r, "pad": pad, "stride": stride, "dilation": dil}
    error = conv(x, w_krsc, bias, y, sums, pad, stride, dil)
    if error:
        return {**row, "error": error}
    torch.cuda.synchronize()
    if conv.stats:      # against float64 sums of the y the kernel wrote, relative to each sum's scale
        y64 = y.double()
        for name, got, want, scale in (
                ("sum", sums[:k], y64.sum((0, 2, 3)), y64.abs().sum((0, 2, 3))),
                ("sumsq", sums[k:], (y64 * y64).sum((0, 2, 3)), (y64 * y64).sum((0, 2, 3)))):
            row[f"{name}_rel_err"] = ((got.double() - want).abs() / scale.clamp_min(1e-30)).max().item()
    eager = torch.relu(torch.nn.functional.conv2d(x, w, bias, stride, pad, dil))
    flops = 2 * y.numel() * shape[1] * r * r
    row.update(
        err=(y.double() - ref).abs().max().item(), eager_err=(eager.double() - ref).abs().max().item(),
        ms=time_ms(lambda: conv(x, w_krsc, bias, y, sums, pad, stride, dil), flush),
        cudnn_nobias_ms=time_ms(lambda: torch.nn.functional.conv2d(x, w, None, stride, pad, dil), flush),
        eager_ms=time_ms(lambda: torch.relu(torch.nn.functional.conv2d(x, w, bias, stride, pad, dil)), flush))
    row["tflops"] = flops / row["ms"] / 1e9
    row["cudnn_tflops"] = flops / row["cudnn_nobias_ms"] / 1e9
    return row


def probe_library(config: str, library: Path) -> list[dict]:
    """Every shape on one built configuration (run in a child process: a kernel that hangs costs its
    configuration only)."""
    torch.backends.cudnn.allow_tf32 = True      # PyTorch's default, written out: eager's convs are TF32
    flags = set(config.split(":"))
    stats = bool({"stats", "stats2", "stats3"} & flags)
    conv, flush = Conv(library, stats=stats, nchw="nchw" in flags), l2_flush()
    return [{"config": config, **probe(conv, *shape, flush)} for shape in SHAPES]


def print_row(row: dict) -> None:
    head = f"{row['config']:20s} {row.get('shape')} k={row.get('k')}"
    if "error" in row:
        print(f"{head}: {row['error']}")
        return
    print(f"{head} r={row['kernel']}: fused {row['ms']:.3f} ms ({row['tflops']:.0f} TFLOP/s) | cuDNN no bias "
          f"{row['cudnn_nobias_ms']:.3f} ms ({row['cudnn_tflops']:.0f}) | eager conv+bias+relu "
          f"{row['eager_ms']:.3f} ms | err {row['err']:.2g} (eager {row['eager_err']:.2g})" + _sums(row))


def _sums(row: dict) -> str:
    if "sum_rel_err" not in row:
        return ""
    return f" | sums rel err {row['sum_rel_err']:.1g}, {row['sumsq_rel_err']:.1g}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("configs", nargs="*", default=CONFIGS)
    parser.add_argument("--library", help=argparse.SUPPRESS)    # the child process: probe this build
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a configuration may run")
    args = parser.parse_args()
    if args.library:
        Path(args.out).write_text(json.dumps(probe_library(args.configs[0], Path(args.library))))
        return
    rows = []
    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(os.cpu_count()) as pool:
        built = list(pool.map(lambda c: build(c, Path(folder)), args.configs))
        for config, library in zip(args.configs, built, strict=True):
            if isinstance(library, str):
                print_row({"config": config, "error": library})
                rows.append({"config": config, "error": library})
                continue
            part = Path(folder) / "rows.json"
            command = [sys.executable, __file__, str(part), config, "--library", str(library)]
            try:
                done = subprocess.run(command, timeout=args.timeout, capture_output=True, text=True)
                found = json.loads(part.read_text()) if done.returncode == 0 else [
                    {"config": config, "error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}]
            except subprocess.TimeoutExpired:
                found = [{"config": config, "error": f"no result in {args.timeout:.0f} s (a hang?)"}]
            part.unlink(missing_ok=True)
            for row in found:
                print_row(row)
            rows += found
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
