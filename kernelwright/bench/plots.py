"""PNG plots of a bench run (matplotlib, Agg backend: no display needed): speedup per problem sorted on
a log axis, fast_p curves per system, and a histogram of compile times."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import numpy as np  # noqa: E402

from kernelwright.bench.summary import fast_p, ordered_systems  # noqa: E402

PLOT_FILES = ["speedup.png", "fast_p.png", "compile_time.png"]
SPEEDUPS = (("speedup_vs_eager", "eager PyTorch"), ("speedup_vs_compile", "torch.compile"))


def write_plots(rows: list[dict], directory: Path) -> list[str]:
    """Draw the three plots into `directory`; returns their file names."""
    series = _series(rows)
    for name, draw in zip(PLOT_FILES, (_speedup, _fast_p, _compile_time), strict=True):
        figure = draw(series)
        figure.savefig(directory / name, dpi=110, bbox_inches="tight")
        plt.close(figure)
    return list(PLOT_FILES)


def _series(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows per plotted line: per system, or per system and device model when there are several."""
    multi_device = len({r["device"] for r in rows}) > 1
    series: dict[str, list[dict]] = {}
    for system in ordered_systems(rows):
        for row in (r for r in rows if r["system"] == system):
            label = f"{system} @ {row['device']}" if multi_device else system
            series.setdefault(label, []).append(row)
    return series


def _speedup(series: dict[str, list[dict]]):
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for axis, (key, against) in zip(axes, SPEEDUPS, strict=True):
        for label, rows in series.items():
            values = sorted(r[key] for r in rows if r["status"] == "correct" and r.get(key))
            if values and not (key == "speedup_vs_eager" and label.startswith("eager")):
                axis.plot(range(1, len(values) + 1), values, marker=".", label=label)
        axis.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        axis.set_yscale("log")
        axis.set(title=f"speedup vs {against} (correct problems, sorted)", xlabel="problem rank",
                 ylabel="speedup (log)")
        _legend(axis)
    return figure


def _fast_p(series: dict[str, list[dict]]):
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    thresholds = np.linspace(0, 3, 301)
    for axis, (key, against) in zip(axes, SPEEDUPS, strict=True):
        for label, rows in series.items():
            problems = len({r["problem"] for r in rows})
            axis.plot(thresholds, [fast_p(rows, problems, p, key) for p in thresholds], label=label)
        axis.set(title=f"fast_p vs {against}", xlabel="p (speedup threshold)",
                 ylabel="fraction correct and faster than p", ylim=(0, 1.02))
        _legend(axis)
    return figure


def _compile_time(series: dict[str, list[dict]]):
    figure, axis = plt.subplots(figsize=(7, 4.5))
    times = {label: [t for t in map(_compile_seconds, rows) if t] for label, rows in series.items()}
    times = {label: values for label, values in times.items() if values}
    if times:
        everything = [t for values in times.values() for t in values]
        bins = np.geomspace(min(everything) * 0.9, max(everything) * 1.1, 25)
        axis.hist(list(times.values()), bins=bins, label=list(times), histtype="step", linewidth=1.5)
        axis.set_xscale("log")
        _legend(axis)
    else:
        axis.text(0.5, 0.5, "no compile times recorded", ha="center", va="center", transform=axis.transAxes)
    axis.set(title="time to optimize and build a candidate", xlabel="seconds (log)", ylabel="problems")
    return figure


def _compile_seconds(row: dict) -> float | None:
    """Time to produce a runnable candidate: `kernelwright optimize` plus the judge's build. (The judge
    does not report torch.compile's compile time separately from its warm-up, so it is not plotted.)"""
    parts = [row.get("optimize_seconds"), row.get("build_seconds")]
    return sum(p for p in parts if p) or None


def _legend(axis) -> None:
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=8)
