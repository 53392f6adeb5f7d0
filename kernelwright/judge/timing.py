"""Timing one callable the same way for candidate, eager and torch.compile: warm-up, then at least
`min_runs` runs and `min_time_s` seconds, the L2 cache flushed before every run, median / IQR / n.

On CUDA each run is bracketed by CUDA events on the current stream. Work moved to a side stream or a
background thread is invisible to those events, so a second, shorter series brackets each run by wall clock
around a device-wide synchronize; where the GPU still works well past the events' time after the call has
returned (the median of the runs' wall time after the call's own host time, over the events' median), that
is reported as a timing disagreement (`disagrees`). The call's host time is left out of that gap: a host
slowed by other processes lengthens it, not the work (a 0.11 ms candidate replayed as one CUDA graph,
0.02 ms of host time alone, was judged by its wall time under `bench --jobs 3` and credited 1.90x eager
instead of 4.18x: bench/results/2026-11-29-h200-s45). On the CPU runs are timed by wall clock.

The judge's timing rounds (`alternating_rounds`) run both sides of a round with their threads pinned to one
CPU, the least busy allowed one since the last round (`CpuWatch`; `$KERNELWRIGHT_TIMING_CPU`: `off`, or a
CPU number). A launch-bound model's time is the host's: on the lent 16-vCPU H100 VMs a pass pinned to each
CPU in turn timed one eager FireModule forward at 0.80-2.97 ms a CPU, and the slow CPUs of one pass were
fast in the next (so no CPU is "the fast one"; /proc/stat showed them all idle); what helps is timing the
two sides of a comparison close together, in short rounds.

Lockstep (`measure`'s `take_turn`): the judge's two processes, candidate and eager, time a round in turns of
about TURN_S each, handing the floor to each other through the judge between turns, so that both sides'
runs of a round interleave within milliseconds instead of following each other as two series. On the lent
VMs a launch-bound model's host side switches between two speeds (level3/13's eager forward: series
medians of about 1.05 or 1.7 ms, H200) many times a second, so two consecutive 0.1 s series often caught
different speeds (scripts/process_bias.py); an A/A under `bench --jobs 8` held 0.95x-1.035x through 60
rounds (bench/results/2026-11-28-h200-aa-rounds). A turn that follows the other side's starts with one
untimed run where runs are shorter than a turn: the host's caches then hold this side's work again.

The timing functions are bound when this module is imported, before any candidate code runs, so a
candidate that patches `time` or `torch.cuda` afterwards cannot change what the judge measures.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from time import perf_counter, sleep, thread_time

try:
    import resource
except ImportError:   # not on Linux: no per-thread counters
    resource = None

import torch

from kernelwright.gpulock import CPU_ENV, gpu_timing, pinned, reserved_cpus

_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_current_stream = torch.cuda.current_stream
_empty_cache = torch.cuda.empty_cache
_memory_stats = torch.cuda.memory_stats
_getaffinity = getattr(os, "sched_getaffinity", None)

MAX_RUNS = 100_000
WALL_RUNS, WALL_MIN_RUNS, WALL_TIME_S = 30, 5, 0.25  # the wall-clock cross-check: its runs, bounded by time
WARM_S = 0.1  # the warm-up's least time
WARM_IN_FLIGHT = 3  # warm-up runs queued at most (see _measure_cuda_alone)
DISAGREE_MIN_MS = 0.05  # a gap below this is launch/synchronize overhead, never a disagreement
DISAGREE_FRACTION = 0.3  # ... and above this fraction of the wall time it is work the events did not see
# Rounds (`alternating_rounds`): the judge times candidate and eager (and eager and torch.compile) in
# alternating short rounds under one hold of the timing lock, so that both see the same machine (clocks,
# other processes, the host's speed); a speedup is the median of the rounds' ratios. Rounds stop once the
# last MIN_ROUNDS ratios agree within ROUND_AGREEMENT, or at MAX_ROUNDS unless still noisy (below; without
# `settle`: after MIN_ROUNDS, their median outvoting a disturbed round). A round's series lasts
# 1/ROUND_SHARE of the judge's min_time_s, after a warm-up of LATER_WARM_S once its process is warm: on the
# lent H100 VMs a launch-bound model's host side runs at one of two speeds (FireModule 0.9 or 1.4 ms, a tiny
# ResNet 1.1 or 2.0 ms) for seconds at a time, and rounds of 0.7 s a side often paired a fast round with a
# slow one (an identical copy was judged 0.79-1.26x eager; with these rounds 0.96-1.04x,
# bench/results/2026-11-27-h100-80gb-hbm3-aa).
MIN_ROUNDS, MAX_ROUNDS, ROUND_SHARE = 5, 15, 10
ROUND_AGREEMENT = 0.015
# Rounds that have not settled by MAX_ROUNDS go on while the median ratio is less certain than
# RATIO_ERROR (its standard error, estimated from the ratios' spread), up to NOISY_MAX_ROUNDS and while all
# rounds so far took under NOISY_ROUNDS_S (less when the caller's deadline is near; on CUDA only). A
# launch-bound model's rounds on a shared host scatter by about +-5% (half the IQR), so the median of 15 was
# off by about 2.3% (one sigma): a whole-suite A/A with `--jobs 8` on one H200 put two of the five
# launch-bound copies at 0.94-0.95x (bench/results/2026-11-28-h200-aa-rounds). Their rounds cost about
# 0.3 s each (both sides); with that scatter a 1% error needs some 80 rounds, so they run to the cap. Alone
# the extra rounds brought every launch-bound copy within 2.2%; under `--jobs 8` an offset of up to 5%
# remained that held through all 60 rounds. Rounds in lockstep (`take_turn`) scatter by about 1% instead
# (bench/results/2026-11-28-h200-lockstep), so these extra rounds are now rarely needed.
NOISY_MAX_ROUNDS, NOISY_ROUNDS_S, RATIO_ERROR = 60, 20.0, 0.01
LATER_WARM_S, ROUND_WALL_S = 0.02, 0.05
# Placement (`placed`): where a model's intermediates sit in GPU memory can set its speed. level2/28's cuDNN
# dgrad ran 426 or 493 us (H200) as its workspace moved by 512-byte steps, flipping with each doubling of the
# offset (bench/results/2026-11-28-h200-aa-placement); a worker process kept the blocks its first forward
# got, so an A/A held 1.08x or 0.94x through every round. Each round therefore draws a slot, and both sides'
# series of that round carve their intermediates from one fresh segment after a pad of PLACEMENT_BASE +
# slot * PLACEMENT_UNIT bytes (offsets over 2 MiB, in the allocator's 512-byte blocks; the base is 2 MiB
# because a request of 1 MiB or less goes to the small-block pool): the same slot for both sides of a round,
# another in the next. Not moved: an intermediate that fits a free block beside a live tensor (the allocator
# takes the best fit).
PLACEMENT_UNIT, PLACEMENT_SLOTS, PLACEMENT_BASE = 512, 4096, 2 * 2**20
PLACEMENT_TRIES = 32   # pads asked for before one lands at the fresh segment's start (see `placed`)
TURN_S = 0.01   # a side's turn in lockstep rounds (the series split into about min_time_s / TURN_S turns)
CPU_WINDOW_S = 0.1  # how long CpuWatch's first pick watches the CPUs (/proc/stat counts in 10 ms ticks)


def l2_flush_buffer(device: str) -> torch.Tensor | None:
    """A buffer twice the L2 size (at least 64 MiB): writing it evicts everything a previous run left."""
    if device != "cuda":
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 0) or 50 * 2**20
    return torch.empty(max(2 * l2, 64 * 2**20) // 4, dtype=torch.int32, device="cuda")


def measure(fn: Callable[[], object], device: str, min_runs: int = 100, min_time_s: float = 1.0,
            locked: bool = False, cpu: int | None = None, warm_s: float = WARM_S,
            wall_s: float = WALL_TIME_S, placement: int | None = None,
            take_turn: Callable[[], None] | None = None) -> dict:
    """{"median_ms", "iqr_ms", "n", "wall_median_ms", "disagrees", "seconds", "cpu"} for `fn` on `device`
    (seconds: the whole measurement's, warm-up included, lockstep waits not; cpu: the CPU the series ran
    on, None unpinned),
    on CUDA "host" (`host_share` over the timed series), and "placed" (whether `placed` could place the
    series) when a `placement` was asked for.
    `locked`: the caller (the judge, timing candidate and eager in turn) already holds the timing lock.
    `cpu`: the CPU to run on (the judge picks one per round for both sides); None: where the scheduler
    puts it.
    `warm_s`, `wall_s`: the least time of the warm-up and of the wall-clock cross-check (the judge's later
    rounds of an already warm process take less).
    `placement`: a slot in [0, PLACEMENT_SLOTS) where the series' intermediates go (`placed`); None: where
    the allocator puts them.
    `take_turn`: lockstep (the module's docstring): called before each turn of the series (the first with the
    warm-up, the last the wall-clock check), it returns when this side has the floor; needs `locked` on
    CUDA (the other side's turns run under the same hold of the timing lock). "seconds" then counts from
    the first turn (the setup before it overlaps the other side's) and leaves out the waits after it,
    reported as "turn_wait_s"."""
    clock = {"start": perf_counter(), "waited": 0.0, "turns": 0}
    turn = None
    if take_turn is not None:
        if device == "cuda" and not locked:
            raise ValueError("a series in turns runs under its caller's timing lock (locked=True)")

        def turn() -> None:
            begin = perf_counter()
            take_turn()
            if clock["turns"]:
                clock["waited"] += perf_counter() - begin
            else:   # the first turn: the count starts here
                clock["start"] = perf_counter()
            clock["turns"] += 1
    if device == "cuda":
        with contextlib.ExitStack() as stack:
            if not locked:  # no other process's GPU work overlaps the series (kernelwright/gpulock.py)
                stack.enter_context(gpu_timing())
            cpu = pinned_cpu(stack, cpu)
            stats = _measure_cuda_alone(fn, min_runs, min_time_s, warm_s, wall_s, placement, turn)
    else:
        stats = _measure_cpu(fn, min_runs, min_time_s, turn)
    turns = {} if turn is None else {"turn_wait_s": clock["waited"]}
    return {**stats, "seconds": perf_counter() - clock["start"] - clock["waited"], **turns,
            "cpu": cpu if device == "cuda" else None}


def round_settings(command: dict) -> dict:
    """The `measure` settings a judge's timing request carries (`cpu`, `warm_s`, `wall_s`, `placement`)."""
    return {key: command[key] for key in ("cpu", "warm_s", "wall_s", "placement") if key in command}


def series_turns(min_time_s: float) -> int:
    """The turns of a lockstep series of `min_time_s`: round(min_time_s / TURN_S), at least one, the same
    number for every side of a round."""
    return max(1, round(min_time_s / TURN_S))


def turn_blocks(runs: int, min_time_s: float, take_turn: Callable[[], None] | None) -> list[int]:
    """The timed runs of a series per turn: all in one without `take_turn`, else split as evenly as they go
    into `series_turns` (a slow callable's later turns may be empty: the other side still gets its turns in
    between)."""
    turns = 1 if take_turn is None else series_turns(min_time_s)
    return [runs // turns + (1 if i < runs % turns else 0) for i in range(turns)]


def max_turns(min_time_s: float) -> int:
    """The most turns a side of a lockstep round asks for: `turn_blocks`' turns and the wall-clock check's."""
    return series_turns(min_time_s) + 1


class CpuWatch:
    """Picks the allowed CPU that was least busy (user, system, interrupts and a VM's steal time from
    /proc/stat) since the previous pick, the first pick watching `window_s`, so that a run of timing rounds
    does not sleep before each. The CPU a round ran on looks busy with that round itself, so rounds move
    between idle CPUs (both sides of each round still share one). Ties are broken at random: on an idle
    host every CPU ties, and timings on two GPUs of one host must not pick the same one.
    `$KERNELWRIGHT_TIMING_CPU`: a CPU number, or `off`. With reserved timing CPUs (gpulock.py
    `reserved_cpus`), one of those. None: pinning off, or no /proc/stat (not Linux)."""

    def __init__(self, window_s: float = CPU_WINDOW_S) -> None:
        self.window_s, self.ticks = window_s, None

    def pick(self) -> int | None:
        setting = os.environ.get(CPU_ENV, "").strip().lower()
        if setting == "off" or _getaffinity is None:
            return None
        if setting.isdigit():
            return int(setting)
        try:
            allowed = reserved_cpus() or _getaffinity(0)
            if self.ticks is None:
                self.ticks = _busy_ticks()
                sleep(self.window_s)
            before, self.ticks = self.ticks, _busy_ticks()
        except (OSError, ValueError, IndexError):
            return None
        busy = {c: self.ticks[c] - before[c] for c in allowed if c in before and c in self.ticks}
        if not busy:
            return None
        least = min(busy.values())
        return random.choice(sorted(c for c, ticks in busy.items() if ticks == least))


def _busy_ticks() -> dict[int, int]:
    """Per CPU, its ticks not idle so far (/proc/stat: user nice system idle iowait irq softirq steal)."""
    ticks = {}
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith("cpu") and line[3].isdigit():
                name, *fields = line.split()
                values = [int(v) for v in fields[:8]]
                ticks[int(name[3:])] = sum(values) - values[3] - values[4]
    return ticks


def pinned_cpu(stack: contextlib.ExitStack, cpu: int | None) -> int | None:
    """Pin the calling thread to `cpu` until `stack` closes (its affinity is restored); the CPU pinned, or
    None when `cpu` is None or not to be had here (the series then runs where the scheduler puts it)."""
    return stack.enter_context(pinned(cpu))


def per_round(min_runs: int, min_time_s: float) -> dict:
    """The `measure` settings of one round of `alternating_rounds` for a judge's `min_runs`/`min_time_s`."""
    return {"min_runs": max(10, min_runs // ROUND_SHARE), "min_time_s": min_time_s / ROUND_SHARE,
            "wall_s": ROUND_WALL_S}


def alternating_rounds(time_side: Callable[[str, dict], dict] | None, sides: Sequence[str], settings: dict,
                       settle: bool = True, pin: bool = True, noisy_s: float = NOISY_ROUNDS_S,
                       together: Callable[[Sequence[str], dict], dict[str, dict]] | None = None,
                       ) -> dict[str, list[dict]]:
    """Each side's `measure` stats per round: `time_side(side, settings)` for every side in a round, back to
    back on one CPU (`CpuWatch`, with `pin`: on CUDA) and one memory placement (a random slot, `placed`), in
    turns of who goes first (an order effect cancels), the warm-up shortened once every side has run; as
    long as `more_rounds` says (until they settle, or their median ratio is certain enough, rounds past
    MAX_ROUNDS only while all took under `noisy_s`; MIN_ROUNDS without `settle`). `together(order,
    settings)`, in place of `time_side`: every side's stats of one round timed in lockstep (the module's
    docstring), `order[0]` taking the first turn. The caller holds the timing lock around all of it."""
    rounds: dict[str, list[dict]] = {side: [] for side in sides}
    cpus, started = CpuWatch(), perf_counter()
    while more_rounds(rounds, sides, settle, perf_counter() - started, noisy_s):
        done = len(rounds[sides[0]])
        now = {**settings, "cpu": cpus.pick() if pin else None,
               "placement": random.randrange(PLACEMENT_SLOTS)}
        if done:   # every side's process is warm after its first round
            now["warm_s"] = LATER_WARM_S
        order = sides if done % 2 == 0 else sides[::-1]
        timed = together(order, now) if together else {side: time_side(side, now) for side in order}
        for side in sides:
            rounds[side].append(timed[side])
    return rounds


def more_rounds(rounds: dict[str, list[dict]], sides: Sequence[str], settle: bool, spent_s: float,
                noisy_s: float = NOISY_ROUNDS_S) -> bool:
    """Whether `alternating_rounds` times another round, after rounds that took `spent_s`: up to MIN_ROUNDS
    always; with `settle`, until they settle, up to MAX_ROUNDS, and past that while some side's median ratio
    is less certain than RATIO_ERROR (within NOISY_MAX_ROUNDS, and while `spent_s` < `noisy_s`)."""
    done = len(rounds[sides[0]])
    if done < MIN_ROUNDS:
        return True
    if not settle or settled(rounds, sides):
        return False
    if done < MAX_ROUNDS:
        return True
    return done < NOISY_MAX_ROUNDS and spent_s < noisy_s and ratio_error(rounds, sides) > RATIO_ERROR


def ratio_error(rounds: dict[str, list[dict]], sides: Sequence[str]) -> float:
    """The largest relative standard error, over the other sides, of the median of their paired ratios to
    the first side: 1.2533 sigma / sqrt(n) (a median's, of a normal sample), sigma estimated robustly from
    the ratios' interquartile range (IQR / 1.349 = 2 ratio_spread / 1.349 relative to the median). 0 without
    ratios (a side timed at zero: more rounds cannot mend that)."""
    worst = 0.0
    for other in sides[1:]:
        ratios = paired_ratios(rounds[sides[0]], rounds[other])
        if not ratios:
            return 0.0
        worst = max(worst, 1.2533 * 2 * ratio_spread(ratios) / 1.349 / math.sqrt(len(ratios)))
    return worst


def settled(rounds: dict[str, list[dict]], sides: Sequence[str] = ("candidate", "eager")) -> bool:
    """The last MIN_ROUNDS ratios of every other side's round to the first side's agree within
    ROUND_AGREEMENT (one side alone: it has MIN_ROUNDS rounds)."""
    first = rounds[sides[0]][-MIN_ROUNDS:]
    if len(first) < MIN_ROUNDS or any(r["median_ms"] <= 0 for r in first):
        return False
    for other in sides[1:]:
        ratios = paired_ratios(first, rounds[other][-MIN_ROUNDS:])
        middle = statistics.median(ratios)
        if not all(abs(r - middle) <= ROUND_AGREEMENT * middle for r in ratios):
            return False
    return True


def paired_ratios(ours: list[dict], theirs: list[dict], wall: bool = False) -> list[float] | None:
    """Their time over ours, round by round (None without a positive time of ours). A round's series run
    on one CPU, in lockstep turns or back to back, so a ratio cancels what the host did to both (a
    launch-bound model's rounds ranged 0.85-1.6 ms in one process on an H100 VM, and the median of each
    side's medians paired a fast round with a slow one). `wall`: our time is the larger of the event and
    wall-clock medians (work hidden from the events)."""
    ratios = []
    for mine, other in zip(ours, theirs, strict=True):
        ms = max(mine["median_ms"], mine["wall_median_ms"]) if wall else mine["median_ms"]
        if ms <= 0:
            return None
        ratios.append(other["median_ms"] / ms)
    return ratios


def paired_ratio(ours: list[dict], theirs: list[dict], wall: bool = False) -> float | None:
    """The median of `paired_ratios` (None without any)."""
    ratios = paired_ratios(ours, theirs, wall)
    return statistics.median(ratios) if ratios else None


def ratio_spread(ratios: list[float]) -> float:
    """Half the interquartile range of the rounds' ratios over their median: the "±" of a paired ratio (0
    for fewer than four rounds). Quartiles by the inclusive method, so that one disturbed round of five,
    which the median outvotes, does not widen it either."""
    middle = statistics.median(ratios) if len(ratios) >= 4 else 0.0
    if middle <= 0:
        return 0.0
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return (q3 - q1) / 2 / middle


def public(stats: dict) -> dict:
    """The timing fields a verdict carries: median, IQR, runs, and the rounds: their spread, medians, CPUs,
    placements and what the host did to each (`host_share`)."""
    return {k: stats[k] for k in ("median_ms", "iqr_ms", "n", "wall_median_ms", "rounds", "round_spread",
                                  "round_medians_ms", "round_cpus", "rounds_placed", "round_host")
            if k in stats}


def combine_rounds(rounds: list[dict]) -> dict:
    """One timing from several rounds of `measure` of the same callable: the median of the rounds' medians
    (a round disturbed by anything is outvoted), their IQRs' median, and the spread between rounds."""
    medians = [r["median_ms"] for r in rounds]
    middle = statistics.median(medians)
    return {
        "median_ms": middle,
        "iqr_ms": statistics.median(r["iqr_ms"] for r in rounds),
        "n": sum(r["n"] for r in rounds),
        "wall_median_ms": statistics.median(r["wall_median_ms"] for r in rounds),
        "disagrees": sum(bool(r["disagrees"]) for r in rounds) * 2 > len(rounds),
        "rounds": len(rounds),
        "round_spread": (max(medians) - min(medians)) / middle if middle > 0 else 0.0,
        "round_medians_ms": [round(m, 6) for m in medians],
        "round_cpus": [r.get("cpu") for r in rounds],
        "rounds_placed": sum(1 for r in rounds if r.get("placed")),
        **({"round_host": [r.get("host") for r in rounds]} if any(r.get("host") for r in rounds) else {}),
    }


def summarize(times_ms: list[float]) -> dict:
    if len(times_ms) >= 4:
        q1, _, q3 = statistics.quantiles(times_ms, n=4)
    else:
        q1 = q3 = statistics.median(times_ms)
    return {"median_ms": statistics.median(times_ms), "iqr_ms": q3 - q1, "n": len(times_ms)}


def _run_count(per_run_s: float, min_runs: int, min_time_s: float) -> int:
    wanted = math.ceil(min_time_s / max(per_run_s, 1e-7))
    return int(min(MAX_RUNS, max(min_runs, wanted)))


def wall_run_count(n: int, per_run_s: float, wall_s: float = WALL_TIME_S) -> int:
    """Runs of the wall-clock cross-check after `n` timed runs of `per_run_s` each: up to WALL_RUNS, fewer
    for slow callables (about `wall_s` in all, never below WALL_MIN_RUNS): a median of a few runs shows
    hidden work as well as thirty, and each run of a 50 ms model is time the GPU lock is held."""
    return max(1, min(n, WALL_RUNS, max(WALL_MIN_RUNS, math.ceil(wall_s / max(per_run_s, 1e-7)))))


def _measure_cpu(fn, min_runs: int, min_time_s: float, turn: Callable[[], None] | None = None) -> dict:
    if turn is not None:
        turn()
    start = perf_counter()
    fn()  # warm-up: lazy initialization, allocator growth
    per_run = max(perf_counter() - start, 1e-7)
    times = []
    for index, block in enumerate(turn_blocks(_run_count(per_run, min_runs, min_time_s), min_time_s, turn)):
        if index:
            turn()
            if block and per_run < TURN_S:
                fn()   # untimed, as on CUDA
        for _ in range(block):
            t0 = perf_counter()
            fn()
            times.append((perf_counter() - t0) * 1e3)
    stats = summarize(times)
    return {**stats, "wall_median_ms": stats["median_ms"], "disagrees": False}


def placed(fn: Callable[[], object], slot: int) -> list[torch.Tensor] | None:
    """Readies the allocator so that the next calls of `fn` carve their intermediates from one fresh segment,
    after a pad of PLACEMENT_BASE + `slot` * PLACEMENT_UNIT bytes (the comment at PLACEMENT_UNIT says why):
    one call sizes them (the large-block pool's growth), the cache is emptied, a segment of that size plus the
    largest pad is allocated and released to the cache, and the pad is taken from its start. A free block
    beside a live tensor that the pad fits is a better fit than the segment: such a block is filled with a
    pad of its own, held too, and the pad asked for again (at most PLACEMENT_TRIES times). Returns the
    tensors to hold through the series, the segment's pad last; None: no room for the segment, or the pad
    never reached it (the allocator places the intermediates as it will)."""
    _synchronize()
    _empty_cache()
    before = _large_pool_reserved()
    fn()
    _synchronize()
    transient = _large_pool_reserved() - before
    _empty_cache()
    size = PLACEMENT_BASE + slot * PLACEMENT_UNIT
    try:
        span = transient + PLACEMENT_BASE + PLACEMENT_SLOTS * PLACEMENT_UNIT
        segment = torch.empty(span, dtype=torch.uint8, device="cuda")
        start = segment.data_ptr()
        del segment
        held = []
        for _ in range(PLACEMENT_TRIES):
            held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
            if held[-1].data_ptr() == start:
                return held
    except torch.OutOfMemoryError:
        pass
    return None


def _large_pool_reserved() -> int:
    """Bytes the caching allocator holds in segments of its large-block pool (requests over 1 MiB)."""
    return _memory_stats().get("reserved_bytes.large_pool.current", 0)


def _measure_cuda_alone(fn, min_runs: int, min_time_s: float, warm_s: float = WARM_S,
                        wall_s: float = WALL_TIME_S, placement: int | None = None,
                        turn: Callable[[], None] | None = None) -> dict:
    if placement is not None:
        _synchronize()
        _empty_cache()   # the flush buffer gets a segment of its own: a cached block it took a piece of
        # would stay, and the rest of that block could take intermediates before `placed`'s segment does
    flush = l2_flush_buffer("cuda")
    pads = placed(fn, placement) if placement is not None else None   # held through the series
    stream = _current_stream()
    # Warm-up for at least 3 runs and `warm_s`, back to back as the timed series runs them; its duration
    # sizes the series. At most WARM_IN_FLIGHT runs are queued: unbounded, the loop queued runs until the
    # launch queue was full (some 500 runs of a 2-launch GEMM, 1.3 s of GPU work for a 0.1 s warm-up, H100)
    # and the synchronize below waited for all of them. The three ways (unbounded, waiting for every run,
    # this) leave the same series behind (scripts/warmup_check.py, H100, 2026-11-27): this one takes 0.1 s.
    _synchronize()
    if turn is not None:   # the first turn: the warm-up and the first block of the series
        turn()
    start, warm, queued = perf_counter(), 0, deque()
    while warm < 3 or perf_counter() - start < warm_s:
        if len(queued) == WARM_IN_FLIGHT:
            queued.popleft().synchronize()
        flush.zero_()
        fn()
        queued.append(_Event())
        queued[-1].record(stream)
        warm += 1
    _synchronize()
    per_run = (perf_counter() - start) / warm
    n = _run_count(per_run, min_runs, min_time_s)

    times, spent = [], (0.0, 0.0, 0, 0)
    for index, block in enumerate(turn_blocks(n, min_time_s, turn)):
        if index:
            turn()
            if block and per_run < TURN_S:
                flush.zero_()
                fn()   # untimed: the other side has just run on this CPU (its caches are the other's)
        counters = _host_counters()
        # the turn ends with its work done: the other side's runs never overlap it
        times += timed_runs(fn, block, flush, stream)
        spent = tuple(s + b - a for s, a, b in zip(spent, counters, _host_counters(), strict=True))
    host = host_share((0.0, 0.0, 0, 0), spent)
    stats = summarize(times)

    if turn is not None:   # the wall-clock cross-check in a turn of its own
        turn()
    wall, after = [], []
    for _ in range(wall_run_count(n, per_run, wall_s)):
        flush.zero_()
        _synchronize()
        t0 = perf_counter()
        fn()
        returned = perf_counter()
        _synchronize()
        done = perf_counter()
        wall.append((done - t0) * 1e3)
        after.append((done - returned) * 1e3)
    wall_median = statistics.median(wall)
    # the GPU's work after the call returned, past the events' time: work they did not see
    gap = statistics.median(after) - stats["median_ms"]
    disagrees = gap > max(DISAGREE_MIN_MS, DISAGREE_FRACTION * wall_median)
    placement_stats = {} if placement is None else {"placed": pads is not None}
    return {**stats, "wall_median_ms": wall_median, "disagrees": disagrees, "host": host, **placement_stats}


def timed_runs(fn: Callable[[], object], runs: int, flush: torch.Tensor | None, stream=None) -> list[float]:
    """The GPU times (ms) of `runs` calls of `fn` queued back to back on `stream` (None: the current one),
    each after writing `flush` (an L2 flush; None: none) and between two CUDA events; returns once they are
    done. A call's host time shows only where the GPU waits for it. The judge's timed series, and
    optimize's (verify/measure.py), so that both time a call alike."""
    starts = [_Event(enable_timing=True) for _ in range(runs)]
    ends = [_Event(enable_timing=True) for _ in range(runs)]
    for begin, end in zip(starts, ends, strict=True):
        if flush is not None:
            flush.zero_()
        begin.record(stream)
        fn()
        end.record(stream)
    _synchronize()
    return [begin.elapsed_time(end) for begin, end in zip(starts, ends, strict=True)]


def _host_counters() -> tuple[float, float, int, int]:
    """(wall seconds, this thread's CPU seconds, its involuntary context switches, its minor page faults)
    so far; the last two are 0 without per-thread counters (not Linux)."""
    usage = resource.getrusage(resource.RUSAGE_THREAD) if hasattr(resource, "RUSAGE_THREAD") else None
    return perf_counter(), thread_time(), usage.ru_nivcsw if usage else 0, usage.ru_minflt if usage else 0


def host_share(before: tuple, after: tuple) -> dict:
    """What the host did to the timing thread during a series, from two `_host_counters`: cpu_share (its CPU
    time over the wall time: a launch-bound series issues the whole time, so less means it was off the
    CPU), preempted (involuntary context switches), faults (minor page faults), and the process's
    transparent huge pages (huge_pages_mib, None where unreadable; read at most every HUGE_PAGES_EVERY_S, so
    consecutive rounds may repeat one reading). A launch-bound A/A held an offset of up to 5% through 60
    rounds on one CPU per round (bench/results/2026-11-28-h200-aa-rounds): these tell apart a side the host
    interrupted from one that runs slower on its own."""
    wall, cpu, preempted, faults = (b - a for a, b in zip(before, after, strict=True))
    return {"cpu_share": round(cpu / wall, 3) if wall > 0 else None, "preempted": preempted,
            "faults": faults, "huge_pages_mib": _huge_pages_mib()}


_huge_pages_read = [-math.inf, None]   # when this process last read its huge pages, and what it read
HUGE_PAGES_EVERY_S = 30.0   # smaps_rollup walks the page tables: 35 ms for a process holding 1 GiB


def _huge_pages_mib() -> float | None:
    """This process's anonymous memory in transparent huge pages (Linux /proc/self/smaps_rollup), MiB; read
    at most every HUGE_PAGES_EVERY_S (it changes slowly, and a round's series may last milliseconds)."""
    now = perf_counter()
    if now - _huge_pages_read[0] >= HUGE_PAGES_EVERY_S:
        _huge_pages_read[:] = [now, _read_huge_pages_mib()]
    return _huge_pages_read[1]


def _read_huge_pages_mib() -> float | None:
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("AnonHugePages:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None
