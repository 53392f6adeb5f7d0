"""The judge's tensor transport (judge/tensorfile.py) on the CPU: plain and shared files read back the same
values, a shared file with no CUDA tensor is an ordinary file, and a shared file's handle fields are checked
before use (the reference reads files the candidate's process wrote). The CUDA IPC path itself:
tests/judge/test_transport_gpu.py."""

from __future__ import annotations

import pytest
import torch

from kernelwright.judge import tensorfile


def test_plain_and_shared_files_round_trip_without_cuda(tmp_path):
    value = {"outputs": (torch.arange(6.0).reshape(2, 3).t(), 3, [torch.ones(2, dtype=torch.int64), None]),
             "buffers": {"running_mean": torch.zeros(4)}}
    for share in (False, True):
        path = tmp_path / f"value_{share}.pt"
        tensorfile.save(value, path, share=share)
        back = tensorfile.load(path)
        outputs = back["outputs"]
        assert torch.equal(outputs[0], value["outputs"][0]) and outputs[0].stride() == (1, 3)
        assert outputs[1] == 3 and outputs[2][1] is None and torch.equal(outputs[2][0], torch.ones(2).long())
        assert torch.equal(back["buffers"]["running_mean"], torch.zeros(4))


def test_sharing_is_on_for_cuda_unless_turned_off(monkeypatch):
    monkeypatch.delenv(tensorfile.TRANSPORT_ENV, raising=False)
    assert tensorfile.sharing_enabled("cuda") and not tensorfile.sharing_enabled("cpu")
    monkeypatch.setenv(tensorfile.TRANSPORT_ENV, "files")
    assert not tensorfile.sharing_enabled("cuda")


GOOD = {"size": [2, 3], "stride": [3, 1], "offset": 0, "dtype": "float32", "device": 0, "handle": "00",
        "storage_bytes": 24, "storage_offset_bytes": 0, "counter_handle": "00", "counter_offset": 0,
        "event_handle": None, "event_sync": False}


@pytest.mark.parametrize("field,value", [
    ("dtype", "object"), ("dtype", None), ("offset", -1), ("device", "0"), ("size", [2, "3"]),
    ("stride", "3,1"), ("handle", 7), ("storage_bytes", 2.5),
])
def test_a_malformed_shared_tensor_is_refused_before_any_use(tmp_path, field, value):
    path = tmp_path / "outputs.pt"
    bad = {**GOOD, field: value}
    marker = {"__kernelwright_cuda_tensor__": 0}
    torch.save({"format": tensorfile.SHARED_FORMAT, "value": marker, "cuda": [bad]}, path)
    with pytest.raises(ValueError, match="shared tensor"):
        tensorfile.load(path)


def test_output_buffers_carry_what_fits_and_the_file_the_rest(tmp_path):
    from kernelwright.judge.outputs import flatten

    reference = (torch.zeros(3, 4), {"b": torch.zeros(2), "a": [torch.zeros(5, dtype=torch.int64), 2.5]})
    # The reference's buffers (on CUDA in the judge; CPU here, the same protocol), by output path.
    buffers = {path: torch.full(leaf.shape, -1, dtype=leaf.dtype)
               for path, leaf in flatten(reference) if isinstance(leaf, torch.Tensor)}
    candidate = (torch.arange(12.0).reshape(4, 3).t(),  # fits (a transposed view is copied by value)
                 {"b": torch.ones(3), "a": [torch.arange(5), 2.5]})  # "b": wrong shape -> the file
    moved = tensorfile.fill_output_buffers(candidate, buffers)
    path = tmp_path / "outputs.pt"
    tensorfile.save({"outputs": moved, "buffers": {}}, path)
    back = tensorfile.load(path, accept_shared=False)
    outputs = tensorfile.restore_output_buffers(back["outputs"], buffers)
    assert outputs[0] is buffers["output[0]"] and torch.equal(outputs[0], candidate[0])
    assert outputs[1]["a"][0] is buffers["output[1]['a'][0]"]
    assert torch.equal(outputs[1]["a"][0], torch.arange(5))
    assert torch.equal(outputs[1]["b"], torch.ones(3)) and outputs[1]["a"][1] == 2.5


def test_the_reference_refuses_shared_files_and_unknown_buffers(tmp_path):
    path = tmp_path / "outputs.pt"
    torch.save({"format": tensorfile.SHARED_FORMAT, "value": {}, "cuda": []}, path)
    with pytest.raises(ValueError, match="does not accept"):
        tensorfile.load(path, accept_shared=False)
    with pytest.raises(ValueError, match="not given"):
        tensorfile.restore_output_buffers([{tensorfile.BUFFER_MARKER: "output[9]"}], {})


def test_a_snapshot_lands_in_the_buffers_and_is_not_copied_twice(tmp_path):
    """The candidate's snapshot of forward's outputs goes straight into the reference's buffers where one
    fits (no second copy of a large output), the rest is cloned; filling the file then marks the buffers
    without copying them onto themselves."""
    from kernelwright.judge.outputs import flatten

    outputs = (torch.arange(6.0).reshape(2, 3), {"w": torch.ones(4)})
    buffers = {"output[0]": torch.zeros(2, 3)}
    snap = tensorfile.snapshot(outputs, buffers)
    assert snap[0] is buffers["output[0]"] and torch.equal(snap[0], outputs[0])
    assert snap[1]["w"] is not outputs[1]["w"] and torch.equal(snap[1]["w"], outputs[1]["w"])
    outputs[0].fill_(7.0)                    # later writes to forward's outputs do not reach the snapshot
    assert torch.equal(buffers["output[0]"], torch.arange(6.0).reshape(2, 3))
    moved = tensorfile.fill_output_buffers(snap, buffers)
    assert moved[0] == {tensorfile.BUFFER_MARKER: "output[0]"} and torch.equal(moved[1]["w"], torch.ones(4))
    assert [path for path, _ in flatten(snap)] == ["output[0]", "output[1]['w']"]


def test_the_reference_refills_the_same_shared_tensors_every_trial(monkeypatch):
    """ReferenceWorker.slot: one tensor per layout and use within a trial, the same ones the next trial
    (what is shared never grows with the trials); a new layout (the non-contiguous trial) adds its own."""
    import contextlib

    from kernelwright.judge.reference_worker import ReferenceWorker

    worker = ReferenceWorker()
    monkeypatch.setattr(worker, "shareable", contextlib.nullcontext)   # the CUDA pool, on the CPU here
    cpu = torch.device("cpu")

    def trial():
        worker.new_round()
        return [worker.slot((4, 3), (3, 1), torch.float32, cpu) for _ in range(2)]

    first, second = trial(), trial()
    assert first[0] is not first[1] and all(a is b for a, b in zip(first, second, strict=True))
    other = worker.slot((4, 3), (1, 4), torch.float32, cpu)
    assert other.stride() == (1, 4) and all(other is not t for t in first)
    assert sum(len(made) for made in worker.slots.values()) == 3
