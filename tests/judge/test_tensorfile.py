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
