"""Telling other processes' GPU memory from ours (kernelwright/gpumem.py), on the CPU: the judge's
workers are this process's children and never count as "other processes held GPU memory"."""

from __future__ import annotations

from kernelwright import gpumem

UUID = "5c7a43f0-1d2e-4b7a-9f3e-0123456789ab"


def test_parse_compute_apps_keeps_this_gpu():
    text = (f"GPU-{UUID}, 1014, 44605\n"
            f"GPU-{UUID}, 1041, 19057\n"
            "GPU-ffffffff-0000-0000-0000-000000000000, 7, 100\n"
            "garbage line\n")
    assert gpumem.parse_compute_apps(text, UUID) == {1014: 44605 * 2**20, 1041: 19057 * 2**20}


def test_others_leave_out_our_tree(tmp_path):
    # /proc/<pid>/stat: "pid (comm) state ppid ..."; 20 is ours, 21 its child (a judge worker), 22 a
    # grandchild, 30 a stranger
    for pid, ppid in ((20, 1), (21, 20), (22, 21), (30, 1)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py thon) S {ppid} 0 0 0\n")
    ours = gpumem.descendants(20, tmp_path)
    assert ours == {20, 21, 22}
    used = {20: 40 << 30, 21: 19 << 30, 22: 1 << 30, 30: 3 << 30}
    assert gpumem.others(used, ours) == 3 << 30


def test_release_is_safe_without_cuda():
    gpumem.release()
