"""The verdict as a rich table for people (`kernelwright eval` without --json)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

_STYLE = {"correct": "bold green", "builds": "bold green", "reference": "bold"}


def print_verdict(verdict: dict, console: Console | None = None) -> None:
    console = console or Console()
    status = verdict["status"]
    table = Table(title=f"kernelwright eval: {escape(verdict.get('problem_id', ''))}", show_header=False)
    table.add_column("", style="bold")
    table.add_column("", overflow="fold")
    table.add_row("verdict", f"[{_STYLE.get(status, 'bold red')}]{status}[/]")
    if verdict.get("detail"):
        table.add_row("detail", escape(verdict["detail"]))
    if verdict.get("candidate"):
        table.add_row("candidate", escape(verdict["candidate"]))
    trials = verdict.get("trials") or []
    if trials:
        table.add_row("trials", escape(_trials_line(trials)))
    for name in ("candidate", "eager", "compile", "compile_reduce_overhead"):
        stats = (verdict.get("timings") or {}).get(name)
        if stats:
            text = f"{stats['median_ms']:.4f} ms median, IQR {stats['iqr_ms']:.4f} ms, n={stats['n']}"
            table.add_row(f"time {name}", text)
    spread = f"{verdict.get('speedup_vs_eager_spread') or 0:.1%}"
    rounds = len(verdict.get("speedup_vs_eager_rounds") or [])
    eager_spread = f" ±{spread} over {rounds} paired timing rounds" if spread != "0.0%" else ""
    pairs = verdict.get("speedup_vs_eager_pairs")
    if pairs:
        eager_spread += f" in {len(pairs)} pairs of processes ({', '.join(f'{r:.3f}' for r in pairs)})"
    for key, label in (("speedup_vs_eager", "vs eager"), ("speedup_vs_compile", "vs torch.compile"),
                       ("speedup_vs_compile_reduce_overhead", "vs torch.compile reduce-overhead")):
        if verdict.get(key) is not None:
            table.add_row(label, f"{verdict[key]:.3f}x" + (eager_spread if key == "speedup_vs_eager" else ""))
    if verdict.get("launch_bound"):
        table.add_row("GPU busy", escape(busy_text(verdict["launch_bound"])))
    flags = {k: v for k, v in (verdict.get("flags") or {}).items() if v not in (False, None, "fp32")}
    if flags:
        table.add_row("flags", escape(", ".join(f"{k}={v}" for k, v in flags.items())))
    for warning in verdict.get("warnings") or []:
        where = f"line {warning['line']}: " if warning.get("line") else ""
        table.add_row("warning", escape(f"{where}{warning['message']}"))
    if verdict.get("build_seconds") is not None:
        table.add_row("build", f"{verdict['build_seconds']:.1f} s")
    env = verdict.get("env") or {}
    gpu = (env.get("gpu") or {}).get("name", "no GPU")
    table.add_row("device", escape(f"{verdict.get('device')} ({gpu}), torch {env.get('torch')}, "
                                   f"CUDA {env.get('torch_cuda')}"))
    console.print(table)


def busy_text(launch_bound: dict) -> str:
    """The verdict's `launch_bound` in a line: per side, the share of a forward's wall time the GPU was busy
    (low: launch-bound), what it is made of, or why it was not measured."""
    parts = []
    for side in ("eager", "candidate"):
        share, per_call = launch_bound.get(f"{side}_gpu_busy_share"), launch_bound.get(side) or {}
        if share is not None:
            busy, wall, kernels = (per_call.get(k, 0) for k in ("busy_ms", "wall_ms", "kernels"))
            parts.append(f"{side} {share:.0%} ({busy:.4g} ms busy of {wall:.4g} ms a forward, "
                         f"{kernels:g} kernels)")
        elif side in (launch_bound.get("errors") or {}):
            parts.append(f"{side} not measured: {launch_bound['errors'][side]}")
    return "; ".join(parts)


def _trials_line(trials: list[dict]) -> str:
    parts = []
    for trial in trials:
        err = trial.get("max_abs_err")
        err_text = f" abs {err:.2g}" if isinstance(err, float) else ""
        parts.append(f"{trial['distribution']}#{trial['seed']}: {trial.get('status')}{err_text}")
    return "; ".join(parts)


def print_static_report(report: dict, console: Console | None = None) -> None:
    """`eval --kernelbench-static`: KernelBench's strict and warning checks, then ours."""
    console = console or Console()
    kernelbench = report["kernelbench"]
    verdict = "[bold green]passes[/]" if kernelbench["passes_strict"] else "[bold red]rejected[/]"
    table = Table(title="static checks", show_header=False)
    table.add_column("", style="bold")
    table.add_column("", overflow="fold")
    table.add_row("candidate", escape(report["candidate"]))
    table.add_row("KernelBench strict", verdict)
    for group, label in ((kernelbench["strict"], "strict"), (kernelbench["warnings"], "warning"),
                         (report["ours"], "ours")):
        for finding in group:
            where = f"line {finding['line']}: " if finding.get("line") else ""
            origin = "" if finding.get("published", True) else " [dim](rule reimplemented by kernelwright)[/]"
            table.add_row(label, f"{escape(finding['check'])}: {escape(where + finding['message'])}{origin}")
    console.print(table)
