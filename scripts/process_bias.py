"""How much a launch-bound model's time depends on the process that runs it (#18: the A/A under load).

K worker processes each load one problem and time its eager forward in short series, the judge's way
(judge/timing.py `measure`, one round's settings); each round goes through all K in a random order on one
CPU (`CpuWatch`) and one memory placement, under one hold of the timing lock. Per process: the median over
rounds of its time divided by the round's median across processes (`bias`). A spread of the biases well
beyond what the rounds' own scatter explains is a per-process bias: a two-process A/A cannot average it
away with more rounds.

    python scripts/process_bias.py PROBLEM [--processes K] [--rounds R] [--hashseed same|random]
                                   [--no-aslr] [--label TEXT]          # one JSON object on stdout

`--hashseed same`: every worker gets PYTHONHASHSEED=0 (else each draws its own); `--no-aslr`: workers run
without address-space randomization (personality ADDR_NO_RANDOMIZE), so processes that load the same
things lay them out alike.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

ADDR_NO_RANDOMIZE = 0x0040000


def worker(problem_spec: str, device: str) -> int:
    import torch

    from kernelwright.judge.timing import measure
    from kernelwright.problem import load_problem

    problem = load_problem(problem_spec)
    model = problem.build_model(0, device)
    inputs = problem.inputs(1, device)
    with torch.no_grad():
        model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        print(json.dumps({"ready": os.getpid()}), flush=True)
        for line in sys.stdin:
            settings = json.loads(line)
            stats = measure(lambda: model(*inputs), device, locked=True, **settings)
            print(json.dumps({"median_ms": stats["median_ms"], "iqr_ms": stats["iqr_ms"], "n": stats["n"],
                              "host": stats.get("host")}), flush=True)
    return 0


def _no_aslr() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).personality(ADDR_NO_RANDOMIZE)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return worker(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--hashseed", choices=("same", "random"), default="random")
    parser.add_argument("--no-aslr", action="store_true")
    parser.add_argument("--label", default="")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)

    import torch  # noqa: F401 - the GPU lock's file is named by the device's UUID

    from kernelwright.gpulock import gpu_timing
    from kernelwright.judge.timing import LATER_WARM_S, PLACEMENT_SLOTS, CpuWatch, per_round

    env = dict(os.environ)
    if args.hashseed == "same":
        env["PYTHONHASHSEED"] = "0"
    else:
        env.pop("PYTHONHASHSEED", None)
    started = time.perf_counter()
    command = [sys.executable, __file__, "--worker", args.problem, args.device]
    procs = [subprocess.Popen(command, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              preexec_fn=_no_aslr if args.no_aslr else None)
             for _ in range(args.processes)]
    for proc in procs:
        json.loads(proc.stdout.readline())
    start_s = time.perf_counter() - started
    base = per_round(100, 1.0)
    times: list[list[float]] = [[] for _ in procs]
    hosts: list[list[dict | None]] = [[] for _ in procs]
    cpus = CpuWatch()
    for done in range(args.rounds):
        settings = {**base, "cpu": cpus.pick(), "placement": random.randrange(PLACEMENT_SLOTS)}
        if done:
            settings["warm_s"] = LATER_WARM_S
        order = list(range(len(procs)))
        random.shuffle(order)
        with gpu_timing():
            for index in order:
                procs[index].stdin.write(json.dumps(settings) + "\n")
                procs[index].stdin.flush()
                reply = json.loads(procs[index].stdout.readline())
                times[index].append(reply["median_ms"])
                hosts[index].append(reply["host"])
    for proc in procs:
        proc.stdin.close()
        proc.wait(timeout=60)

    normalized = [[times[p][r] / statistics.median(t[r] for t in times) for r in range(args.rounds)]
                  for p in range(len(procs))]
    bias = [statistics.median(n) for n in normalized]
    scatter = [_half_iqr(n) for n in normalized]
    worst_pair = max(bias) / min(bias)
    print(json.dumps({
        "problem": args.problem, "label": args.label, "processes": args.processes, "rounds": args.rounds,
        "hashseed": args.hashseed, "no_aslr": args.no_aslr, "start_s": round(start_s, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "median_ms": statistics.median(x for t in times for x in t),
        "bias": [round(b, 4) for b in bias], "bias_sd": round(statistics.pstdev(bias), 4),
        "round_scatter": [round(s, 4) for s in scatter], "worst_pair": round(worst_pair, 4),
        "cpu_share": [round(statistics.median(h["cpu_share"] for h in hs if h and "cpu_share" in h), 3)
                      if any(h and "cpu_share" in h for h in hs) else None for hs in hosts],
        "huge_pages_mib": [next((h.get("huge_pages_mib") for h in reversed(hs) if h), None) for hs in hosts],
        "times_ms": [[round(x, 4) for x in t] for t in times],
    }))
    return 0


def _half_iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return (q[2] - q[0]) / 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
