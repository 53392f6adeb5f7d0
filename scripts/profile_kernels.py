"""Per-kernel hardware counters of one problem's forward under eager, torch.compile and a candidate file
(Nsight Compute), so that a problem behind its bound can be read kernel by kernel: time, DRAM bytes and
bandwidth, compute and tensor-pipe utilization (issues #20, #22: "the note shows with profiler numbers").

    python scripts/profile_kernels.py OUT_DIR PROBLEM [CANDIDATE.py]   # ncu around each system's forward
    python scripts/profile_kernels.py --forward SYSTEM PROBLEM [CANDIDATE.py]   # (what ncu runs)

For each system a fresh process builds the model and its inputs, warms the forward up three times (so
that torch.compile's compilation and our extensions' loading are not profiled), then runs one forward
between cudaProfilerStart and cudaProfilerStop, which `ncu --profile-from-start off` profiles
(`--clock-control none`: the lent machines' clocks are left alone). Writes OUT_DIR/<system>.csv (ncu's raw
page) and OUT_DIR/profile.md (one table per system: each kernel's time, GB moved, GB/s against the
device's copy bandwidth, SM and DRAM throughput in % of peak, tensor-pipe activity); prints the tables.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

METRICS = {
    "gpu__time_duration.sum": "ns",
    "dram__bytes_read.sum": "bytes",
    "dram__bytes_write.sum": "bytes",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm %",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "mem %",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": "gmma %",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "hmma %",
    "launch__registers_per_thread": "regs",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy %",
}
SYSTEMS = ("eager", "compile", "candidate")
WARMUP = 3


def forward(system: str, problem_path: str, candidate: str | None) -> None:
    """One profiled forward of `system` (the process ncu runs)."""
    import torch

    from kernelwright.problem import load_problem

    problem = load_problem(problem_path)
    model_class = None
    if system == "candidate":
        namespace: dict = {"__name__": "kernelwright_profiled"}
        source = Path(candidate).read_text()
        exec(compile(source, candidate, "exec"), namespace)  # noqa: S102 (a file we profile on purpose)
        model_class = namespace["ModelNew"]
    model = problem.build_model(device="cuda", model_class=model_class)
    inputs = problem.inputs(device="cuda")
    run = torch.compile(model) if system == "compile" else model
    with torch.no_grad():
        for _ in range(WARMUP):
            run(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        run(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def kernel_rows(raw_csv: str, metrics=METRICS) -> list[dict]:
    """The kernels of ncu's `--csv --page raw` output: one dict per kernel launch, `metrics`' values as
    floats (None where ncu gave none: a metric this GPU has not)."""
    lines = [line for line in raw_csv.splitlines() if line.startswith('"')]
    if not lines:
        return []
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    header, body = table[0], table[1:]
    if body and body[0] and not body[0][0].strip().isdigit():
        body = body[1:]   # the units row
    rows = []
    for cells in body:
        row = dict(zip(header, cells, strict=False))
        entry = {"kernel": row.get("Kernel Name", "?")}
        for metric in metrics:
            text = (row.get(metric) or "").replace(",", "")
            try:
                entry[metric] = float(text)
            except ValueError:
                entry[metric] = None
        rows.append(entry)
    return rows


def render(system: str, rows: list[dict], copy_gbs: float | None) -> list[str]:
    """A markdown table of `rows`, the kernels sorted by time, with a total line."""
    lines = [f"### {system}", "",
             "| kernel | us | GB | GB/s | of copy | sm % | mem % | tensor % | regs | occupancy % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    total_ns = total_bytes = 0.0
    for row in sorted(rows, key=lambda r: -(r["gpu__time_duration.sum"] or 0)):
        ns = row["gpu__time_duration.sum"] or 0.0
        moved = (row["dram__bytes_read.sum"] or 0.0) + (row["dram__bytes_write.sum"] or 0.0)
        total_ns, total_bytes = total_ns + ns, total_bytes + moved
        gbs = moved / ns if ns else 0.0
        tensor = max(row[m] or 0.0 for m in METRICS if "tensor_op" in m)
        lines.append(
            f"| {row['kernel'][:70]} | {ns / 1e3:.1f} | {moved / 1e9:.3f} | {gbs:.0f} | "
            f"{f'{gbs / copy_gbs:.0%}' if copy_gbs else '-'} | {_cell(row, 'sm__throughput')} | "
            f"{_cell(row, 'gpu__compute_memory')} | {tensor:.0f} | {_cell(row, 'launch__registers')} | "
            f"{_cell(row, 'sm__warps_active')} |")
    gbs = total_bytes / total_ns if total_ns else 0.0
    share = f"{gbs / copy_gbs:.0%}" if copy_gbs else "-"
    lines.append(f"| **all {len(rows)} kernels** | {total_ns / 1e3:.1f} | {total_bytes / 1e9:.3f} | "
                 f"{gbs:.0f} | {share} | | | | | |")
    return lines + [""]


def _cell(row: dict, prefix: str) -> str:
    """The value of the row's metric named by `prefix`, rounded, or "-" where ncu gave none."""
    value = next((v for k, v in row.items() if k.startswith(prefix)), None)
    return "-" if value is None else f"{value:.0f}"


def copy_bandwidth() -> float:
    """GB/s of a device-to-device copy, as the kernel benchmarks measure it (bench/kernels/_timing.py)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "kernels"))
    from _timing import copy_bandwidth as measured

    return measured(torch.empty(64 * 2**20, dtype=torch.int8, device="cuda"))


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "--forward":
        forward(argv[1], argv[2], argv[3] if len(argv) > 3 else None)
        return 0
    if len(argv) < 2:
        print("usage: python scripts/profile_kernels.py OUT_DIR PROBLEM [CANDIDATE.py]", file=sys.stderr)
        return 2
    out, problem = Path(argv[0]), argv[1]
    candidate = argv[2] if len(argv) > 2 else None
    out.mkdir(parents=True, exist_ok=True)
    copy_gbs = copy_bandwidth()
    lines = [f"# Per-kernel counters: {problem}", "", f"Device copy: {copy_gbs:.0f} GB/s", ""]
    for system in SYSTEMS:
        if system == "candidate" and candidate is None:
            continue
        command = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
                   "--print-units", "base", "--metrics", ",".join(METRICS),
                   sys.executable, __file__, "--forward", system, problem]
        command += [candidate] if candidate else []
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
        (out / f"{system}.csv").write_text(done.stdout)
        rows = kernel_rows(done.stdout)
        if done.returncode != 0 or not rows:
            lines += [f"### {system}", "", f"ncu exit {done.returncode}: "
                      + " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])[:500], ""]
            continue
        lines += render(system, rows, copy_gbs)
    text = "\n".join(lines) + "\n"
    (out / "profile.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
