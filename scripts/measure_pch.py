"""What the precompiled prelude saves a build (issue 19), on a GPU machine: a bundled problem's extension
built through the recipe (codegen/build.py) in fresh caches, each build in a fresh process as `optimize`
runs it, and the seconds of each build step printed (main.o: the host compile of the binding; cuda.cuda.o:
nvcc; kw_prelude.h.gch: the precompiled prelude, made beside a build's own compile).

    python scripts/measure_pch.py [PROBLEM [OTHER]] [--out DIR]

Builds, in order: PROBLEM without the header (KERNELWRIGHT_NO_PCH=1, as before issue 19); PROBLEM in an empty
cache (the header made beside it); PROBLEM again with the header ready (its library removed); OTHER, a
different extension, with the header ready. Defaults: level1/27_RMSNorm, level1/23_Softmax.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = ("main.o", "cuda.cuda.o", "kw_prelude.h.gch")  # host compile, nvcc, the precompiled prelude


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", nargs="?", default="level1/27_RMSNorm")
    parser.add_argument("other", nargs="?", default="level1/23_Softmax")
    parser.add_argument("--out", help="folder for the caches (default: a temporary one, removed)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return build_one(args.problem)
    out = Path(args.out or tempfile.mkdtemp(prefix="kw-measure-pch-"))
    print(environment())
    runs = [("no header (as before)", args.problem, out / "plain", {"KERNELWRIGHT_NO_PCH": "1"}),
            ("empty cache, header made beside", args.problem, out / "pch", {}),
            ("header ready, same extension", args.problem, out / "pch", {}),
            ("header ready, other extension", args.other, out / "pch", {})]
    rows = []
    for label, problem, cache, env in runs:
        for library in (cache / "builds").glob("kw_*") if cache.is_dir() else []:
            shutil.rmtree(library)  # the third run rebuilds what the second built
        rows.append((label, problem, run_child(problem, cache, env)))
    print(f"\n{'build':<34} {'problem':<22} {'total':>6} {'main.o':>7} {'nvcc':>6} {'header':>7} {'link':>6}")
    for label, problem, built in rows:
        steps = built["steps"]
        main, nvcc, header = (seconds(steps.get(step)) for step in STEPS)
        link = sum(v for k, v in steps.items() if k.endswith(".so"))
        print(f"{label:<34} {problem:<22} {built['seconds']:6.1f} {main:>7} {nvcc:>6} {header:>7} "
              f"{link:6.1f}")
    before, after = rows[0][2]["steps"]["main.o"], rows[3][2]["steps"]["main.o"]
    print(f"\nmain.o with the header ready: {after:.1f} s vs {before:.1f} s without ({after / before:.2f}x)")
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run_child(problem: str, cache: Path, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, __file__, problem, "--child"], capture_output=True, text=True,
                          env={**os.environ, "KERNELWRIGHT_CACHE": str(cache), **env})
    if done.returncode != 0:
        raise SystemExit(f"building {problem} failed:\n{done.stdout}{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def build_one(problem_id: str) -> int:
    """In the child: the problem's kernels rendered as `optimize` renders them, built; steps as JSON."""
    from kernelwright.capture import capture
    from kernelwright.codegen.binding import assemble
    from kernelwright.codegen.build import build_extension
    from kernelwright.codegen.registry import render_group
    from kernelwright.fuse import plan_fusion
    from kernelwright.problem import load_problem

    plan = plan_fusion(capture(load_problem(problem_id)))
    built = build_extension(assemble([render_group(group) for group in plan.groups]))
    print(json.dumps({"name": built.name, "seconds": built.seconds, "steps": dict(built.steps)}))
    return 0


def environment() -> str:
    import torch

    compiler = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (f"torch {torch.__version__}, {compiler.stdout.splitlines()[0] if compiler.stdout else '?'}, "
            f"{os.cpu_count()} CPUs, {gpu}, {platform.node()}")


if __name__ == "__main__":
    sys.exit(main())
