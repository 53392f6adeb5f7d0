"""Renders a results folder into report.md, report.json and the plots, from results.jsonl and run.json
alone, so `kernelwright report DIR` can redo it at any time."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from kernelwright.bench.locks import LOCKS_FILE, lock_summary, read_holds, render_lines
from kernelwright.bench.plots import PLOT_FILES, write_plots
from kernelwright.bench.store import ResultsStore
from kernelwright.bench.summary import FAST_P, aa_check, ordered_systems, summarize, with_derived_speedups
from kernelwright.bench.systems import AA_COPY

NOTE_CHARS = 90
NOT_CREDITED = "†"  # marks a speedup cell holding 1.00x for a candidate without a custom kernel
NOTABLE_FLAGS = ("no_custom_kernel", "nondeterministic", "fallback_detected", "timing_disagreement")
SPREAD_SHOWN = 0.01  # a speedup's spread over its timing rounds is shown from this much (±1%)


def write_report(store: ResultsStore) -> dict:
    """Write report.md, report.json and the PNG plots into the results folder; returns the JSON report."""
    rows = with_derived_speedups(store.latest_rows())
    runs = store.runs()
    report = {
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "runs": runs,
        "summary": summarize(rows),
        "aa_check": aa_check(rows),
        "rows": [{k: v for k, v in row.items() if k != "verdict"} for row in rows],
    }
    locks = store.directory / LOCKS_FILE
    if locks.is_file():
        report["locks"] = lock_summary(read_holds(locks))
    (store.directory / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    plots = write_plots(rows, store.directory)
    (store.directory / "report.md").write_text(render_markdown(report, plots))
    return report


def render_markdown(report: dict, plots: list[str] = PLOT_FILES) -> str:
    rows, runs = report["rows"], report["runs"]
    lines = ["# kernelwright bench", ""]
    lines += _environment(runs, rows)
    for device_summary in report["summary"]:
        multi = len(report["summary"]) > 1
        title = f" on {device_summary['device']}" if multi else ""
        lines += [f"## Summary{title}", ""]
        lines += _score_table("", device_summary["overall"], device_summary["systems"])
        lines += [f"### Per level{title}", ""]
        lines += _score_table("level", device_summary["levels"], device_summary["systems"])
        lines += [f"### Per category{title}", ""]
        lines += _score_table("category", device_summary["categories"], device_summary["systems"])
    lines += [
        "fast_p: fraction of the problems that are correct and faster than p× the reference (eager, or "
        "torch.compile where marked); geomean: over correct rows only. Timings are compared only between "
        "rows of the same device model.", "",
    ]
    lines += _not_credited(report["summary"])
    lines += _aa_section(report.get("aa_check") or [], rows)
    lines += _optimize_time_section(rows)
    lines += _outcome_section(rows)
    lines += _judge_time_section(rows)
    lines += render_lines(report.get("locks") or {})
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    lines += ["## Per problem", ""]
    lines += _problem_table(rows)
    return "\n".join(lines) + "\n"


def _environment(runs: list[dict], rows: list[dict]) -> list[str]:
    lines = ["| | |", "|---|---|"]
    for index, run in enumerate(runs):
        env = run.get("environment", {})
        prefix = f"run {index + 1}: " if len(runs) > 1 else ""
        gpus = run.get("gpus") or []
        devices = "; ".join(_gpu_text(g) for g in gpus) or run.get("device_name") or "-"
        lines += [
            f"| {prefix}date | {run.get('started', '-')} |",
            f"| {prefix}device | {devices} |",
            f"| {prefix}driver | {_first(g.get('driver_version') for g in gpus) or '-'} |",
            f"| {prefix}CUDA | torch {env.get('torch_cuda') or '-'}, nvcc {env.get('nvcc_version') or '-'} |",
            f"| {prefix}torch | {env.get('torch', '-')} |",
            f"| {prefix}kernelwright | {env.get('kernelwright', '-')} |",
            f"| {prefix}suite | {run.get('suite', '-')} ({run.get('problems', '?')} problems) |",
            f"| {prefix}options | {_options_text(run.get('options', {}))} |",
        ]
        if run.get("timing_cpus") is not None:   # kernelwright/gpulock.py: CPUs kept for timings
            lines.append(f"| {prefix}timing CPUs | {run['timing_cpus'] or 'none'} |")
    devices = sorted({r["device"] or "unknown" for r in rows})
    lines += [f"| rows | {len(rows)} on {', '.join(devices) or '-'} |", ""]
    return lines


def _gpu_text(gpu: dict) -> str:
    clocks = ""
    if gpu.get("clocks.sm"):
        clocks = (f" (SM {gpu['clocks.sm']} of max {gpu.get('clocks.max.sm', '?')}, "
                  f"mem {gpu.get('clocks.mem', '?')}, power limit {gpu.get('power.limit', '?')})")
    return f"GPU {gpu.get('index', '?')}: {gpu.get('name', '?')}{clocks}"


def _options_text(options: dict) -> str:
    keys = ("device", "trials", "min_runs", "min_time_s", "shrink", "run_timeout_s", "build_timeout_s",
            "reduce_overhead", "systems")
    return ", ".join(f"{k}={options[k]}" for k in keys if k in options) or "-"


def _first(values):
    return next((v for v in values if v), None)


def _score_table(group_name: str, scores: dict[str, dict[str, dict]], systems: list[str]) -> list[str]:
    p_headers = [f"fast_{p:g}" for p in FAST_P]
    head = ([group_name] if group_name else []) + ["system", "problems", "correct", "geomean ×eager",
                                                   "geomean ×compile", *p_headers, "fast_1 vs compile"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for group, by_system in scores.items():
        for system in systems:
            s = by_system[system]
            cells = ([group] if group_name else []) + [
                system, str(s["problems"]), str(s["correct"]), fmt_speedup(s["geomean_vs_eager"]),
                fmt_speedup(s["geomean_vs_compile"]), *(fmt_fraction(s["fast_p"][f"{p:g}"]) for p in FAST_P),
                fmt_fraction(s["fast_p_vs_compile"]["1"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _not_credited(summaries: list[dict]) -> list[str]:
    counts = []
    for device_summary in summaries:
        where = f" on {device_summary['device']}" if len(summaries) > 1 else ""
        for system, s in device_summary["overall"]["all"].items():
            if s.get("not_credited"):
                counts.append(f"{system} {s['not_credited']} of {s['correct']} correct{where}")
    if not counts:
        return []
    return [f"Not credited ({NOT_CREDITED}): {', '.join(counts)}: these candidates run no custom kernel "
            "(only PyTorch ops), so they count as 1.00× eager and as eager vs torch.compile, whatever their "
            "timing measured (shown in their note).", ""]


def _aa_section(checks: list[dict], rows: list[dict]) -> list[str]:
    """The A/A check: the reference judged against itself, problem by problem (DESIGN.md §7)."""
    if not checks:
        return []
    lines = [f"## A/A check ({AA_COPY}: the reference judged as a candidate)", ""]
    times = {(r["problem"], r["device"] or "unknown"): r for r in rows if r["system"] == AA_COPY}
    for check in checks:
        tolerance, ratios = check["tolerance"], check["ratios"]
        worst = check["worst"]
        text = (f"On {check['device']}: {len(ratios)} problems timed, {len(ratios) - len(check['outside'])} "
                f"within 1.00 ± {tolerance:.2f}, {len(check['outside'])} outside")
        text += f"; worst {fmt_speedup(worst['ratio'])} ({worst['problem']})" if worst else ""
        if check["not_timed"]:
            text += "; not timed: " + ", ".join(f"{p} ({s})" for p, s in check["not_timed"].items())
        lines += [text + ".", "", "| problem | eager ms | copy ms | ratio | within |", "|" + "---|" * 5]
        for problem, ratio in sorted(ratios.items()):
            row = times[(problem, check["device"])]
            within = "yes" if abs(ratio - 1) <= tolerance else "**no**"
            lines.append(f"| {problem} | {fmt_ms(row['eager_ms'])} | {fmt_ms(row['time_ms'])} | "
                         f"{ratio:.3f} | {within} |")
        lines.append("")
    return lines


# The stages of `kernelwright optimize` a reader compares (channels-last variants' stages are added in).
# "waiting": time the stages spent waiting for other tasks' timings and builds (the machine and GPU locks).
OPTIMIZE_STAGES = ("capture", "build", "measure", "rank", "judge", "waiting")


def _optimize_time_section(rows: list[dict]) -> list[str]:
    """Where `kernelwright optimize`'s time went, per problem (its --profile, stored in the row)."""
    timed = [r for r in rows if r.get("optimize_profile")]
    if not timed:
        return []
    head = ["problem", "optimize s", *(f"{s} s" for s in OPTIMIZE_STAGES), "nvcc .cu s", "host c++ s",
            "judge trials s", "judge timing s"]
    lines = ["## Where optimize's time went", "",
             "Cold cache, one fresh `kernelwright optimize` per problem, beside the other tasks of this run.",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in sorted(timed, key=lambda r: r["problem"]):
        profile = row["optimize_profile"]
        stages, steps = profile.get("stages", {}), profile.get("build_steps", {})
        judge = profile.get("judge", {})
        per_stage = [sum(v for k, v in stages.items() if k.split("] ")[-1] == name)
                     for name in OPTIMIZE_STAGES]
        cuda = sum(v for k, v in steps.items() if k.endswith(".cuda.o"))
        host = sum(v for k, v in steps.items() if k.endswith(".o") and not k.endswith(".cuda.o"))
        cells = [row["problem"], f"{profile.get('seconds', 0):.1f}", *(f"{v:.1f}" for v in per_stage),
                 f"{cuda:.1f}", f"{host:.1f}", f"{judge.get('trials_s', 0):.1f}",
                 f"{judge.get('timing_s', 0):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    seconds = sorted(r["optimize_profile"].get("seconds", 0) for r in timed)
    lines += ["", f"Median {seconds[len(seconds) // 2]:.1f} s, slowest {seconds[-1]:.1f} s over "
              f"{len(seconds)} problems.", ""]
    return lines


def _outcome_section(rows: list[dict]) -> list[str]:
    """What optimize made of the files that lost to torch.compile or eager, or fell back whole (the
    `outcome` of its --profile): the plan's layout, replay, kernels by family and what fell back to ATen."""
    def behind(row: dict) -> bool:
        outcome = (row.get("optimize_profile") or {}).get("outcome")
        return bool(outcome) and (outcome.get("fallback") is not None or any(
            (row.get(key) or 1.0) < 1.0 for key in ("speedup_vs_eager", "speedup_vs_compile")))

    shown = sorted((r for r in rows if behind(r)), key=lambda r: r.get("speedup_vs_compile") or 0.0)
    if not shown:
        return []
    head = ["problem", "×eager", "×compile", "layout", "replay", "kernels", "fell back to ATen"]
    lines = ["## What optimize made of the files behind eager or torch.compile", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in shown:
        outcome = row["optimize_profile"]["outcome"]
        kernels = ", ".join(f"{n} {family}" for family, n in outcome.get("kernels", {}).items()) or "none"
        dropped = outcome.get("fallback") or "; ".join(outcome.get("dropped") or []) or "-"
        cells = [row["problem"], fmt_speedup(row.get("speedup_vs_eager")),
                 fmt_speedup(row.get("speedup_vs_compile")), outcome.get("layout", "-"),
                 "yes" if outcome.get("replay") else "no", kernels,
                 _cell("whole model: " + dropped if outcome.get("fallback") else dropped)[:NOTE_CHARS]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


# The judge's phases a reader compares (verdict profile keys); the report adds the timed series and the
# waits for other tasks (lock_wait_s, summed over a verdict's processes, which overlap).
JUDGE_PHASES = ("reference_s", "build_s", "trials_s", "timing_s")


def _judge_time_section(rows: list[dict]) -> list[str]:
    """Where the judge's time went, per system, summed over its judged rows (their judge_profile)."""
    systems: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("judge_profile"):
            systems.setdefault(row["system"], []).append(row)
    if not systems:
        return []
    head = ["system", "rows", "task s", *(p.removesuffix("_s") + " s" for p in JUDGE_PHASES),
            "timed series s", "waiting for other tasks s"]
    lines = ["## Where the judge's time went", "",
             "Sums over the judged rows. The phases overlap (the reference loads while the candidate "
             "builds); the timed series are the part of timing that held the GPU; waiting is the time the "
             "verdicts' processes were blocked by other tasks' GPU work, timings and builds, summed over "
             "processes. A kernelwright row's task time includes its optimize; the eager and compile rows' "
             "own timings are not judged verdicts and are not here.",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system, judged in systems.items():
        profiles = [r["judge_profile"] for r in judged]
        series = sum(v for p in profiles for k, v in p.items() if k.startswith("timing_") and
                     k.endswith("_measure_s"))
        cells = [system, str(len(judged)), f"{sum(r.get('seconds') or 0 for r in judged):.0f}",
                 *(f"{sum(p.get(phase, 0) for p in profiles):.0f}" for phase in JUDGE_PHASES),
                 f"{series:.0f}", f"{sum(p.get('lock_wait_s', 0) for p in profiles):.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _problem_table(rows: list[dict]) -> list[str]:
    # The GPU busy share only where the judge measured it (on CUDA, in runs since it does).
    busy = any(row.get("gpu_busy_share") is not None for row in rows)
    graphs = any("speedup_vs_compile_reduce_overhead" in row for row in rows)  # bench --reduce-overhead
    head = ["problem", "category", "system", "verdict", "time ms", "eager ms", "compile ms", "×eager",
            "×compile", *(["×reduce-overhead"] if graphs else []), *(["GPU busy"] if busy else []), "device",
            "note"]
    lines = ["GPU busy: the share of a forward's wall time in which the GPU ran the system's work "
             "(profiled over a few forwards after timing); a low share means launch-bound: the time "
             "goes to Python and kernel launches.", ""] if busy else []
    if graphs:
        lines += ['×reduce-overhead: the candidate against torch.compile(mode="reduce-overhead") (CUDA '
                  "graphs), timed in the same judge (`bench --reduce-overhead`).", ""]
    if any((row.get("speedup_spread") or 0) >= SPREAD_SHOWN for row in rows):
        lines += ["±: half the interquartile range of the judge's timing rounds' ratios over their median "
                  "(each round times the two side by side); launch-bound models vary most.", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {s: i for i, s in enumerate(ordered_systems(rows))}
    for row in sorted(rows, key=lambda r: (r["problem"], order[r["system"]])):
        note = "" if row["status"] == "correct" else _cell(row.get("detail") or "")[:NOTE_CHARS]
        credited = row.get("credited") is not False
        mark = "" if credited else NOT_CREDITED
        credit = "" if credited else f"not credited: measured {fmt_speedup(row['measured_speedup_vs_eager'])}"
        note = "; ".join(filter(None, [credit, *flag_notes(row.get("flags") or {}), note]))
        keys = ("speedup_vs_eager", "speedup_vs_compile",
                *(["speedup_vs_compile_reduce_overhead"] if graphs else []))
        speedups = [fmt_speedup(row.get(key)) + mark for key in keys]
        if (row.get("speedup_spread") or 0) >= SPREAD_SHOWN:
            speedups[0] += f" ±{row['speedup_spread']:.0%}"
        share = [fmt_fraction(row.get("gpu_busy_share"))] if busy else []
        cells = [row["problem"], row["category"], row["system"], row["status"], fmt_ms(row["time_ms"]),
                 fmt_ms(row["eager_ms"]), fmt_ms(row["compile_ms"]), *speedups, *share, row["device"] or "-",
                 note]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def flag_notes(flags: dict) -> list[str]:
    """The judge's flags worth a reader's attention (DESIGN.md §4: reported, not hidden)."""
    notes = [name.replace("_", " ") for name in NOTABLE_FLAGS if flags.get(name)]
    if flags.get("precision") not in (None, "fp32"):
        notes.append(f"precision: {flags['precision']}")
    return notes


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def fmt_speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def fmt_fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def summary_tables(report: dict) -> list:
    """The overall scores as rich tables (one per device model), for the terminal."""
    from rich.table import Table

    tables = []
    for device_summary in report["summary"]:
        table = Table(title=f"bench summary: {device_summary['device']}")
        for column in ("system", "correct", "geomean ×eager", "geomean ×compile",
                       *(f"fast_{p:g}" for p in FAST_P)):
            table.add_column(column, justify="left" if column == "system" else "right")
        for system, s in device_summary["overall"]["all"].items():
            table.add_row(system, f"{s['correct']}/{s['problems']}", fmt_speedup(s["geomean_vs_eager"]),
                          fmt_speedup(s["geomean_vs_compile"]),
                          *(fmt_fraction(s["fast_p"][f"{p:g}"]) for p in FAST_P))
        tables.append(table)
    return tables
