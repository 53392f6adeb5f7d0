"""The bench's summary of the lock log (bench/locks.py): held time as the union of holds, waits summed,
runs of a resumed bench counted apart, and the report's section."""

from __future__ import annotations

import json
from pathlib import Path

from kernelwright.bench.locks import LOCKS_FILE, lock_summary, main, read_holds, render_lines


def _hold(lock: str, asked: float, got: float, released: float, who: str = "worker reference") -> dict:
    return {"lock": lock, "file": "x.lock", "who": who, "pid": 1, "asked": asked, "got": got,
            "released": released}


def test_held_time_is_the_union_and_a_resumed_run_is_counted_apart(tmp_path: Path):
    holds = [
        _hold("machine_work", 0.0, 0.0, 4.0), _hold("machine_work", 1.0, 1.0, 3.0, who="cli optimize"),
        _hold("machine_timing", 2.0, 4.0, 6.0), _hold("gpu_exclusive", 4.0, 4.0, 6.0),
        # a resumed run, an hour later: the gap is not run time
        _hold("machine_timing", 3600.0, 3600.5, 3601.0),
    ]
    summary = lock_summary(holds)
    assert summary["runs"] == 2 and summary["span_s"] == 7.0
    work, timing = summary["locks"]["machine_work"], summary["locks"]["machine_timing"]
    assert work["held_s"] == 4.0 and work["holds"] == 2 and work["wait_s"] == 0.0
    assert timing["held_s"] == 2.5 and timing["wait_s"] == 2.5 and timing["median_wait_s"] == 1.25
    assert summary["unlocked_s"] == 0.5   # the resumed run's half second of waiting
    assert list(summary["by_who"]) == ["worker reference", "cli optimize"]   # most waiting first
    text = "\n".join(render_lines(summary))
    assert "| machine_timing | 2 | 36% | 2 |" in text
    assert lock_summary([]) == {} and render_lines({}) == []


def test_a_cut_line_is_skipped_and_the_command_prints_the_summary(tmp_path: Path, capsys):
    log = tmp_path / LOCKS_FILE
    bad = json.dumps(_hold("machine_work", "soon", 0.5, 1.0))   # not a number: skipped, never a crash
    log.write_text(json.dumps(_hold("machine_work", 0.0, 0.5, 1.0)) + "\n" + bad + '\n{"lock": "machine_wo')
    assert len(read_holds(log)) == 1
    assert main([str(tmp_path)]) == 0 and "machine_work" in capsys.readouterr().out
    assert main([str(tmp_path / "nowhere")]) == 2
