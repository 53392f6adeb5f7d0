"""The trials of one judgement: random-input trials under different seeds, then extra input distributions
that catch kernels tuned to `torch.rand`'s [0, 1) (x1000 scale, all-negative, tiny values) or to contiguous
memory (non-contiguous views of the same values), and last a trial with perturbed parameters (normal
inputs; see perturb.py) that catches a ModelNew ignoring parameters that are constant at initialization.
Runs in the reference worker."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

EXTRA_DISTRIBUTIONS = ("scale1000", "all_negative", "tiny", "noncontiguous")
PERTURBED_PARAMS = "perturbed_params"


@dataclass(frozen=True)
class Trial:
    index: int
    distribution: str  # "normal", one of EXTRA_DISTRIBUTIONS or PERTURBED_PARAMS
    seed: int

    def to_json(self) -> dict:
        return asdict(self)


def plan_trials(base_inputs: list, trials: int, seed: int, extra: bool, perturb: bool = False) -> list[Trial]:
    """`trials` normal trials, then each extra distribution that applies to these inputs, then (`perturb`)
    the perturbed-parameters trial (skipped later if the model turns out to have no float parameters)."""
    plan = [Trial(i, "normal", seed + 1 + i) for i in range(trials)]
    if extra and any(_is_float_tensor(v) for v in base_inputs):
        for offset, name in enumerate(EXTRA_DISTRIBUTIONS):
            if name == "noncontiguous" and not any(_noncontiguous(v) is not None for v in base_inputs):
                continue
            plan.append(Trial(len(plan), name, seed + 1001 + offset))
    if perturb:
        plan.append(Trial(len(plan), PERTURBED_PARAMS, seed + 2001))
    return plan


def apply_distribution(inputs: list, distribution: str) -> list:
    """Transform the floating-point tensors of a `get_inputs()` draw; other values pass through."""
    if distribution in ("normal", PERTURBED_PARAMS):
        return inputs
    out = []
    for value in inputs:
        if not _is_float_tensor(value):
            out.append(value)
        elif distribution == "scale1000":
            out.append(value * 1000.0)
        elif distribution == "all_negative":
            # -|x| - 1e-3: strictly negative even where the draw was exactly 0.
            out.append(-(value.abs() + 1e-3))
        elif distribution == "tiny":
            out.append(value * 1e-6)
        elif distribution == "noncontiguous":
            view = _noncontiguous(value)
            out.append(value if view is None else view)
        else:
            raise ValueError(f"unknown input distribution {distribution!r}")
    return out


def _is_float_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _noncontiguous(value) -> torch.Tensor | None:
    """The same values in a non-contiguous layout, or None when the shape allows none. Rank >= 2: stored
    transposed in the last two dims (same memory); rank 1: every other element of a 2x buffer."""
    if not _is_float_tensor(value):
        return None
    if value.dim() >= 2 and value.shape[-1] > 1 and value.shape[-2] > 1:
        view = value.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif value.dim() == 1 and value.numel() > 1:
        buffer = torch.empty(value.numel() * 2, dtype=value.dtype, device=value.device)
        buffer[::2] = value
        view = buffer[::2]
    else:
        return None
    return view if not view.is_contiguous() else None
