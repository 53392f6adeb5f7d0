"""CUDA IPC between the judge's processes (judge/tensorfile.py), on the GPU: a second process reads shared
tensors of every layout (non-contiguous, offset views, strided rank 1, integer and bool dtypes, nested) with
the right values and writes its results into the sender's output buffers through the mapping (one through
the file); and the judge gives the same verdict through
IPC and through files on a gigabyte-sized problem, printing what each transport cost.

Run: python -m pytest -q -m gpu tests/judge/test_transport_gpu.py -s
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from kernelwright.judge import JudgeOptions, evaluate, tensorfile

pytestmark = pytest.mark.gpu

CHILD = textwrap.dedent("""
    import sys, torch
    from kernelwright.judge import tensorfile
    sent = tensorfile.load(sys.argv[1])
    doubled = {key: (value * 2 if value.is_floating_point() else value.clone())
               for key, value in sent["tensors"].items()}
    assert all(t.is_cuda for t in sent["tensors"].values()) and sent["number"] == 7
    assert torch.equal(sent["cpu"], torch.arange(3))
    strides = {key: list(value.stride()) for key, value in sent["tensors"].items()}
    # The outputs go into the sender's buffers (written through the mapping), the rest through the file.
    filled = tensorfile.fill_output_buffers(doubled, sent["buffers"])
    del sent
    tensorfile.save({"doubled": filled, "strides": strides}, sys.argv[2])
    print("ready", flush=True)
    input()
""")


def _layouts(device: str) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(0)
    base = torch.randn(37, 129, generator=g, device=device)
    strided = torch.randn(2 * 1001, generator=g, device=device)[::2]
    return {
        "contiguous": base,
        "transposed": base.t(),
        "offset_view": base[5:17, 3:100],
        "strided_rank1": strided,
        "int64": torch.arange(1000, device=device) * 3,
        "bool": base > 0,
        "half": base.half(),
    }


def test_shared_tensors_of_every_layout_reach_another_process(tmp_path):
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        tensors = _layouts("cuda")
        # Buffers for all but one output (that one comes back through the file).
        buffers = tensorfile.output_buffers({k: v for k, v in tensors.items() if k != "half"})
    sent_path, reply_path = tmp_path / "sent.pt", tmp_path / "reply.pt"
    tensorfile.save({"tensors": tensors, "number": 7, "cpu": torch.arange(3), "buffers": buffers}, sent_path,
                    share=True)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(sent_path), str(reply_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        reply = tensorfile.load(reply_path, accept_shared=False)
        doubled = tensorfile.restore_output_buffers(reply["doubled"], buffers)
        for key, value in tensors.items():
            got = doubled[key]
            assert (got is buffers.get(f"output[{key!r}]")) == (key != "half"), key
            # A tensor without a buffer comes back on the CPU (plain file): the reference never maps memory
            # the candidate shared.
            assert got.is_cuda == (key != "half") and got.shape == value.shape, key
            want = value * 2 if value.is_floating_point() else value
            assert torch.equal(got.to(want.device), want), key
            assert reply["strides"][key] == list(value.stride()), key
        del reply, got, doubled
    finally:
        child.communicate("done", timeout=30)
    assert child.returncode == 0, child.stderr


PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(channels))

    def forward(self, x):
        return torch.tanh(x * self.scale) + x

def get_inputs():
    return [torch.randn(64, 4096, 1024)]  # 1 GiB in, 1 GiB out

def get_init_inputs():
    return [1024]
'''

CANDIDATE = PROBLEM.replace("class Model(", "class ModelNew(")


def test_ipc_and_files_give_the_same_verdict_on_a_gigabyte_problem(tmp_path, monkeypatch):
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(PROBLEM)
    candidate.write_text(CANDIDATE)
    options = JudgeOptions(device="cuda", min_runs=10, min_time_s=0.05, compile_baseline=False,
                           busy_share=False)
    seconds = {}
    for transport in ("files", "ipc"):
        if transport == "files":
            monkeypatch.setenv(tensorfile.TRANSPORT_ENV, "files")
        else:
            monkeypatch.delenv(tensorfile.TRANSPORT_ENV)
        verdict = evaluate(problem, candidate, options)
        assert verdict["status"] == "correct", verdict["detail"]
        assert len(verdict["trials"]) == 10
        seconds[transport] = verdict["profile"]["trials_s"]
    print(f"\ntrials of a 1 GiB in / 1 GiB out problem: files {seconds['files']:.1f} s, "
          f"CUDA IPC {seconds['ipc']:.1f} s")
    assert seconds["ipc"] < seconds["files"]
