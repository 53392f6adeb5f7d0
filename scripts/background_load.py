"""Does CPU work elsewhere on the host slow a pinned, launch-bound timing? (#19)

Without reserved timing CPUs the machine lock (kernelwright/gpulock.py) keeps every torch import and build off
every timing on the host, and the bench's wall time went mostly to waiting on it (bench/results/2026-11-28-
h200-aa-pairs). This measures what that exclusion buys (bench/results/2026-11-28-h200-suite-reserved-cpu:
13-16% on level3/13, hence quiet timings for launch-bound models). One worker process times a problem's eager
forward in the judge's 0.1 s series, pinned to one CPU; K load processes run on the other CPUs (never the
timing's). Each round times one series with the load stopped (SIGSTOP) and one with it running (SIGCONT), in
alternating order, and takes their ratio, so the host's own drift cancels.

Loads: `import` (each process imports torch again and again, as new judge workers do), `spin` (a busy
loop per process: the shape of an nvcc build's load), `none` (both series quiet: the method's own noise).
A ratio near 1 under load says that reserved timing CPUs (gpulock.py `KERNELWRIGHT_TIMING_CPUS`) can let
builds and imports run beside timings.

    python scripts/background_load.py PROBLEM [--loads none,import,spin] [--procs K] [--rounds R]
    # one JSON object per load on stdout: the rounds' loaded/quiet ratios, their median and half-IQR
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# a sibling script: its worker times one problem's forward, and its spread of the rounds
from process_bias import _half_iqr, worker  # noqa: E402

LOADS = {
    "import": ("import subprocess, sys\n"
               "while True:\n    subprocess.run([sys.executable, '-c', 'import torch'])\n"),
    "spin": "while True:\n    pass\n",
}
RAMP_S = 0.3   # after a load is resumed or stopped, before the series


def _start_loads(kind: str, count: int, timing_cpu: int) -> list[subprocess.Popen]:
    others = sorted(os.sched_getaffinity(0) - {timing_cpu})

    def elsewhere() -> None:
        os.sched_setaffinity(0, others)

    if kind not in LOADS:
        return []
    return [subprocess.Popen([sys.executable, "-c", LOADS[kind]], start_new_session=True,
                             preexec_fn=elsewhere) for _ in range(count)]


def _signal(loads: list[subprocess.Popen], sig: int) -> None:
    for proc in loads:
        try:
            os.killpg(proc.pid, sig)   # the load process and the imports it started
        except ProcessLookupError:
            pass


def _series(proc: subprocess.Popen, settings: dict) -> float:
    proc.stdin.write(json.dumps(settings) + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())["median_ms"]


def run_load(proc: subprocess.Popen, kind: str, count: int, rounds: int, cpu: int) -> dict:
    from kernelwright.judge.timing import LATER_WARM_S, per_round

    loads = _start_loads(kind, count, cpu)
    _signal(loads, signal.SIGSTOP)
    base = {**per_round(100, 1.0), "cpu": cpu, "warm_s": LATER_WARM_S}
    ratios, quiet_ms, loaded_ms = [], [], []
    try:
        for index in range(rounds):
            times = {}
            for loaded in ((False, True) if index % 2 == 0 else (True, False)):
                _signal(loads, signal.SIGCONT if loaded else signal.SIGSTOP)
                time.sleep(RAMP_S)
                times[loaded] = _series(proc, base)
            ratios.append(times[True] / times[False])
            quiet_ms.append(times[False])
            loaded_ms.append(times[True])
    finally:
        _signal(loads, signal.SIGKILL)
        for load in loads:
            load.wait()
    return {"load": kind, "procs": count if kind in LOADS else 0, "rounds": rounds, "cpu": cpu,
            "median_ratio": round(statistics.median(ratios), 4),
            "half_iqr": round(_half_iqr(ratios), 4) if len(ratios) >= 2 else 0.0,
            "quiet_ms": round(statistics.median(quiet_ms), 4),
            "loaded_ms": round(statistics.median(loaded_ms), 4),
            "ratios": [round(r, 4) for r in ratios]}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return worker(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem")
    parser.add_argument("--loads", default="none,import,spin")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cpu", type=int, default=None, help="the timing's CPU (default: the last allowed)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.loads.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in (*LOADS, "none")]
    if unknown:
        parser.error(f"unknown load(s) {unknown}: choose among none, {', '.join(LOADS)}")
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))

    import torch  # noqa: F401 - the GPU lock's file is named by the device's UUID

    from kernelwright.gpulock import gpu_timing

    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen([sys.executable, __file__, "--worker", args.problem, args.device], env=env,
                            text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    json.loads(proc.stdout.readline())
    try:
        with gpu_timing():
            for kind in kinds:
                print(json.dumps({"problem": args.problem, **run_load(proc, kind, args.procs, args.rounds,
                                                                       cpu)}), flush=True)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
