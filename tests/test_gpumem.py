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


def test_the_fallback_estimate_leaves_out_what_our_children_hold(monkeypatch):
    """Where nvidia-smi lists no pid of ours (host PIDs in a container): everything we have not reserved,
    less the judge's reference worker the caller accounts for; with per-process use, only strangers."""
    gib = 2**30
    monkeypatch.setattr(gpumem.torch.cuda, "mem_get_info", lambda: (40 * gib, 80 * gib))
    monkeypatch.setattr(gpumem.torch.cuda, "memory_reserved", lambda: 10 * gib)
    monkeypatch.setattr(gpumem, "_device_uuid", lambda: UUID)
    monkeypatch.setattr(gpumem, "_process_use", lambda uuid: {99999999: 30 * gib})
    assert gpumem.others_bytes() == 30 * gib
    assert gpumem.others_bytes(children_reserved=19 * gib) == 11 * gib
    monkeypatch.setattr(gpumem, "_process_use", lambda uuid: {gpumem.os.getpid(): 10 * gib, 7: 3 * gib})
    monkeypatch.setattr(gpumem, "descendants", lambda root: {root})
    assert gpumem.others_bytes(children_reserved=19 * gib) == 3 * gib
