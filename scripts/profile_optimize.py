"""Where `kernelwright optimize` spends its time, per problem: each problem optimized in a fresh process
(as the bench runs it) with `--profile`, cold cache first and then warm, and one table of the stages, the
build's steps (nvcc on the kernels' unit; the runtime extension's host compile, once per machine) and the
judge's phases. start = the command's own start (imports, cache lookup, problem load); wait = waiting for
the GPU lock or the judge's processes.

    python scripts/profile_optimize.py OUT_DIR level1/01_ReLU level2/07_Conv2dMishTanh ...
    python scripts/profile_optimize.py OUT_DIR --level 1 --limit 5

Writes OUT_DIR/<id>.{py,json,log} and OUT_DIR/profile.json; prints the table last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--level", type=int)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--no-warm", action="store_true", help="skip the second, warm-cache run")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    problems = args.problems
    if args.level:
        from kernelwright.problem import bundled_problem_ids

        problems += bundled_problem_ids(args.level)
    problems = problems[:args.limit] if args.limit else problems
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(out / "cache"), "PYTHONUNBUFFERED": "1"}
    rows = []
    for phase in ("cold",) + (() if args.no_warm else ("warm",)):
        for problem in problems:
            rows.append(run_one(problem, phase, out, env))
            print(line(rows[-1]), flush=True)
    (out / "profile.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(["", header()] + [line(row) for row in rows]))
    return 0


def run_one(problem: str, phase: str, out: Path, env: dict) -> dict:
    stem = problem.replace("/", "_") + f".{phase}"
    profile, emitted = out / f"{stem}.json", out / f"{stem}.py"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kernelwright.cli", "optimize", problem, "-o", str(emitted),
                           "--profile", str(profile)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    (out / f"{stem}.log").write_text(done.stdout + done.stderr)
    row = {"problem": problem, "phase": phase, "exit": done.returncode, "wall_s": round(wall, 1)}
    if profile.is_file():
        row.update(json.loads(profile.read_text()))
    lines = done.stderr.strip().splitlines() or [""]
    verdict = [ln for ln in lines if ln.startswith(("verification", "whole-model"))] or lines[-1:]
    row["outcome"] = verdict[-1][:90]
    return row


def header() -> str:
    return (f"{'problem':<36} {'phase':<5} {'wall':>6} {'start':>5} {'capt':>5} {'build':>6} {'cu':>5} "
            f"{'rt':>5} {'meas':>5} {'rank':>5} {'wait':>5} {'judge':>6} {'trial':>6} {'time':>5}  outcome")


def line(row: dict) -> str:
    stages, steps, judge = row.get("stages", {}), row.get("build_steps", {}), row.get("judge", {})

    def total(names: tuple[str, ...]) -> float:
        return sum(v for k, v in stages.items() if k.split("] ")[-1] in names)

    cu = sum(v for k, v in steps.items() if k.endswith(".cuda.o") and not k.startswith("runtime "))
    # the runtime extension's host compile: once per machine
    cpp = sum(v for k, v in steps.items() if k.startswith("runtime ") and k.endswith(".o"))
    return (f"{row['problem']:<36} {row['phase']:<5} {row['wall_s']:6.1f} {row.get('startup', 0):5.1f} "
            f"{total(('capture',)):5.1f} {total(('build',)):6.1f} {cu:5.1f} {cpp:5.1f} "
            f"{total(('measure',)):5.1f} {total(('rank',)):5.1f} {total(('waiting', 'judge start')):5.1f} "
            f"{total(('judge',)):6.1f} {judge.get('trials_s', 0):6.1f} {judge.get('timing_s', 0):5.1f}  "
            f"{row.get('outcome', '')}")


if __name__ == "__main__":
    sys.exit(main())
