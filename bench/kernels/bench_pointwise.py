"""Benchmark of the pointwise family's flat kernel over its launch knobs (issue #21: pointwise at the
roofline): every knob setting of SWEEP (unroll, block, grid policy, cache hint) on ReLU, a GELU-tanh chain,
a two-tensor add, bias adds and the GELU affine chain at the bundled level1 sizes (one of them odd); the
default and CHECKS (a few settings that stress the tails) at other odd sizes, down to one element. Each
kernel is checked against torch, then timed beside a copy of the same bytes in the same process and
ATen's own kernel for the op.

    python bench/kernels/bench_pointwise.py OUT.json [--only TEXT ...]
    python bench/kernels/bench_pointwise.py --compile-check     # no GPU needed: nvcc on every variant

Columns: `path` the kernel that ran (flat, or strided where an operand's layout is not flat for that
config: a broadcast operand without `bcast`), ms (CUDA events, median of 30 runs, L2 flushed before each),
GB/s = bytes moved (inputs read once + outputs written once) / time, `%copy` = our bandwidth / the
bandwidth of a device-to-device copy of the same number of bytes (`copy_` of half the bytes: one read and
one write of each), `xATen` = ATen's time / ours (> 1: faster than ATen), `err` the max abs error against
torch (`FAIL` past rtol 1e-5, atol 1e-5). The default config is labelled `default`. The closing summary
ranks the configs by the geometric mean of %copy over the swept workloads: the input for the defaults in
kernelwright/codegen/pointwise.py. All kernels are one extension, its CUDA split over several files that
ninja compiles in parallel; OUT.json is rewritten after every workload.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from _timing import time_ms  # noqa: E402

from kernelwright.codegen.assemble import ExtensionSources, assemble  # noqa: E402
from kernelwright.codegen.kernel import KernelSource  # noqa: E402
from kernelwright.codegen.pointwise import PointwiseConfig, render  # noqa: E402
from kernelwright.fuse import plan_fusion  # noqa: E402
from kernelwright.ir.graph import Graph  # noqa: E402
from kernelwright.ir.ops import const_node, input_node, make_node  # noqa: E402

# ------------------------------------------------------------------------------------------- configs

DEFAULT = PointwiseConfig()
# Every knob setting timed on the swept workloads; `broadcast` on, so bias operands take the flat kernel.
KNOBS = {"unroll": (1, 2, 4), "block": (128, 256, 512), "grid": ("persistent", "one_pass"),
         "cache": ("read_only", "streaming")}
SWEEP = [PointwiseConfig(**dict(zip(KNOBS, values, strict=True)), broadcast=True)
         for values in itertools.product(*KNOBS.values())]
SWEEP += [PointwiseConfig(block=256, unroll=unroll, grid=grid, cache="no_allocate", broadcast=True)
          for unroll, grid in itertools.product((1, 4), ("persistent", "one_pass"))]
# The odd sizes: tails of whole tiles (an odd unroll too), of vectors and of elements, both grids.
CHECKS = [PointwiseConfig(block=128, unroll=3, grid="one_pass", cache="streaming", broadcast=True),
          PointwiseConfig(block=512, unroll=2, grid="persistent", cache="read_only", broadcast=True),
          PointwiseConfig(block=512, unroll=4, grid="persistent", cache="no_allocate", broadcast=True),
          PointwiseConfig(block=256, unroll=1, grid="one_pass", cache="read_only", broadcast=True)]


def label(config: PointwiseConfig) -> str:
    text = f"U{config.unroll} b{config.block} {config.grid} {config.cache}"
    text += " bcast" if config.broadcast else ""
    return f"default ({text})" if config == DEFAULT else text


# ------------------------------------------------------------------------------------------- workloads

def _relu(shape: tuple[int, ...]) -> Graph:
    x = input_node("x", 0, shape)
    return Graph((x,), (), (make_node("relu", [x]),))


def _gelu_tanh_chain(shape: tuple[int, ...]) -> Graph:
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), written out op by op (minGPT's NewGELU)."""
    x = input_node("x", 0, shape)
    cube = make_node("mul", [make_node("pow", [x, const_node(3.0)]), const_node(0.044715)])
    inner = make_node("mul", [make_node("add", [x, cube]), const_node(math.sqrt(2.0 / math.pi))])
    gate = make_node("add", [make_node("tanh", [inner]), const_node(1.0)])
    return Graph((x,), (), (make_node("mul", [make_node("mul", [x, const_node(0.5)]), gate]),))


def _gelu_tanh_eager(t: dict[str, torch.Tensor]) -> torch.Tensor:
    x = t["x"]
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _add(shape: tuple[int, ...]) -> Graph:
    x, y = input_node("x", 0, shape), input_node("y", 1, shape)
    return Graph((x, y), (), (make_node("add", [x, y]),))


def _bias_add(shape: tuple[int, ...]) -> Graph:
    """x [..., C] + b [C]: b broadcast over the leading dims."""
    x, b = input_node("x", 0, shape), input_node("b", 1, shape[-1:])
    return Graph((x, b), (), (make_node("add", [x, b]),))


def _channel_bias(shape: tuple[int, ...]) -> Graph:
    """x [N, C, H, W] + b [C, 1, 1] (a convolution's bias): b broadcast before and after the channel dim."""
    x, b = input_node("x", 0, shape), input_node("b", 1, (shape[1], 1, 1))
    return Graph((x, b), (), (make_node("add", [x, b]),))


def _gelu_affine(shape: tuple[int, ...]) -> Graph:
    """GELU(x) * w + b with w, b [C]: the chain issue #21 measured at 72.8% of copy (exact erf GELU)."""
    x, w, b = input_node("x", 0, shape), input_node("w", 1, shape[-1:]), input_node("b", 2, shape[-1:])
    y = make_node("add", [make_node("mul", [make_node("gelu", [x], approximate="none"), w]), b])
    return Graph((x, w, b), (), (y,))


@dataclass(frozen=True)
class Op:
    graph: Callable[[tuple[int, ...]], Graph]
    reference: Callable[[dict[str, torch.Tensor]], torch.Tensor]   # torch, the same math op by op
    aten: Callable[[dict[str, torch.Tensor]], torch.Tensor]        # what eager PyTorch runs for the op
    aten_text: str


OPS = {
    "relu": Op(_relu, lambda t: torch.relu(t["x"]), lambda t: torch.relu(t["x"]), "torch.relu"),
    "gelu_tanh_chain": Op(_gelu_tanh_chain, _gelu_tanh_eager,
                          lambda t: F.gelu(t["x"], approximate="tanh"),
                          "F.gelu(approximate='tanh'), one kernel"),
    "add": Op(_add, lambda t: t["x"] + t["y"], lambda t: t["x"] + t["y"], "x + y"),
    "bias_add": Op(_bias_add, lambda t: t["x"] + t["b"], lambda t: t["x"] + t["b"], "x + b"),
    "channel_bias": Op(_channel_bias, lambda t: t["x"] + t["b"], lambda t: t["x"] + t["b"], "x + b"),
    "gelu_affine": Op(_gelu_affine, lambda t: F.gelu(t["x"]) * t["w"] + t["b"],
                      lambda t: F.gelu(t["x"]) * t["w"] + t["b"], "F.gelu(x) * w + b, three kernels"),
}


@dataclass(frozen=True)
class Workload:
    op: str
    shape: tuple[int, ...]
    sweep: bool          # every config of SWEEP; else CHECKS (always with the default)
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.op} {'x'.join(map(str, self.shape))}"

    @property
    def configs(self) -> list[PointwiseConfig]:
        return [DEFAULT] + [c for c in (SWEEP if self.sweep else CHECKS) if c != DEFAULT]


WORKLOADS = [
    Workload("relu", (16384, 12288), True, "level1/01_ReLU (07_Tanh, 10_Softplus, 14_Softsign)"),
    Workload("gelu_tanh_chain", (64, 2048, 1536), True, "level1/04_GELUTanh's size"),
    Workload("add", (16384, 12288), True),
    Workload("bias_add", (16384, 12288), True, "b [12288]"),
    Workload("channel_bias", (32, 96, 256, 256), True, "level1/05_SiLU's size, b [96, 1, 1]"),
    Workload("gelu_affine", (16384, 16384), True, "bench_reductions' GELU chain (issue #21: 72.8%)"),
    Workload("relu", (12289, 16381), True, "level1/06_Sigmoid's size: numel odd"),
    Workload("relu", (8191, 24573), False, "level1/13_Mish's size"),
    Workload("relu", (250_000_001,), False, "a 1 GB tensor, numel odd"),
    Workload("relu", (1,), False),
    Workload("relu", (4099,), False),
    Workload("gelu_tanh_chain", (8191, 24573), False),
    Workload("add", (12289, 16381), False),
    Workload("add", (5,), False),
    Workload("bias_add", (12289, 16381), False, "b [16381]: read element by element"),
    Workload("bias_add", (3, 6), False, "b [6]"),
    Workload("channel_bias", (7, 3, 5, 5), False, "b [3, 1, 1]: 25 elements per channel"),
]


# ------------------------------------------------------------------------------------------- build

@dataclass(frozen=True)
class Variant:
    workload: Workload
    config: PointwiseConfig
    group: object       # FusedGroup
    kernel: KernelSource


def render_variants(workloads: list[Workload]) -> list[Variant]:
    variants = []
    for workload in workloads:
        (group,) = plan_fusion(OPS[workload.op].graph(workload.shape)).groups
        for config in workload.configs:
            configured = dataclasses.replace(group, config=config.as_tuple())
            variants.append(Variant(workload, config, configured, render(configured)))
    return variants


def unique_kernels(variants: list[Variant]) -> list[KernelSource]:
    return list({v.kernel.name: v.kernel for v in variants}.values())


def shard_sources(sources: ExtensionSources, shards: int) -> list[str]:
    """The kernels as several .cu files (round robin), so that ninja compiles them in parallel."""
    cuda_texts = sources.cuda_sources
    headers, kernels = cuda_texts[0], cuda_texts[1:]
    return ["\n".join([headers] + kernels[s::shards]) for s in range(shards)]


def build(kernels: list[KernelSource]):
    """One library holding every kernel, bound by kernelwright's runtime; returns (a function of (kernel
    name, inputs), seconds). The kernels are built as kernelwright builds them (-O3, the GPU's own
    architecture)."""
    from kernelwright.codegen.build import build_sharded

    sources = assemble(kernels)
    digest = hashlib.sha1((sources.cuda_text + repr(sources.specs)).encode()).hexdigest()[:12]
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}" + ("a" if major >= 9 else "")
    start = time.perf_counter()
    shards = shard_sources(sources, shards=max(1, min(16, os.cpu_count() or 1)))
    module = build_sharded(f"kw_bench_pointwise_{digest}", shards, sources.kernels,
                           cuda_flags=["-std=c++17", f"-gencode=arch=compute_{arch},code=sm_{arch}"])
    return (lambda kernel, inputs: getattr(module, kernel)(inputs)), time.perf_counter() - start


def compile_check(kernels: list[KernelSource]) -> bool:
    """nvcc on every generated variant, without a GPU (kernelwright's compile-only check, per shard)."""
    from kernelwright.codegen.build import nvcc_check

    cu = shard_sources(assemble(kernels), shards=8)
    ok = True
    for index, text in enumerate(cu):
        check = nvcc_check(text)
        print(f"shard {index}: {'ok' if check.ok else 'FAILED'} in {check.seconds:.1f} s", flush=True)
        if not check.ok:
            print(check.log)
        ok = ok and check.ok
    return ok


# ------------------------------------------------------------------------------------------- timing

def make_inputs(graph: Graph, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return {n.name: torch.randn(n.shape, device="cuda", generator=gen) for n in graph.inputs}


def copy_ms(nbytes: int, flush: torch.Tensor) -> float:
    """A device-to-device copy of `nbytes` bytes read and written in total (half each way)."""
    src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return time_ms(lambda: dst.copy_(src), flush)


KERNEL_EVENT = re.compile(r"(pw_\w+)::(flat_kernel|strided_kernel<[\w ]+>)")


def launched_paths(calls: dict[str, Callable[[], object]]) -> dict[str, str]:
    """Which kernel (flat or strided) each call launched, from the CUDA kernel names the profiler records
    (the launcher decides at run time)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for call in calls.values():
            call()
        torch.cuda.synchronize()
    by_kernel = {}
    for event in prof.events():
        match = KERNEL_EVENT.search(event.name)
        if match:
            by_kernel[match.group(1)] = "flat" if match.group(2) == "flat_kernel" else "strided"
    return {name: by_kernel.get(name, "?") for name in calls}


def run_workload(workload: Workload, variants: list[Variant], run: Callable, flush: torch.Tensor) -> dict:
    """Check and time every variant of one workload; ATen and the copy of the same bytes beside them."""
    op = OPS[workload.op]
    tensors = make_inputs(op.graph(workload.shape))
    reference = op.reference(tensors)
    nbytes = sum(t.numel() * t.element_size() for t in [*tensors.values(), reference])
    row = {"op": workload.op, "shape": list(workload.shape), "note": workload.note, "bytes": nbytes,
           "aten": op.aten_text, "copy_ms": copy_ms(nbytes, flush),
           "aten_ms": time_ms(lambda: op.aten(tensors), flush)}
    row["copy_gbs"] = nbytes / row["copy_ms"] / 1e6
    calls, configs = {}, []
    for variant in variants:
        call = (lambda k=variant.kernel.name, a=[tensors[n.name] for n in variant.group.inputs]: run(k, a))
        (out,) = call()
        entry = {"config": dataclasses.asdict(variant.config), "label": label(variant.config),
                 "kernel": variant.kernel.name, "max_err": float((out - reference).abs().max()),
                 "ok": bool(torch.allclose(out, reference, rtol=1e-5, atol=1e-5, equal_nan=True))}
        out = None
        entry["ms"] = time_ms(call, flush)
        entry.update(gbs=nbytes / entry["ms"] / 1e6, of_copy=row["copy_ms"] / entry["ms"],
                     vs_aten=row["aten_ms"] / entry["ms"])
        calls[variant.kernel.name] = call
        configs.append(entry)
    paths = launched_paths(calls)
    for entry in configs:
        entry["path"] = paths[entry["kernel"]]
    row["configs"] = configs
    return row


def print_workload(workload: Workload, row: dict) -> None:
    aten = row["aten_ms"]
    print(f"\n== {workload.name}  {workload.note}\n   {row['bytes'] / 1e9:.3f} GB moved; "
          f"copy {row['copy_ms']:.3f} ms = {row['copy_gbs']:.0f} GB/s; "
          f"ATen ({row['aten']}) {aten:.3f} ms = {100 * row['copy_ms'] / aten:.1f}% of copy", flush=True)
    print(f"   {'config':38s} {'path':7s} {'ms':>8s} {'GB/s':>6s} {'%copy':>6s} {'xATen':>6s}  err")
    for entry in sorted(row["configs"], key=lambda e: e["ms"]):
        verdict = f"{entry['max_err']:.1e}" + ("" if entry["ok"] else " FAIL")
        print(f"   {entry['label']:38s} {entry['path']:7s} {entry['ms']:8.3f} {entry['gbs']:6.0f} "
              f"{100 * entry['of_copy']:6.1f} {entry['vs_aten']:6.3f}  {verdict}", flush=True)


def summary(rows: dict[str, dict], swept: list[str]) -> list[dict]:
    """Configs ranked by the geometric mean of %copy over the swept workloads (each measured on all)."""
    scores: dict[str, list[float]] = {}
    for name in swept:
        for entry in rows[name]["configs"]:
            scores.setdefault(entry["label"], []).append(entry["of_copy"] if entry["ok"] else 0.0)
    ranked = [{"label": key, "worst_of_copy": min(values),
               "geomean_of_copy": math.exp(sum(math.log(max(v, 1e-9)) for v in values) / len(values))}
              for key, values in scores.items() if len(values) == len(swept)]
    return sorted(ranked, key=lambda r: -r["geomean_of_copy"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--only", nargs="*", default=None, help="workloads whose name contains one of these")
    parser.add_argument("--compile-check", action="store_true", help="nvcc every variant (no GPU) and exit")
    args = parser.parse_args()
    workloads = [w for w in WORKLOADS if not args.only or any(text in w.name for text in args.only)]
    variants = render_variants(workloads)
    kernels = unique_kernels(variants)
    if args.compile_check:
        print(f"{len(kernels)} kernels from {len(workloads)} workloads")
        sys.exit(0 if compile_check(kernels) else 1)
    if args.out is None:
        parser.error("OUT.json is required unless --compile-check")
    run, seconds = build(kernels)
    device = torch.cuda.get_device_name()
    print(f"{device}: built {len(kernels)} kernels in {seconds:.1f} s", flush=True)
    results = {"device": device, "torch": torch.__version__, "build_s": seconds, "kernels": len(kernels),
               "default": dataclasses.asdict(DEFAULT), "workloads": {}}
    flush = torch.empty(64 * 2**20, dtype=torch.int8, device="cuda")     # larger than the 50 MB L2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for workload in workloads:
        mine = [v for v in variants if v.workload == workload]
        row = run_workload(workload, mine, run, flush)
        torch.cuda.empty_cache()
        results["workloads"][workload.name] = row
        print_workload(workload, row)
        swept = [w.name for w in workloads if w.sweep and w.name in results["workloads"]]
        results["summary"] = summary(results["workloads"], swept)
        args.out.write_text(json.dumps(results, indent=2))
    failed = [(name, entry["label"]) for name, row in results["workloads"].items()
              for entry in row["configs"] if not entry["ok"]]
    print(f"\n{len(failed)} wrong results" + "".join(f"\n  FAIL {name}: {lab}" for name, lab in failed))
    ranked = results["summary"]
    print(f"\nConfigs by geometric mean of %copy over {len(swept)} swept workloads (worst workload beside):")
    default_rank = next((i for i, r in enumerate(ranked) if r["label"].startswith("default")), None)
    for index, entry in enumerate(ranked):
        if index < 12 or index == default_rank:
            print(f"  {index + 1:3d}. {entry['label']:38s} {100 * entry['geomean_of_copy']:6.1f}%  "
                  f"worst {100 * entry['worst_of_copy']:6.1f}%")


if __name__ == "__main__":
    main()
