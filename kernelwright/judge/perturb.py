"""The perturbed-parameters trial. Problems build their layers with default weights (LayerNorm weight = 1,
bias = 0, ...), so a ModelNew that ignores a parameter which happens to be constant at initialization passes
every seeded trial. For this trial the reference perturbs a copy of its state dict deterministically; the
candidate loads that same state dict (strictly: same names and shapes as Model, DESIGN.md §1) and both run
normal inputs. Derived caches in the candidate must notice the change (they track `param._version`)."""

from __future__ import annotations

import torch

MULTIPLY = 0.5  # each value times (1 + MULTIPLY * u), u ~ U[-1, 1): never a sign flip, never zero
ADD = 0.1       # parameters only: plus ADD * spread * n, n ~ N(0, 1)


def perturbed_state_dict(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor] | None:
    """`model`'s state dict on the CPU with every floating-point entry perturbed, or None when there is none.

    Parameters get a relative and an additive change (the additive one moves the all-zero biases too).
    Buffers only the relative one: running variances stay positive and zero entries (masks) stay zero."""
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    generator = torch.Generator().manual_seed(seed)
    state, changed = {}, False
    for name, value in model.state_dict().items():
        value = value.detach().cpu().clone()
        if value.is_floating_point() and value.numel() > 0:
            exact = value.double()
            u = torch.rand(value.shape, generator=generator, dtype=torch.float64) * 2 - 1
            exact = exact * (1 + MULTIPLY * u)
            if name in parameters:
                n = torch.randn(value.shape, generator=generator, dtype=torch.float64)
                exact = exact + ADD * _spread(value.double()) * n
            value, changed = exact.to(value.dtype), True
        state[name] = value
    return state if changed else None


def _spread(values: torch.Tensor) -> float:
    """A scale for the additive noise: the std, else the mean magnitude (constant weights), else 1 (zeros)."""
    std = float(values.std(correction=0)) if values.numel() > 1 else 0.0
    magnitude = float(values.abs().mean())
    return std if std > 0 else magnitude if magnitude > 0 else 1.0


def state_dict_mismatch(expected: dict[str, torch.Tensor], model: torch.nn.Module) -> str | None:
    """Why `model` cannot take `expected` with `load_state_dict(strict=True)`, in words; None when it can."""
    own = torch.nn.Module.state_dict(model)
    problems = []
    missing = [k for k in expected if k not in own]
    unexpected = [k for k in own if k not in expected]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected {', '.join(unexpected)}")
    shapes = [f"{k} {tuple(own[k].shape)} instead of {tuple(v.shape)}"
              for k, v in expected.items() if k in own and own[k].shape != v.shape]
    if shapes:
        problems.append(f"wrong shape {', '.join(shapes)}")
    if not problems:
        return None
    return ("ModelNew's parameters and buffers do not match Model's (names and shapes must be the same, "
            f"DESIGN.md §1): {'; '.join(problems)}")
