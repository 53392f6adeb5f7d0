"""What an epilogue costs the conv family's kernel (`codegen/conv.py`): one 2-D conv rendered with several
pointwise epilogues, each built with the emitted file's recipe (in parallel), timed (CUDA events, cold L2)
beside cuDNN's conv alone (channels-last, no bias) and ATen's whole chain, with the achieved TFLOP/s.

    python bench/kernels/conv_epilogue.py OUT.json [--shape N,C,H,W,K,R,S] [--only NAME] [--runs 30]

Each consumer warpgroup runs a tile's epilogue while the other runs the next tile's MMA, one warp a
scheduler: an epilogue longer than a tile's MMA is what the kernel waits for (H100, 2026-11-27: 0.27 ms with
bias + ReLU, 0.66 with bias + Mish + Tanh at level2/07's size; `bench/results/
2026-11-27-h100-80gb-hbm3-conv-default/NOTES.md`). `--only NAME --runs 1` runs one variant once, for a
profiler: `ncu --kernel-name regex:conv_pingpong -c 1 --section WarpStateStats --section SourceCounters
python bench/kernels/conv_epilogue.py /tmp/x.json --only mish_tanh --runs 1`.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import l2_flush, time_ms  # noqa: E402

from kernelwright.codegen.assemble import assemble  # noqa: E402
from kernelwright.codegen.build import build_extension  # noqa: E402
from kernelwright.codegen.conv import render  # noqa: E402
from kernelwright.fuse.plan import make_group  # noqa: E402
from kernelwright.ir.graph import Graph  # noqa: E402
from kernelwright.ir.interpret import interpret  # noqa: E402
from kernelwright.ir.ops import input_node, make_node, param_node  # noqa: E402

# epilogue name -> the unary ops after the bias add
EPILOGUES = {"none": (), "relu": ("relu",), "gelu": ("gelu",), "sigmoid": ("sigmoid",), "tanh": ("tanh",),
             "mish_tanh": ("mish", "tanh")}


def chain(n, c, h, w, k, r, s, ops) -> Graph:
    """NHWC conv (no padding, stride 1) + bias + `ops`, transposed to NCHW: the group the matcher forms."""
    x = input_node("x", 0, (n, h, w, c))
    weight, bias = param_node("weight", (k, r, s, c)), param_node("bias", (k,))
    y = make_node("conv", [x, weight], stride=(1, 1), padding=(0, 0), dilation=(1, 1), transposed=False,
                  output_padding=(0, 0), groups=1, has_bias=False, channels_last=True)
    y = make_node("add", [y, bias])
    for op in ops:
        y = make_node(op, [y], **({"approximate": "none"} if op == "gelu" else {}))
    return Graph(inputs=(x,), params=(weight, bias), outputs=(make_node("permute", [y], dims=(0, 3, 1, 2)),))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--shape", default="32,64,127,127,128,3,3", help="N,C,H,W,K,R,S (level2/07's)")
    parser.add_argument("--only", choices=list(EPILOGUES))
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    n, c, h, w, k, r, s = map(int, args.shape.split(","))
    names = [args.only] if args.only else list(EPILOGUES)
    graphs = {name: chain(n, c, h, w, k, r, s, EPILOGUES[name]) for name in names}
    groups = {name: make_group(g, "conv", [node for node in g.nodes() if not node.is_leaf])
              for name, g in graphs.items()}
    kernels = {name: render(group) for name, group in groups.items()}
    with ThreadPoolExecutor(len(kernels)) as pool:
        modules = dict(zip(kernels, pool.map(lambda kernel: build_extension(assemble([kernel])).module,
                                             kernels.values()), strict=True))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, h, w, c, device="cuda", generator=gen)
    weight = torch.randn(k, r, s, c, device="cuda", generator=gen) / (c * r * s) ** 0.5
    bias = torch.randn(k, device="cuda", generator=gen)
    params = {"weight": weight, "bias": bias}
    flush = l2_flush()
    p, q = h - r + 1, w - s + 1
    flops = 2 * n * p * q * k * c * r * s
    nchw_x, nchw_w = x.permute(0, 3, 1, 2), weight.permute(0, 3, 1, 2)   # channels-last memory
    cudnn = time_ms(lambda: torch.nn.functional.conv2d(nchw_x, nchw_w), flush, args.runs)
    results = []
    for name in names:
        call = getattr(modules[name], kernels[name].name)
        ordered = [{"x": x, "weight": weight, "bias": bias}[i.name] for i in groups[name].inputs]
        ours = time_ms(lambda call=call, ordered=ordered: call(ordered), flush, args.runs)
        aten = time_ms(lambda name=name: interpret(graphs[name], [x], params)[0][0].contiguous(), flush,
                       args.runs)
        (got,) = call(ordered)
        (want,), _ = interpret(graphs[name], [x], params)
        error = float((got - want).abs().max())
        results.append({"epilogue": name, "ours_ms": ours, "tflops": flops / ours / 1e9,
                        "aten_chain_ms": aten, "cudnn_conv_ms": cudnn, "max_abs_diff_vs_aten": error})
        print(f"{name:10s} ours {ours:.3f} ms ({flops / ours / 1e9:.0f} TFLOP/s)  ATen chain {aten:.3f} ms  "
              f"cuDNN conv alone {cudnn:.3f} ms  max |ours - ATen| {error:.2e}", flush=True)
    Path(args.out).write_text(json.dumps({"shape": args.shape, "device": torch.cuda.get_device_name(),
                                          "torch": torch.__version__, "results": results}, indent=1))


if __name__ == "__main__":
    main()
