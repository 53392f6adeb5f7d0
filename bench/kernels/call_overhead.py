"""Host cost of one kernel call (checks, operands, output allocation, launch) of the kernelwright tree that
PYTHONPATH picks: tiny tensors, so the GPU idles and the time per call is the launch path's own.

    PYTHONPATH=OLD_TREE python bench/kernels/call_overhead.py old; python bench/kernels/call_overhead.py new

Alternate trees in separate processes (old, new, old, new): one process's numbers move by 1-3 us with the
machine, torch.relu and torch.empty in the same process are the reference."""
import sys
import time

import torch

try:
    from kernelwright.codegen.assemble import assemble
except ImportError:             # trees before the runtime extension (2026-11-26)
    from kernelwright.codegen.binding import assemble
from kernelwright.codegen.build import build_extension
from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion
from kernelwright.ir.graph import Graph
from kernelwright.ir.ops import input_node, make_node

tag = sys.argv[1] if len(sys.argv) > 1 else "tree"
x = input_node("x", 0, (64, 1024))
y = input_node("y", 1, (1024,))
cases = {
    "relu 1 input": (Graph((x,), (), (make_node("relu", [x]),)), 1),
    "add+mul 2 inputs bcast": (Graph((x, y), (), (make_node("mul", [make_node("add", [x, y]), x]),)), 2),
    "softmax rows": (Graph((x,), (), (make_node("softmax", [x], dim=1),)), 1),
}
kernels, groups = [], {}
for name, (graph, _) in cases.items():
    (group,) = plan_fusion(graph).groups
    k = render_group(group)
    kernels.append(k)
    groups[name] = k.name
built = build_extension(assemble(kernels))
print(f"build {built.seconds:.1f} s {dict(built.steps)}")
args = [torch.randn(64, 1024, device="cuda"), torch.randn(1024, device="cuda")]


def per_call(fn, n=400):
    """(host us per call: n calls below the launch queue's depth, no sync inside; GPU us per call: events
    over 20 x n calls)."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    host = 1e9
    for _ in range(20):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        host = min(host, (time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20 * n):
        fn()
    end.record()
    end.synchronize()
    return host, start.elapsed_time(end) * 1e3 / (20 * n)


for name, (_, n_in) in cases.items():
    f, ins = getattr(built.module, groups[name]), args[:n_in]
    print(f"{tag:>4} {name:<24} host %.2f us/call, stream %.2f us/call"
          % per_call(lambda f=f, ins=ins: f(ins)))
print(f"{tag:>4} {'torch.relu (ATen)':<24} host %.2f us/call, stream %.2f us/call"
      % per_call(lambda: torch.relu(args[0])))
print(f"{tag:>4} {'torch.empty':<24} host %.2f us/call, stream %.2f us/call"
      % per_call(lambda: torch.empty(64, 1024, device="cuda")))
