"""Entry point of the judge's child processes: `python -m kernelwright.judge.worker ROLE REPLY_FD`.

ROLE is `reference` (loads the problem, makes inputs, computes and compares reference outputs, times eager
and torch.compile) or `candidate` (imports and builds the candidate, runs it under the defences, times it).
Commands arrive as JSON lines on stdin; each gets one JSON line on REPLY_FD (stdout and stderr are the
candidate's to print to: they go to a log file). A failure in a command becomes a reply, never a crash;
after a CUDA error the context is unusable, so the process exits right after replying. Every reply carries
`waited_s`: the seconds this process spent blocked on other processes' locks (kernelwright/gpulock.py)
since its previous reply (the first one's include the wait of its start). A `time` command with `lockstep`
is timed in turns (judge/timing.py): before each turn the process writes `{"turn": true}` and waits for the
judge's `{"op": "go"}`, so one command gets several lines before its reply.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from kernelwright.bytecode import use_bytecode_cache
from kernelwright.gpulock import cpu_work, gpu_work, keep_off_timing_cpus, waited_seconds
from kernelwright.judge.failures import classify_failure

# How each command is guarded (kernelwright/gpulock.py): `build` and `load` are heavy CPU work (imports, nvcc,
# making inputs), which no timing on this machine may overlap (gpulock.py: with reserved timing CPUs, no
# timing on its CPU, no quiet one); `time` takes the timing lock itself (or runs
# under the judge's), `time_rounds` takes it itself, `prepare_compile` compiles under the machine's CPU-work
# lock, `busy` (the GPU busy share, a timing of sorts) runs under the judge's; the rest hold the shared GPU
# lock, so that no other process's timing overlaps them.
CPU_OPS = frozenset({"build", "load"})
SELF_LOCKED_OPS = frozenset({"time", "time_rounds", "prepare_compile", "busy", "exit"})


def guard_for(op: str):
    if op in CPU_OPS:
        return cpu_work()
    return contextlib.nullcontext() if op in SELF_LOCKED_OPS else gpu_work()


def main(argv: list[str]) -> int:
    role, reply_fd = argv[1], int(argv[2])
    replies = os.fdopen(reply_fd, "w", buffering=1)
    use_bytecode_cache()  # before the handler imports torch (workers started outside the CLI too)
    keep_off_timing_cpus()   # its timings pin to a reserved CPU themselves (judge/timing.py)
    # Importing torch takes seconds of a core: CPU work, kept out of timings (gpulock.py `cpu_work`: a bench's
    # tasks start workers all the time, and a launch-bound model timed beside an import runs slower).
    with cpu_work():
        if role == "reference":
            from kernelwright.judge.reference_worker import ReferenceWorker as Handler
        else:
            from kernelwright.judge.candidate_worker import CandidateWorker as Handler
        handler = Handler()

    def take_turn() -> None:
        replies.write('{"turn": true}\n')
        line = sys.stdin.readline()
        if not line or json.loads(line).get("op") != "go":
            raise RuntimeError("the judge ended the timing between turns")

    handler.take_turn = take_turn
    reported = 0.0   # waited_seconds() as of the last reply
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        command = json.loads(line)
        if command["op"] == "exit":
            break
        try:
            with guard_for(command["op"]):
                reply = handler.handle(command)
        except BaseException as exc:  # anything the code under judgement raises becomes a reply
            reply = {"ok": False, **classify_failure(exc, getattr(handler, "source_file", None))}
        waited = waited_seconds()
        reply["waited_s"], reported = round(waited - reported, 3), waited
        replies.write(json.dumps(reply, default=str) + "\n")
        if reply.get("fatal"):
            replies.flush()
            os._exit(3)
    replies.flush()
    # Skip interpreter teardown: candidate atexit hooks and CUDA teardown have nothing left to say.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
