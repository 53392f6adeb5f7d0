"""How many global loads a reduction kernel issues before it first computes, read from its SASS: whether a
thread's loads are in flight together (memory-level parallelism) without a GPU. Renders a case of
tests/codegen/reduction_cases.py (its planned launch, and with `ReductionSpec.full_unroll`), compiles it for
sm_90a and disassembles it with cuobjdump (on PATH, or from the `nvidia-cuda-cuobjdump` wheel unpacked
somewhere on PATH).

    python scripts/sass_loads.py cosine_by_three_sums picked_minus_logsumexp

For each instantiation (vector width, cluster, row cache): global loads in the function, and loads issued
before the first floating-point instruction. Session 13 (2026-11-26), on the full-size graphs: the cosine
form over 16384x10240 (2.5 chunks a thread) had 2 loads up front in the runtime loop, 6 unrolled;
logsumexp over 32768 rows of 4093 had 1 and 16.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "codegen"))

from reduction_cases import CASES, full_unroll  # noqa: E402

from kernelwright.codegen.assemble import assemble  # noqa: E402
from kernelwright.codegen.registry import render_group  # noqa: E402
from kernelwright.fuse.plan import plan_fusion  # noqa: E402

COMPUTE = re.compile(r"\b(FFMA|FADD|FMUL|FMNMX|MUFU|IMNMX|FSETP)\b")


def loads_up_front(sass: str) -> dict[str, tuple[int, int]]:
    """Per kernel instantiation in `sass`: (global loads, loads before the first compute instruction)."""
    counts = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = part.split("\n", 1)
        template = re.search(r"kernelILi(\d+)ELi(\d+)ELb([01])E", name)
        if template is None:
            continue
        lines = [line for line in body.splitlines() if "LDG" in line or COMPUTE.search(line)]
        first = next((i for i, line in enumerate(lines) if "LDG" not in line), len(lines))
        vec, cluster, cache = template.groups()
        counts[f"vec{vec} cluster{cluster} {'cached' if cache == '1' else 'uncached'}"] = (
            sum("LDG" in line for line in lines), first)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="names from tests/codegen/reduction_cases.py's CASES")
    args = parser.parse_args()
    tool = shutil.which("cuobjdump")
    if tool is None or shutil.which("nvcc") is None:
        print("needs nvcc and cuobjdump on PATH (pip download nvidia-cuda-cuobjdump, unzip, add its bin/)")
        return 2
    include = REPO / "kernelwright" / "codegen" / "cuda"
    for case in args.cases:
        if case not in CASES:
            print(f"unknown case {case!r}")
            return 2
        groups = [g for g in plan_fusion(CASES[case]()).groups if g.family == "reduction"]
        for form, change in (("loop", lambda g: g), ("full_unroll", full_unroll)):
            kernels = [render_group(change(g)) for g in groups if change(g) is not None]
            if not kernels:
                continue
            with tempfile.TemporaryDirectory() as folder:
                cu, cubin = Path(folder) / "k.cu", Path(folder) / "k.cubin"
                cu.write_text(assemble(kernels).cuda_text)
                subprocess.run(["nvcc", "-std=c++17", f"-I{include}", "-gencode=arch=compute_90a,code=sm_90a",
                                "-cubin", "-o", str(cubin), str(cu)], check=True, capture_output=True)
                sass = subprocess.run([tool, "-sass", str(cubin)], check=True, capture_output=True,
                                      text=True).stdout
            for variant, (total, early) in sorted(loads_up_front(sass).items()):
                print(f"{case:32s} {form:11s} {variant:28s} {total:3d} loads, "
                      f"{early:3d} before the first use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
