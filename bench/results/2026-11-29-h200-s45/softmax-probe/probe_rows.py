"""Probe (session 45, call 3; run from the repo root at the commit before the softmax's register version was
dropped): a channel softmax on the staged tile in the ordered store ("staged": commit ac77afe's template,
copied here) against the same in registers in `finish` ("registers": the template then in the tree)."""
import string
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, "tests/codegen")
sys.path.insert(0, "tests/fuse")
import test_conv_gpu as t  # noqa: E402

import kernelwright.codegen.conv as cc  # noqa: E402
from kernelwright.codegen.assemble import assemble  # noqa: E402
from kernelwright.codegen.build import build_extension  # noqa: E402
from kernelwright.ir.interpret import interpret  # noqa: E402

old = Path(__file__).with_name("staged_template.cu.in").read_text()
old = (old.replace("$store_function", "$post_function")
       .replace("${name}_store_epilogue", "${name}_post_epilogue").replace("$store_epilogue", "$post"))
templates = {"registers": cc._TEMPLATE, "staged": string.Template(old)}
makers = {"softmax_level2_size": (t._group, t.CASES), "channel_softmax": (t._group, t.CASES),
          "channel_log_softmax_narrow": (t._group, t.CASES),
          "convt_softmax": (t._conv_group, t.PLANNED_CASES),
          "convt_softmax_post": (t._conv_group, t.REDUCED_CASES)}
groups = {name: grouping(cases[name]()) for name, (grouping, cases) in makers.items()}
kernels = {}
for variant, template in templates.items():
    cc._TEMPLATE = template
    for name, group in groups.items():
        kernels[(name, variant)] = cc.render(group)
with ThreadPoolExecutor(max_workers=len(kernels)) as pool:
    modules = dict(zip(kernels, pool.map(lambda k: build_extension(assemble([k])).module, kernels.values()),
                       strict=True))


def gpu_us(run, reps=10):
    run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            run()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages() if "conv_pingpong" in e.key) / reps


for name, group in groups.items():
    graph = t._graph(group)
    inputs, params = t._inputs(graph, seed=1)
    expected, _ = interpret(graph, [x.double() for x in inputs], {k: v.double() for k, v in params.items()})
    args = t._arguments(group, graph, inputs, params)
    line = [name]
    for variant in templates:
        k = kernels[(name, variant)]
        fn = getattr(modules[(name, variant)], k.name)
        got = fn(args)[0]
        err = float((got.double() - expected[0]).abs().max())
        line.append(f"{variant} {gpu_us(lambda fn=fn, args=args: fn(args)):.1f} us err {err:.2e}")
    print(" | ".join(line), flush=True)
