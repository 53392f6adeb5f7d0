"""The candidate side of a judgement, in a fresh interpreter that never sees the problem module: it gets
the constructor arguments and each trial's inputs by file, builds ModelNew under the construction seed, and
runs it under the defences of `guard.py`. What it reports back is checked by the reference worker; what
breaks a rule is listed in `violations` (the verdict is then `rejected`)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import types
from pathlib import Path

import torch

from kernelwright.judge import tensorfile
from kernelwright.judge.build import exclusive_build_dir, install_compile_only_hooks
from kernelwright.judge.busy import model_busy_share
from kernelwright.judge.failures import classify_failure
from kernelwright.judge.guard import (
    ExtensionRecorder,
    FunctionSnapshot,
    SwallowedExceptions,
    live_threads,
    precision_changes,
    precision_state,
    protect_paths,
)
from kernelwright.judge.outputs import (
    aliases,
    bitwise_equal,
    map_leaves,
    not_plain,
    tensor_leaves,
    wrong_device,
)
from kernelwright.judge.perturb import state_dict_mismatch
from kernelwright.judge.timing import measure, round_settings

_perf_counter = time.perf_counter
_sleep = time.sleep
_synchronize = torch.cuda.synchronize


class CandidateWorker:
    def __init__(self) -> None:
        self.violations: list[str] = []
        self.recorder = ExtensionRecorder()
        self.source_file: str | None = None
        self.model: torch.nn.Module | None = None
        self.persistent: list = []
        self.last_output_sizes: list[int] = []
        self.timing_inputs: list | None = None
        self.fatal_exception: BaseException | None = None
        self.take_turn = None  # lockstep timing's handover to the judge (set by worker.py)

    def handle(self, command: dict) -> dict:
        try:
            return getattr(self, f"op_{command['op']}")(command)
        except BaseException as exc:
            # A failure may follow a broken rule (a refused file read raises): report both.
            state = self._state() if hasattr(self, "snapshot") else {"violations": list(self.violations)}
            failure = classify_failure(exc, self.source_file)
            if failure["fatal"]:
                # After a CUDA error, freeing a tensor opened from the reference's memory (still held by
                # the failed call's frames) aborts the process in torch's IPC deleter, before the reply
                # is written: keep the frames alive; the worker exits (os._exit) right after replying.
                self.fatal_exception = exc
            return {"ok": False, **failure, **state}

    # ------------------------------------------------------------------------------------------- build

    def op_build(self, command: dict) -> dict:
        self.device = command["device"]
        self.source_file = command["candidate"]
        init_inputs = tensorfile.load(command["init_inputs"])
        if self.device == "cuda" and not command["compile_only"]:
            torch.cuda.set_per_process_memory_fraction(command["memory_fraction"])
        protect_paths(command["protected"], self.violations)
        if command["compile_only"]:
            install_compile_only_hooks()
        self.recorder.install()
        self.snapshot = FunctionSnapshot()
        self.precision = precision_state()

        if command.get("build_dir"):  # torch's extension builds (load_inline) go to this candidate's folder
            os.environ["TORCH_EXTENSIONS_DIR"] = command["build_dir"]
        start = _perf_counter()
        try:
            with exclusive_build_dir(command.get("build_dir")):
                module = _import_candidate(self.source_file)
            model_class = getattr(module, "ModelNew", None)
            if not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
                return {
                    "ok": False,
                    "status": "rejected",
                    "detail": "the candidate defines no nn.Module ModelNew",
                }
            torch.manual_seed(command["seed"])
            model = model_class(*init_inputs)
            if not command["compile_only"]:
                model = model.to(self.device)
                if self.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
        except BaseException as exc:
            failure = self.recorder.build_failure
            if failure is not None or isinstance(exc, SyntaxError):
                return {
                    "ok": False,
                    "status": "build_error",
                    "log": str(failure or _describe_syntax(exc)),
                    "build_seconds": _perf_counter() - start,
                }
            if command["compile_only"] and self.recorder.modules:
                # The sources compiled; what failed afterwards needs a GPU or a linked extension.
                return self._built_reply(start, note=f"after building: {type(exc).__name__}: {exc}")
            raise
        self.model = model
        self.violations += _kernelwright_references(module)
        return self._built_reply(start)

    def _built_reply(self, start: float, note: str = "") -> dict:
        return {
            "ok": True,
            "build_seconds": _perf_counter() - start,
            "extensions": len(self.recorder.modules),
            "extension_build_seconds": self.recorder.build_seconds,
            "note": note,
            **self._state(),
        }

    def _state(self) -> dict:
        """Rules broken so far, patched functions and precision switches: checked after every step."""
        patched = self.snapshot.changes()
        return {
            "violations": list(self.violations) + [f"monkeypatched {name}" for name in patched],
            "precision_changes": precision_changes(self.precision, precision_state()),
        }

    # ------------------------------------------------------------------------------------------- trials

    def op_trial(self, command: dict) -> dict:
        if not command.get("state_dict"):
            return self._trial(command)
        # The perturbed-parameters trial: run with the reference's perturbed state dict, then put the original
        # back, so that the timing afterwards measures the model as constructed.
        state = tensorfile.load(command["state_dict"], map_location=self.device)
        mismatch = state_dict_mismatch(state, self.model)
        if mismatch:
            return {"ok": False, "status": "rejected", "detail": mismatch, **self._state()}
        # nn.Module's own methods: a ModelNew overriding load_state_dict could ignore the new values.
        own = torch.nn.Module.state_dict(self.model)
        original = {name: value.detach().clone() for name, value in own.items()}
        torch.nn.Module.load_state_dict(self.model, state, strict=True)
        reply = self._trial(command)
        torch.nn.Module.load_state_dict(self.model, original, strict=True)
        return reply

    def _trial(self, command: dict) -> dict:
        # The loaded inputs stay as they were drawn (forward gets copies): they are what an input is checked
        # against after forward, with no clone of our own (shared ones are the reference's memory).
        loaded = tensorfile.load(command["inputs"])
        inputs = self._reuse_storage(loaded)
        # On CUDA the reference gives buffers in its memory for the outputs (no trip through the host),
        # taken now so that they are released with this call whichever way it ends.
        given = tensorfile.load(command["output_buffers"]) if command.get("output_buffers") else {}
        originals = [t if isinstance(t, torch.Tensor) else None for t in loaded]
        threads = live_threads()
        calls_before, errors_before = self.recorder.calls, len(self.recorder.errors)
        tracer = SwallowedExceptions(self.source_file)
        self._poison_allocator(inputs)  # last, so that no allocation of ours takes a poisoned block
        with torch.no_grad(), tracer:
            outputs = self.model(*inputs)
        # Copy what forward returned *now*: anything still being written later is work hidden from timing.
        why = not_plain(outputs, self.device)
        if why:
            self.violations.append(f"forward returned {why}")
            return {"ok": True, **self._state()}
        returned = tensorfile.snapshot(outputs, given)
        for thread in live_threads() - threads:
            thread.join(timeout=1.0)
        self._settle()
        reply = {
            "ok": True,
            "custom_calls": self.recorder.calls - calls_before,
            "custom_errors": self.recorder.errors[errors_before:],
            "swallowed": tracer.seen,
            "new_threads": len(live_threads() - threads),
            "wrong_device": wrong_device(outputs, self.device),
        }
        pairs = zip(tensor_leaves(returned), tensor_leaves(outputs), strict=True)
        if any(not bitwise_equal(a, b) for a, b in pairs):
            self.violations.append(
                "an output changed after forward returned (work left running on a side "
                "stream or a background thread)"
            )
        if command["check_inputs"]:
            for i, (now, before) in enumerate(zip(inputs, originals, strict=True)):
                if before is not None and not bitwise_equal(now, before):
                    self.violations.append(f"forward modified input {i} in place")
                    break
        if command["check_aliasing"]:
            shared = aliases(outputs, inputs)
            if shared:
                self.violations.append(f"{shared} (outputs must not alias inputs)")
        buffers = dict(self.model.named_buffers())
        saved = {name: buffers[name].detach().cpu() for name in command["buffers"] if name in buffers}
        result = {"outputs": tensorfile.fill_output_buffers(returned, given), "buffers": saved}
        del given
        tensorfile.save(result, command["outputs"])
        self.last_output_sizes = [t.numel() * t.element_size() for t in tensor_leaves(returned)]
        del outputs, originals, loaded, result  # the rerun's outputs take their place
        if command["determinism"]:
            reply["nondeterministic"] = self._rerun_differs(inputs, returned)
        return {**reply, "peak_memory_bytes": self._peak_memory(), **self._state()}

    def _peak_memory(self) -> int | None:
        return torch.cuda.max_memory_allocated() if self.device == "cuda" else None

    def _reuse_storage(self, loaded: list) -> list:
        """Device copies of a trial's inputs (never the loaded tensors themselves: shared ones are the
        reference's memory), written into the *same* storage as the previous trial's whenever the layout
        matches: a result cached on an input's address is then stale, and caught."""
        inputs = []
        for i, value in enumerate(loaded):
            if not isinstance(value, torch.Tensor):
                inputs.append(value)
                continue
            old = self.persistent[i] if i < len(self.persistent) else None
            if isinstance(old, torch.Tensor) and _same_layout(old, value):
                old.copy_(value)
                inputs.append(old)
            else:
                inputs.append(tensorfile.copy_keep_layout(value, self.device))
        self.persistent = inputs
        return inputs

    def _poison_allocator(self, inputs: list) -> None:
        """Fill freed allocator blocks with NaN bits (0xFF): an output taken from `torch.empty` that was
        never written reads as NaN instead of whatever a previous computation left there."""
        sizes = [t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)]
        # Two blocks per size: the allocator may hand the first freed one to something else first.
        blocks = [torch.full((n,), 0xFF, dtype=torch.uint8, device=self.device)
                  for n in sizes + self.last_output_sizes if n for _ in range(2)]
        del blocks

    def _settle(self) -> None:
        if self.device == "cuda":
            _synchronize()
        _sleep(0.01)
        if self.device == "cuda":
            _synchronize()

    def _rerun_differs(self, inputs: list, first: object) -> bool:
        """Run the same inputs again, buffers restored afterwards, and compare bit for bit."""
        buffers = {name: b.detach().clone() for name, b in self.model.named_buffers()}
        with torch.no_grad():
            again = self.model(*inputs)
        self._settle()
        with torch.no_grad():
            for name, b in self.model.named_buffers():
                b.copy_(buffers[name])
        if not_plain(again, self.device):
            return True
        first_leaves, again_leaves = tensor_leaves(first), tensor_leaves(again)
        if len(first_leaves) != len(again_leaves):
            return True
        return any(not bitwise_equal(a, b) for a, b in zip(first_leaves, again_leaves, strict=True))

    # ------------------------------------------------------------------------------------------- timing

    def op_time(self, command: dict) -> dict:
        """One round of timing: the judge times ours and eager's rounds under one lock, each round in
        lockstep (`lockstep`: in turns with eager's, judge/timing.py)."""
        if self.timing_inputs is None:
            loaded = tensorfile.load(command["inputs"])
            self.timing_inputs = map_leaves(loaded, lambda v: tensorfile.copy_keep_layout(v, self.device))
            self.recorder.uninstrument()
        inputs = self.timing_inputs
        with torch.no_grad():
            stats = measure(lambda: self.model(*inputs), self.device, command["min_runs"],
                            command["min_time_s"], locked=command.get("locked", False),
                            **round_settings(command),
                            take_turn=self.take_turn if command.get("lockstep") else None)
        return {"ok": True, "timing": stats, "peak_memory_bytes": self._peak_memory(), **self._state()}

    def op_busy(self, command: dict) -> dict:
        """The GPU busy share of ModelNew on the timing inputs (judge/busy.py), after its last timing round:
        the profiler never runs before a timed series of this process. Under the judge's timing lock."""
        if self.timing_inputs is None:
            return {"ok": True, "busy": {"error": "the candidate was not timed"}}
        return {"ok": True, "busy": model_busy_share(self.model, self.timing_inputs, self.device)}


def _import_candidate(path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("kernelwright_candidate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _describe_syntax(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f"{Path(exc.filename or 'candidate').name}:{exc.lineno}"
        return f"{where}: error: {exc.msg}\n    {(exc.text or '').strip()}"
    return str(exc)


def _kernelwright_references(module: types.ModuleType) -> list[str]:
    """A candidate may not use kernelwright (its problem loader could reach the reference)."""
    for name, value in vars(module).items():
        owner = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(owner, str) and owner.split(".")[0] == "kernelwright" and name != "__builtins__":
            return [f"the candidate uses kernelwright ({name} from {owner})"]
    return []


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype

