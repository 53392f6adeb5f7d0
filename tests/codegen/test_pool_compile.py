"""The pool kernels without a GPU: every case of `pool_cases.CASES` renders; all of them compile together
with nvcc (compile-only, sm_90a); and the generated arithmetic (windows, padding, divisors, NaN rule,
prologue and epilogue loads) runs on the host, compiled from the very source the GPU builds, against
PyTorch on the CPU."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from pool_cases import CASES, random_inputs, with_rows

from kernelwright.codegen.assemble import assemble
from kernelwright.codegen.build import TORCH_NVCC_FLAGS
from kernelwright.codegen.registry import render_group
from kernelwright.fuse import plan_fusion
from kernelwright.ir.graph import Graph
from kernelwright.ir.interpret import interpret

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


@pytest.fixture(scope="module")
def planned():
    """Per case: the graph, its pool group and the rendered kernel; cases whose windows overlap along H
    also as "<case>+rows" with 3 output rows a thread (`pool_cases.with_rows`)."""
    found = {}
    for name, build in CASES.items():
        graph = build()
        (group,) = [g for g in plan_fusion(graph).groups if g.family == "pool"]
        found[name] = (graph, group, render_group(group))
        rows = with_rows(group)
        if rows is not None:
            found[name + "+rows"] = (graph, rows, render_group(rows))
    return found


def test_overlapping_windows_take_several_rows_a_thread_where_the_gpu_stays_full(planned):
    """The planner's rows per thread: 4 for a 3x3 average of stride 1 over a large input, 1 where the
    work items would no longer fill the GPU, where windows do not overlap along H, or are dilated."""
    from pool_cases import avg_pool, max_pool

    from kernelwright.fuse.pool import plan_pool
    from kernelwright.ir.ops import input_node

    def spec(shape, pool, *args, **kwargs):
        return plan_pool(pool(input_node("x", 0, shape), 2, *args, **kwargs))

    assert spec((24, 128, 256, 256), avg_pool, 3, 1, 1).rows == 4
    assert spec((24, 128, 256, 256), max_pool, 3, 2, 1).rows == 1      # stride 2: measured slower
    assert spec((2, 3, 9, 12), avg_pool, 3, 1, 1).rows == 1            # 12 work items
    assert spec((24, 128, 256, 256), max_pool, 2, 2).rows == 1         # no overlap
    assert spec((24, 128, 256, 256), max_pool, 3, 1, 1, dilation=2).rows == 1
    assert sum(name.endswith("+rows") for name in planned) >= 8


def test_every_case_renders_one_kernel_with_its_entry(planned):
    kernels = [kernel for _, _, kernel in planned.values()]
    names = [k.name for k in kernels]
    assert len(set(names)) == len(names)
    for kernel in kernels:
        assert f"int {kernel.name}_launch(" in kernel.cuda and f"kw_entry_{kernel.name}(" in kernel.cuda
        assert "torch" not in kernel.cuda


@needs_nvcc
def test_all_variants_compile_with_nvcc(planned, tmp_path):
    sources = assemble([kernel for _, _, kernel in planned.values()])
    cu = tmp_path / "pools.cu"
    cu.write_text(sources.cuda_text)
    # the extension build's flags, but a fast assembler pass (its errors all come earlier)
    result = subprocess.run(
        ["nvcc", "-O3", "-gencode=arch=compute_90a,code=sm_90a", *TORCH_NVCC_FLAGS, "-Xptxas", "-O0", "-c",
         str(cu), "-o", str(tmp_path / "pools.o")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "warning" not in result.stderr, result.stderr[-4000:]


# The host run: the same CUDA text with the kernels' functions, and kw_common's math helpers their
# prologues and epilogues call, made callable from the host (`__host__ __device__`); a main() per case reads
# the inputs, runs every work item as one GPU thread would (the warp layout: the 32 lanes' partial windows,
# combined as the shuffle reduction combines them) and writes the output.
MATH_SECTION = re.compile(r"^// -+ math\n.*?^// -+ reductions\n", re.MULTILINE | re.DOTALL)
DEVICE_ONLY = "__device__ __forceinline__"
HOST_TOO = "__host__ __device__ __forceinline__"
HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static std::vector<float> read_floats(const char* path, size_t count) {
  std::vector<float> data(count);
  FILE* f = fopen(path, "rb");
  if (!f || fread(data.data(), sizeof(float), count, f) != count) {
    fprintf(stderr, "cannot read %zu floats from %s\n", count, path);
    exit(2);
  }
  fclose(f);
  return data;
}

static void write_floats(const char* path, const std::vector<float>& data) {
  FILE* f = fopen(path, "wb");
  fwrite(data.data(), sizeof(float), data.size(), f);
  fclose(f);
}
"""

CASE_RUNNER = r"""
static void run_$index(char** paths) {
  using namespace $name;
$reads
  std::vector<float> out(static_cast<size_t>(OUTPUTS));
  const Args a{$args};
  if constexpr (WARP) {
    for (idx_t o = 0; o < OUTPUTS; ++o) {
      const Coord c = coord_of(o);
      const Bases b = bases_of(c.plane);
      const Window win = window_of(c.d, c.h, c.w);
      float acc = window_partial<32>(a, b, win, 0);
      for (int lane = 1; lane < 32; ++lane) {
        const float part = window_partial<32>(a, b, win, lane);
        acc = IS_MAX ? kw::maximum(acc, part) : acc + part;
      }
      a.out[o] = finish(a, b, acc, c, win);
    }
  } else if constexpr (ADAPTIVE) {
    for (idx_t o = 0; o < OUTPUTS; ++o) thread_output(a, o);
  } else {
    for (idx_t g = 0; g < GROUPS; ++g) thread_outputs<VEC, WIDE_LOADS>(a, g);
  }
  write_floats(paths[$n_inputs], out);
}
"""


def host_source(cases: dict) -> str:
    sources = assemble([kernel for _, _, kernel in cases.values()]).cuda_sources
    headers, math = sources[0], MATH_SECTION.search(sources[0])
    assert math, "kw_common.cuh no longer has its math section between '// --- math' and '// --- reductions'"
    text = headers[:math.start()] + math.group().replace(DEVICE_ONLY, HOST_TOO) + headers[math.end():]
    text += "\n".join(kernel.replace(DEVICE_ONLY, HOST_TOO) for kernel in sources[1:])
    runners, branches = [], []
    for index, (_, group, kernel) in enumerate(cases.values()):
        reads = "\n".join(f"  const std::vector<float> in{k} = read_floats(paths[{k}], {node.numel});"
                          for k, node in enumerate(group.inputs))
        args = ", ".join([f"in{k}.data()" for k in range(len(group.inputs))] + ["out.data()"])
        runners.append(CASE_RUNNER.replace("$index", str(index)).replace("$name", kernel.name)
                       .replace("$reads", reads).replace("$args", args)
                       .replace("$n_inputs", str(len(group.inputs))))
        branches.append(f"  if (which == {index}) run_{index}(argv + 2);")
    main = "int main(int argc, char** argv) {\n  const int which = atoi(argv[1]);\n" + "\n".join(branches) + \
        "\n  return 0;\n}\n"
    return text + HARNESS + "".join(runners) + main


@needs_nvcc
def test_generated_code_run_on_the_host_matches_torch(planned, tmp_path):
    cases = planned
    cu = tmp_path / "pools_host.cu"
    cu.write_text(host_source(cases))
    exe = tmp_path / "pools_host"
    # PTX only for the device side: its machine code is the compile-only test's business
    built = subprocess.run(["nvcc", "-std=c++17", "-gencode=arch=compute_90,code=compute_90", str(cu), "-o",
                            str(exe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-4000:]
    for index, (name, (graph, group, _)) in enumerate(cases.items()):
        inputs, params = random_inputs(graph, seed=index)
        trials = [("", inputs)]
        if "max" in name:
            # a NaN anywhere in a window makes its max NaN, as in ATen
            with_nan = [x.clone() for x in inputs]
            with_nan[0].view(-1)[::37] = float("nan")
            trials.append((" with NaNs", with_nan))
        for label, values in trials:
            got = run_on_host(exe, index, graph, group, values, params, tmp_path)
            expected = reference(graph, group, values, params)
            assert got.shape == expected.shape, name
            assert torch.equal(torch.isnan(got), torch.isnan(expected)), f"{name}{label}: NaNs differ"
            torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6, equal_nan=True,
                                       msg=lambda m, name=name, label=label: f"{name}{label}: {m}")


def run_on_host(exe, index: int, graph: Graph, group, inputs, params, folder) -> torch.Tensor:
    leaves = {id(n): v for n, v in zip(graph.inputs, inputs, strict=True)}
    leaves.update({id(p): params[p.name] for p in graph.params})
    paths = []
    for k, node in enumerate(group.inputs):
        path = folder / f"case{index}_in{k}.bin"
        leaves[id(node)].contiguous().numpy().astype(np.float32).tofile(path)
        paths.append(str(path))
    out = folder / f"case{index}_out.bin"
    done = subprocess.run([str(exe), str(index), *paths, str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return torch.from_numpy(np.fromfile(out, dtype=np.float32)).reshape(group.outputs[0].shape)


def reference(graph: Graph, group, inputs, params) -> torch.Tensor:
    sub = Graph(graph.inputs, graph.params, group.outputs)
    (value,), _ = interpret(sub, [x.double() for x in inputs], {k: v.double() for k, v in params.items()})
    return value

