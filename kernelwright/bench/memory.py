"""How much GPU memory a bench task needs, so that a GPU runs as many tasks as its memory holds rather
than a fixed count (DESIGN.md §7; admission itself is in admission.py).

A task's processes on its GPU at its busiest moment (R: the reference's peak, C: the candidate's):
- the judge's reference process (the Model, a trial's inputs and outputs, the timing runs): R;
- while a candidate is judged, its own process beside it: + C (measured when known, else R);
- the kernelwright system first runs `kernelwright optimize`, before the bench's reference process starts
  (tasks.py): its process measures the model's groups on the real values (R) while its own judge's
  reference loads (R), then gives its memory back and that judge runs the candidate beside its reference
  (R + C): at most 2R + C in three processes.
Each process also holds a CUDA context, cuBLAS/cuDNN workspaces and the judge's L2 flush buffer, which
torch's allocator statistics do not count (PROCESS_BYTES), and the caching allocator reserves more than
its peak allocation (ALLOCATOR_SLACK).

R is the judge's measured peak (`verdict["memory"]`), cached per problem source, GPU model and torch version
under `<cache>/memory/`; before any measurement, a static estimate that uses no GPU: the Model built and run
under `torch.device("meta")` (shapes only, nothing allocated): parameters + inputs + the STATIC_LIVE largest
results of its ops (the values a forward holds at once: a chain's input, conv output and norm output) +
STATIC_FIXED_BYTES (workspaces, the judge's own buffers) + the inputs and outputs once more (on CUDA the
reference hands the candidate a copy of each trial's inputs and buffers for its outputs,
judge/tensorfile.py). Held against 38 problems' measured peaks (H100, bench/results/ of 2026-11-24..26) it
is at most 26% under (ConvTranspose2d 0.63 vs 0.85 GiB) and at most 0.14 GiB over (the fixed part, on
batch-1 networks); ReLU 1.75 vs 1.60, Conv2d+GroupNorm+min 1.48 vs 1.34, a 4.5 GiB ConvTranspose3d chain
18.25 vs 18.10 (all before the judge shared copies; the copies are now on both sides, the comparison is
still to be measured again). The former (parameters + inputs + outputs) x 2 was up to 5.7x under for conv
chains and small CNNs (SmallCNN 0.12 vs 0.69 GiB) and 1.9x over for elementwise ops. When the forward fails
on meta tensors that formula stands; when even the model does not build there (a problem that insists on a
real device), the need is unknown and the task runs alone on its GPU.

`python -m kernelwright.bench.memory PROBLEM.py...` prints the static estimates as JSON: the bench runs it
in a child process with no GPU visible, so a problem that allocates for real costs that process only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from kernelwright.bench.plan import BenchTask

GIB = 2**30
# Per process on the GPU: a CUDA context (~500 MiB with lazy module loading), workspaces, the L2 flush buffer.
PROCESS_BYTES = 640 * 2**20
ALLOCATOR_SLACK = 1.25  # reserved over allocated: block rounding and fragmentation of the caching allocator
# Without a forward on meta tensors: intermediate activations, the trial's distribution copies and the
# torch.compile baseline's buffers come on top of parameters, inputs and outputs: about as much again.
STATIC_FACTOR = 2
STATIC_LIVE = 3            # op results counted live at once (the largest)
STATIC_FIXED_BYTES = 256 * 2**20
# Measured peaks are kept per judge layout: those of a judge that held other things are measured again.
# 2: the reference holds shared copies of the inputs and output buffers (judge/tensorfile.py).
PEAKS_LAYOUT = "judge-2"
STATIC_SECONDS_PER_PROBLEM = 20   # a problem whose meta construction hangs gets no estimate

StaticEstimate = Callable[[list[str]], dict[str, int | None]]


def task_need(task: BenchTask, reference: int, candidates: dict[str, int]) -> int:
    """Bytes of GPU memory `task` holds at its busiest, from the reference's peak and the candidates'
    known peaks (by system; a candidate without one is assumed to use what the reference does)."""
    phases = [(reference, 1)]
    for run in task.runs:
        candidate = candidates.get(run.system, reference)
        if run.kind == "kernelwright":
            phases.append((2 * reference + candidate, 3))
        elif run.kind != "reference":
            phases.append((reference + candidate, 2))
    return max(int(ALLOCATOR_SLACK * peak) + processes * PROCESS_BYTES for peak, processes in phases)


class PeakCache:
    """Measured peaks per problem (keyed by its source's hash, so an edited problem is measured again),
    one JSON file each under `root/<judge layout>/<gpu model>/torch-<version>/`, and the seconds each
    system's run took (plan.longest_first orders the next run's tasks by them). Only the bench's main
    thread writes; a write is atomic (a concurrent bench on the same host loses at most its own update)."""

    def __init__(self, root: Path, device_name: str, torch_version: str):
        self.directory = root / PEAKS_LAYOUT / _slug(device_name) / f"torch-{_slug(torch_version)}"

    def _path(self, problem_id: str, problem_path: str) -> Path:
        digest = hashlib.sha256(Path(problem_path).read_bytes()).hexdigest()[:16]
        return self.directory / f"{_slug(problem_id)}-{digest}.json"

    def peaks(self, problem_id: str, problem_path: str) -> dict:
        """{"reference_peak_bytes": int, "candidate_peak_bytes": {system: int}, "seconds": {system: float}},
        or {} when never measured."""
        try:
            return json.loads(self._path(problem_id, problem_path).read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def task_seconds(self, task: BenchTask) -> float | None:
        """How long `task` took when its systems last ran here (None when one of them never did)."""
        seconds = self.peaks(task.problem_id, task.problem_path).get("seconds", {})
        known = [seconds.get(system) for system in task.systems]
        return None if None in known else sum(known)

    def record(self, task: BenchTask, rows: Iterable[dict]) -> None:
        """Fold the peaks measured by `rows` (the judge's `memory` block) and the seconds of the correct
        ones into the problem's entry."""
        entry = self.peaks(task.problem_id, task.problem_path)
        before = json.dumps(entry, sort_keys=True)
        for row in rows:
            # a correct row's seconds only: a failure can end early (an optimize error in seconds) and
            # would put a long task last next time
            if row.get("seconds") is not None and row.get("status") == "correct":
                entry.setdefault("seconds", {})[row["system"]] = row["seconds"]
            memory = row.get("memory") or {}
            if memory.get("reference_peak_bytes"):
                entry["reference_peak_bytes"] = memory["reference_peak_bytes"]
            if memory.get("candidate_peak_bytes") and row.get("status") == "correct":
                entry.setdefault("candidate_peak_bytes", {})[row["system"]] = memory["candidate_peak_bytes"]
        if json.dumps(entry, sort_keys=True) == before:
            return
        path = self._path(task.problem_id, task.problem_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(json.dumps({"problem": task.problem_id, **entry}, indent=1) + "\n")
        os.replace(scratch, path)


def plan_needs(tasks: list[BenchTask], cache: PeakCache | None,
               static: StaticEstimate | None = None) -> tuple[dict[str, int | None], dict[str, str]]:
    """(need in bytes or None, and where the reference's peak came from: "measured", "static" or
    "unknown") per problem id. The static estimates of all unmeasured problems are made in one child
    process."""
    measured = {t.problem_id: cache.peaks(t.problem_id, t.problem_path) if cache else {} for t in tasks}
    unknown = [t.problem_path for t in tasks if not measured[t.problem_id].get("reference_peak_bytes")]
    estimates = (static or static_estimates)(unknown) if unknown else {}
    needs, sources = {}, {}
    for task in tasks:
        peaks = measured[task.problem_id]
        reference, source = peaks.get("reference_peak_bytes"), "measured"
        if not reference:
            reference, source = estimates.get(task.problem_path), "static"
        if not reference:
            needs[task.problem_id], sources[task.problem_id] = None, "unknown"
            continue
        needs[task.problem_id] = task_need(task, reference, peaks.get("candidate_peak_bytes") or {})
        sources[task.problem_id] = source
    return needs, sources


def static_estimates(paths: list[str]) -> dict[str, int | None]:
    """Static reference peaks of `paths`, from `python -m kernelwright.bench.memory` with no GPU visible
    (a failure there leaves every estimate unknown: those tasks then run alone)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    timeout = 60 + STATIC_SECONDS_PER_PROBLEM * len(paths)
    try:
        result = subprocess.run([sys.executable, "-m", "kernelwright.bench.memory", *paths], env=env,
                                capture_output=True, text=True, timeout=timeout)
        return json.loads(result.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {}


def static_reference_bytes(problem_path: str) -> int | None:
    """The reference's peak from shapes alone (module docstring); None when the problem cannot be built on
    the meta device."""
    import torch

    from kernelwright.problem import load_problem

    try:
        with torch.device("meta"), torch.no_grad():
            problem = load_problem(problem_path)
            model = problem.build_model()
            inputs = problem.inputs()
            held = _bytes(list(model.parameters()) + list(model.buffers())) + _bytes(inputs)
            try:
                sizes, outputs = _op_result_sizes(model, inputs)
            except Exception:  # an op without a meta kernel: count the outputs as large as the inputs
                return STATIC_FACTOR * (held + _bytes(inputs))
    except Exception:
        return None
    shared = _bytes(inputs) + outputs  # the judge's copies for the candidate (module docstring)
    return held + sum(sorted(sizes, reverse=True)[:STATIC_LIVE]) + STATIC_FIXED_BYTES + shared


def _op_result_sizes(model, inputs: list) -> tuple[list[int], int]:
    """The byte size of every op result of `model(*inputs)` that is not a view (a view holds no memory),
    and the bytes of its outputs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    sizes: list[int] = []

    class OpResults(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not any(r.alias_info for r in func._schema.returns):
                sizes.extend(_bytes(t) for t in (out if isinstance(out, (list, tuple)) else [out]))
            return out

    with OpResults():
        outputs = model(*inputs)
    return sizes, _bytes(outputs)


def _bytes(value) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_bytes(v) for v in value.values())
    return 0


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "unknown"


def main(paths: list[str]) -> int:
    def give_up(signum, frame):
        raise TimeoutError

    signal.signal(signal.SIGALRM, give_up)
    estimates = {}
    for path in paths:
        signal.alarm(STATIC_SECONDS_PER_PROBLEM)
        try:
            estimates[path] = static_reference_bytes(path)
        except TimeoutError:
            estimates[path] = None
        finally:
            signal.alarm(0)
    print("\n" + json.dumps(estimates))  # on a line of its own, whatever the problems printed
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
