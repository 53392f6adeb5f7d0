"""The reference side of a judgement, in its own process: the problem's Model, the trial inputs, the
reference outputs (kept here, never written where the candidate could read them), the comparisons, and the
eager / torch.compile timings."""

from __future__ import annotations

import copy
import itertools
import time
import traceback
from pathlib import Path

import torch

from kernelwright import gpumem
from kernelwright.environment import collect_environment
from kernelwright.gpulock import cpu_work, gpu_timing
from kernelwright.judge import tensorfile
from kernelwright.judge.busy import model_busy_share
from kernelwright.judge.compare import (
    compare_buffers,
    compare_outputs,
    float_errors,
    oracle_errors,
    oracle_verdict,
    within_envelope_reach,
)
from kernelwright.judge.inputs import PERTURBED_PARAMS, Trial, apply_distribution, plan_trials
from kernelwright.judge.outputs import aliases, bitwise_equal, flatten, map_leaves
from kernelwright.judge.perturb import perturbed_state_dict
from kernelwright.judge.timing import NOISY_ROUNDS_S, alternating_rounds, measure, per_round, round_settings
from kernelwright.judge.tolerance import ENVELOPE_RUNS
from kernelwright.problem import load_problem


class ReferenceWorker:
    def __init__(self) -> None:
        self.problem = None
        self.model = None
        self.plan: list[Trial] = []
        self.pending: dict[int, tuple] = {}  # trial index -> (outputs, updated buffers, model that ran)
        self.timing_inputs: list | None = None
        self.compiled: dict[str, object] = {}  # torch.compile modes prepared for timing, by timing name
        self.share = False  # CUDA tensors go to the candidate as IPC handles (tensorfile.py)
        self.pool = None  # the private memory pool of everything shared
        # The shared tensors, by (shape, stride, dtype, device): made once, refilled trial after trial
        # (`slot`), so that what is shared never grows with the trials.
        self.slots: dict[tuple, list[torch.Tensor]] = {}
        self.slots_taken: dict[tuple, int] = {}
        self.take_turn = None  # lockstep timing's handover to the judge (set by worker.py)

    def handle(self, command: dict) -> dict:
        return getattr(self, f"op_{command['op']}")(command)

    def op_load(self, command: dict) -> dict:
        self.config = command
        self.device = command["device"]
        self.workdir = Path(command["workdir"])
        self.problem = load_problem(command["problem"], command.get("overrides") or None)
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda but CUDA is not available here (use --device cpu)")
        self.share = tensorfile.sharing_enabled(self.device) and hasattr(torch.cuda, "MemPool")
        base = self.problem.inputs(command["seed"] + 1, self.device)
        self.plan = plan_trials(base, command["trials"], command["seed"], command["extra_distributions"],
                                command.get("perturb_params", False))
        return {"ok": True, "trials": [t.to_json() for t in self.plan], "env": collect_environment()}

    def op_reset(self, command: dict) -> dict:
        """A fresh Model under the construction seed, for the next candidate."""
        self.model, self.timing_inputs = None, None
        self.pending.clear()
        self.model = self.problem.build_model(self.config["seed"], self.device)
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        return {"ok": True}

    def trial_inputs(self, trial: Trial) -> list:
        """The trial's inputs, drawn on the judged device (the candidate reads the same values from file)."""
        return apply_distribution(self.problem.inputs(trial.seed, self.device), trial.distribution)

    def shareable(self):
        """Allocations made inside go to a private pool, whose memory holds nothing but what is shared with
        the candidate (copies of inputs, empty output buffers): an IPC handle maps a whole segment, readable
        and writable (tensorfile.py); this process's own tensors must stay out of the candidate's reach."""
        if self.pool is None:
            self.pool = torch.cuda.MemPool()
        torch.cuda.ipc_collect()  # back to the pool: what the candidate has released since the last share
        return torch.cuda.use_mem_pool(self.pool)

    def slot(self, shape: torch.Size, stride: tuple[int, ...], dtype: torch.dtype,
             device: torch.device) -> torch.Tensor:
        """A shared tensor of this layout not yet taken in this round (`new_round`): the same memory as
        the previous round's, else a new one in the private pool. Each trial used to share new copies
        and output buffers; the candidate's IPC mappings kept the old ones from returning to the pool,
        and a 6 GiB softmax's reference grew 6 GiB a trial until it ran out of memory (H100, 2026-11-26)."""
        key = (tuple(shape), tuple(stride), dtype, torch.device(device))
        taken, made = self.slots_taken.get(key, 0), self.slots.setdefault(key, [])
        if taken == len(made):
            with self.shareable():
                made.append(torch.empty_strided(shape, stride, dtype=dtype, device=device))
        self.slots_taken[key] = taken + 1
        return made[taken]

    def new_round(self) -> None:
        """Every shared tensor free to be refilled: the candidate is done with the previous trial's."""
        self.slots_taken.clear()

    def send_inputs(self, inputs: list, path: Path) -> None:
        """The file of `inputs` for the candidate: shared copies (drawn once, copied into the pool before the
        Model runs, so the candidate gets them as drawn and the Model computes from memory it cannot reach),
        or a plain file."""
        if not self.share:
            tensorfile.save(inputs, path)
            return
        def copy(t: torch.Tensor) -> torch.Tensor:
            return self.slot(t.shape, t.stride(), t.dtype, t.device).copy_(t) if t.is_cuda else t

        copies = map_leaves(inputs, copy)
        tensorfile.save(copies, path, share=True)

    def op_trial(self, command: dict) -> dict:
        trial = self.plan[command["index"]]
        model, state_path = self.model, None
        if trial.distribution == PERTURBED_PARAMS:
            # A perturbed copy: the judged model (and so the timing) keeps the original parameters.
            state = perturbed_state_dict(self.model, trial.seed)
            if state is None:
                return {"ok": True, "skipped": "the model has no floating-point parameters or buffers"}
            model = copy.deepcopy(self.model)
            model.load_state_dict(state, strict=True)
            state_path = self.workdir / f"state_{trial.index}.pt"
            tensorfile.save(state, state_path)
        _release_cached(self.device)
        inputs = self.trial_inputs(trial)
        path = self.workdir / f"inputs_{trial.index}.pt"
        self.new_round()
        self.send_inputs(inputs, path)
        buffers = dict(model.named_buffers())
        versions = {name: b._version for name, b in buffers.items()}
        in_versions = [t._version if isinstance(t, torch.Tensor) else None for t in inputs]
        with torch.no_grad():
            outputs = model(*inputs)
        updated = {name: b.detach().clone() for name, b in buffers.items() if b._version != versions[name]}
        pairs = zip(inputs, in_versions, strict=True)
        mutates = any(isinstance(t, torch.Tensor) and t._version != v for t, v in pairs)
        output_buffers, buffers_path = {}, None
        if self.share:
            output_buffers = tensorfile.output_buffers(outputs, self.slot)
            if output_buffers:
                buffers_path = self.workdir / f"output_buffers_{trial.index}.pt"
                tensorfile.save(output_buffers, buffers_path, share=True)
        self.pending[trial.index] = (outputs, updated, model, output_buffers)
        return {
            "ok": True,
            "inputs": str(path),
            "output_buffers": str(buffers_path) if buffers_path else None,
            "state_dict": str(state_path) if state_path else None,
            "buffers": sorted(updated),
            "mutates_inputs": mutates,
            "aliases_inputs": aliases(outputs, inputs) is not None,
            "peak_memory_bytes": peak_memory(self.device),
        }

    def op_share_timing_inputs(self, command: dict) -> dict:
        """A file of the timing inputs (the first trial's) for the candidate's timing rounds: a fresh draw
        sent once (the candidate copies it), so that nothing the candidate does reaches eager's own."""
        path = self.workdir / "timing_inputs.pt"
        self.new_round()
        self.send_inputs(self.trial_inputs(self.plan[0]), path)
        return {"ok": True, "inputs": str(path)}

    def op_compare(self, command: dict) -> dict:
        trial = self.plan[command["index"]]
        outputs, updated, model, output_buffers = self.pending.pop(trial.index)
        try:
            result_file = tensorfile.load(command["outputs"], map_location=self.device, accept_shared=False)
            if not isinstance(result_file, dict) or not isinstance(result_file.get("buffers"), dict):
                raise ValueError("not an outputs file")
            result_file["outputs"] = tensorfile.restore_output_buffers(result_file.get("outputs"),
                                                                       output_buffers)
        except Exception as exc:  # the candidate's process wrote it: its failure, never the problem's
            return {"ok": True, "status": "runtime_error",
                    "detail": f"the candidate's outputs could not be read ({type(exc).__name__}: {exc})"}
        if trial.distribution != "normal" and not _all_finite(outputs):
            # e.g. log() of the all-negative inputs: this distribution says nothing about this problem.
            return {"ok": True, "status": "skipped", "detail": "the reference output is not finite here"}
        result = compare_outputs(
            outputs, result_file.get("outputs"), self.config["tolerance"], trial.distribution
        )
        if result["status"] == "mismatch":
            clock = time.monotonic()
            exact, why = self.float64_outputs(trial, model)
            result["float64_s"] = round(time.monotonic() - clock, 3)
            if exact is None:
                # Never the problem's fault: the stricter rule (the tolerance table against eager) stands.
                result["detail"] += f"; no float64 re-check: {why}"
            else:
                errors = oracle_errors(outputs, exact, result_file.get("outputs"))
                accepted, note = oracle_verdict(errors)
                if not accepted and within_envelope_reach(errors):
                    # ill-conditioned here? then FP32 rounding alone moves the output: measured by eager runs
                    # one ulp away, the candidate is held to that (judged as before where there is none)
                    envelope, why = self.fp32_envelope(trial, model, outputs, exact)
                    if envelope is not None:
                        accepted, note = oracle_verdict(errors, envelope)
                    else:
                        note += f" ({why})"
                if accepted:
                    result.update(status="correct", detail=f"accepted by the float64 oracle: {note}")
                else:
                    result["detail"] += f"; the float64 re-check: {note}"
            del exact
            _release_cached(self.device)   # the float64 copy's memory: twice the trial's, not kept
        if result["status"] == "correct" and updated:
            result.update(compare_buffers(updated, result_file["buffers"], self.config["tolerance"]))
        return {"ok": True, **result}

    def float64_outputs(self, trial: Trial, model: torch.nn.Module) -> tuple[object, str]:
        """(`model` in float64 on this trial's inputs, "") — a copy: the judged model keeps its state — or
        (None, why) where the model cannot run in float64 (e.g. its forward makes float32 tensors that meet
        the float64 ones). On the judged device; where it does not fit there (twice the trial's memory: a
        5 GiB-input loss needed 58 GiB), on the CPU. Out of memory everywhere is raised: the machine's
        state, never a verdict (before, the stricter rule then stood, and a correct candidate could be
        judged a mismatch for want of memory)."""
        try:
            return self._float64_run(trial, model, on_cpu=False), ""
        except torch.OutOfMemoryError as exc:
            on_gpu = _first_line(exc)
            # the failed attempt's float64 copies live in its frames: free them before trying again
            traceback.clear_frames(exc.__traceback__)
        except (RuntimeError, TypeError, ValueError) as exc:
            return None, f"the model does not run in float64 ({type(exc).__name__}: {_first_line(exc)})"
        gpumem.release()   # collected, then the allocator's cached blocks freed
        try:
            return self._float64_run(trial, model, on_cpu=True), ""
        except (RuntimeError, TypeError, ValueError, MemoryError) as exc:
            # e.g. a forward that makes CUDA tensors: whether it runs in float64 on the GPU is unknown
            raise torch.OutOfMemoryError(f"the float64 re-check fits neither the GPU ({on_gpu}) nor the "
                                         f"CPU ({type(exc).__name__}: {_first_line(exc)})") from None

    def fp32_envelope(self, trial: Trial, model: torch.nn.Module, outputs: object,
                      exact: object) -> tuple[list[float] | None, str]:
        """How far FP32 rounding alone moves this trial's outputs from float64: for each floating output,
        the largest error against `exact` of ENVELOPE_RUNS eager FP32 runs, each on a copy of `model` and
        the trial's inputs with every float32 input and parameter moved one ulp (`nudge_one_ulp_`, seeded
        by the trial). An FP32 kernel that sums in another order perturbs its results by about that much,
        so where the output amplifies such differences (a softmax of large logits), its error is judged
        against this envelope (capped: tolerance.py), not against eager's one draw: a GEMM with K in two
        halves, as exact as eager's, measured 2.9x eager's error on such an output and failed the oracle
        (tests/judge/test_oracle.py).
        (None, why) where eager FP32 does not repeat itself bit for bit on the same inputs (a forward with
        state of its own, a nondeterministic kernel: its spread is not rounding's; torch's generator is
        reseeded with the inputs, so dropout repeats), or where a run fails (a parameter that cannot be
        written in place, say). Out of memory is raised: the machine's state, never a verdict."""
        try:
            with torch.no_grad():
                again = copy.deepcopy(model)(*self.trial_inputs(trial))
                repeats = _identical(again, outputs)
                del again
                if not repeats:
                    return None, "no FP32 envelope: eager does not repeat itself on the same inputs"
                generator = torch.Generator(device=self.device).manual_seed(trial.seed)
                envelope: list[float] | None = None
                for _ in range(ENVELOPE_RUNS):
                    replica = copy.deepcopy(model)
                    inputs = self.trial_inputs(trial)   # drawn fresh: ours to move in place
                    for value in itertools.chain(replica.parameters(), inputs):
                        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
                            nudge_one_ulp_(value.data, generator)
                    errors = float_errors(replica(*inputs), exact)
                    del replica, inputs
                    envelope = errors if envelope is None else [max(a, b) for a, b in zip(envelope, errors,
                                                                                           strict=True)]
            return envelope, ""
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, TypeError, ValueError) as exc:
            return None, f"no FP32 envelope: {type(exc).__name__}: {_first_line(exc)}"

    def _float64_run(self, trial: Trial, model: torch.nn.Module, on_cpu: bool) -> object:
        """`model` in float64 on the trial's inputs (drawn where the trial drew them: the same values), on
        the judged device or on the CPU (the copy made there directly, the inputs moved one at a time)."""
        inputs = self.trial_inputs(trial)
        if on_cpu:
            exact = _copy_to(model, torch.device("cpu"))
            moved = []
            while inputs:
                t = inputs.pop(0)
                moved.append(t.to("cpu", torch.float64 if t.is_floating_point() else t.dtype)
                             if isinstance(t, torch.Tensor) else t)
                del t
            inputs = moved
        else:
            exact = copy.deepcopy(model).double()
            inputs = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                      for t in inputs]
        with torch.no_grad():
            return exact(*inputs)

    def op_time(self, command: dict) -> dict:
        """One round of eager Model on the first trial's inputs; the judge holds the timing lock around the
        rounds (candidate and eager; with `lockstep`, in turns within the round, judge/timing.py)."""
        inputs, model = self._timing_inputs(), self.model
        with torch.no_grad():
            stats = measure(lambda: model(*inputs), self.device, command["min_runs"], command["min_time_s"],
                            locked=command.get("locked", False), **round_settings(command),
                            take_turn=self.take_turn if command.get("lockstep") else None)
        return {"ok": True, "timing": stats, "peak_memory_bytes": peak_memory(self.device)}

    def op_prepare_compile(self, command: dict) -> dict:
        """torch.compile(Model) in mode `which` (COMPILE_MODES), compiled and warmed by a few calls on the
        timing inputs (reduce-overhead records its CUDA graph on a later call than the first) and kept for
        `time_rounds`."""
        inputs, which = self._timing_inputs(), command["which"]
        with torch.no_grad():
            model = torch.compile(self.model, mode=COMPILE_MODES[which])
            with cpu_work():  # compiling: beside no timing on its CPU (gpulock.py)
                for _ in range(3):
                    model(*inputs)
        self.compiled[which] = model
        return {"ok": True, "peak_memory_bytes": peak_memory(self.device)}

    def op_time_rounds(self, command: dict) -> dict:
        """Eager and the prepared torch.compile modes (`sides`, eager first) in alternating rounds under one
        hold of the timing lock (`quiet`: with no CPU work on the host; judge/timing.py, gpulock.py). A
        compile mode that fails while timed is dropped and the rounds start again without it (`errors`: its
        failure); the compiled models are let go after."""
        inputs, sides, errors = self._timing_inputs(), list(command["sides"]), {}
        models = {side: self.model if side == "eager" else self.compiled[side] for side in sides}
        settings = per_round(command["min_runs"], command["min_time_s"])

        def time_side(side: str, settings: dict) -> dict:
            model = models[side]
            try:
                return measure(lambda: model(*inputs), self.device, locked=True, **settings)
            except Exception as exc:
                if side == "eager":
                    raise
                raise _SideFailed(side, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}") from exc

        cuda = self.device == "cuda"   # rounds past MAX_ROUNDS on CUDA only
        try:
            with torch.no_grad(), gpu_timing(quiet=command.get("quiet", False)):
                while True:
                    try:
                        rounds = alternating_rounds(time_side, sides, settings, command.get("settle", True),
                                                    pin=cuda, noisy_s=NOISY_ROUNDS_S if cuda else 0.0)
                        break
                    except _SideFailed as failed:
                        errors[failed.side] = failed.detail
                        sides.remove(failed.side)
        finally:
            self.compiled.clear()
        return {"ok": True, "rounds": rounds, "errors": errors, "peak_memory_bytes": peak_memory(self.device)}

    def op_busy(self, command: dict) -> dict:
        """The GPU busy share of eager Model on the timing inputs (judge/busy.py), after its timing. The judge
        holds the timing lock around it."""
        return {"ok": True, "busy": model_busy_share(self.model, self._timing_inputs(), self.device)}

    def _timing_inputs(self) -> list:
        """The first trial's inputs, made once: every timing and the busy share run on them."""
        if self.timing_inputs is None:
            self.timing_inputs = self.trial_inputs(self.plan[0])
        return self.timing_inputs


class _SideFailed(Exception):
    """A torch.compile mode failed while timed (`time_rounds`)."""

    def __init__(self, side: str, detail: str) -> None:
        super().__init__(detail)
        self.side, self.detail = side, detail


# The torch.compile baselines a judge may time, by timing name.
COMPILE_MODES = {"compile": "default", "compile_reduce_overhead": "reduce-overhead"}
ULP_CHUNK = 1 << 24   # elements `nudge_one_ulp_` moves at once


def peak_memory(device: str) -> int | None:
    """Bytes of GPU memory this process has held at most since its model was built (None on the CPU)."""
    return torch.cuda.max_memory_allocated() if device == "cuda" else None


def _all_finite(outputs) -> bool:
    return all(
        bool(torch.isfinite(leaf).all())
        for _, leaf in flatten(outputs)
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex())
    )


def nudge_one_ulp_(t: torch.Tensor, generator: torch.Generator) -> None:
    """Move every finite element of `t`, in place, to its next float up or down at random (`generator`, on
    t's device): a perturbation the size of one rounding, in no preferred direction (a fixed one would
    shift every sum the same way). Infinities and NaNs stay (they have no neighbour that means the same).
    A chunk at a time where `t` is contiguous, so that its temporaries stay small beside a GiB input."""
    pieces = [t]
    if t.is_contiguous() and t.numel() > ULP_CHUNK:
        flat = t.view(-1)
        pieces = [flat[start:start + ULP_CHUNK] for start in range(0, flat.numel(), ULP_CHUNK)]
    for piece in pieces:
        toward = torch.full_like(piece, float("-inf"))
        toward.masked_fill_(torch.rand(piece.shape, generator=generator, device=piece.device) < 0.5,
                            float("inf"))
        moved = torch.nextafter(piece, toward)
        del toward
        piece.copy_(torch.where(torch.isfinite(piece), moved, piece))


def _identical(a: object, b: object) -> bool:
    """Whether two outputs are the same bit for bit, leaf by leaf (`bitwise_equal` for tensors)."""
    left, right = flatten(a), flatten(b)
    if len(left) != len(right):
        return False
    for (_, x), (_, y) in zip(left, right, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if not bitwise_equal(x, y):
                return False
        elif isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor) or x != y:
            return False
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def _copy_to(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A float64 copy of `model` on `device` (the CPU), its parameters and buffers copied there directly
    (no second copy on the GPU); everything else as `copy.deepcopy` copies it (non-persistent buffers,
    attributes, the training flag)."""
    memo: dict[int, object] = {}
    for t in itertools.chain(model.parameters(), model.buffers()):
        moved = t.detach().to(device, torch.float64 if t.is_floating_point() else t.dtype)
        memo[id(t)] = torch.nn.Parameter(moved, requires_grad=t.requires_grad) \
            if isinstance(t, torch.nn.Parameter) else moved
    return copy.deepcopy(model, memo).double()


def _release_cached(device: str) -> None:
    """Give the allocator's unused cached blocks back to the driver. The reference draws new inputs every
    trial and a float64 re-check makes twice-sized temporaries; kept cached, their segments fragment and
    hold memory a later allocation cannot use (level1/66, 2 x 2.5 GiB inputs: the reference held 60.6 GiB,
    47.5 of it cached but unallocated, and a 2.5 GiB allocation failed alone on an 80 GB H100)."""
    if str(device).startswith("cuda") and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
