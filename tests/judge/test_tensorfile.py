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
