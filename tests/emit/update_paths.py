"""Every way a user changes a model's parameters, as functions applied alike to Model and ModelNew: the
emitted file's derived weights (Python) and cached operand splits (C++) must follow each of them. Writes
through `param.data` leave `_version` and `data_ptr` unchanged, so only the values can tell.

Each update is deterministic in the parameters' current values and a seed: applied to two models with
equal parameters, it leaves them equal."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def value_like(t: torch.Tensor, seed: int) -> torch.Tensor:
    """New values for `t`: Gaussian noise at the magnitude of its current values."""
    generator = torch.Generator(device=t.device).manual_seed(seed)
    noise = torch.randn(t.shape, generator=generator, device=t.device, dtype=torch.float64)
    scale = t.detach().abs().double().mean().item() + 1e-3 if t.numel() else 1.0
    return (noise * scale).to(device=t.device, dtype=t.dtype)


def _params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return list(model.named_parameters())


def data_copy(model: nn.Module, seed: int) -> None:
    for i, (_, p) in enumerate(_params(model)):
        p.data.copy_(value_like(p, seed + i))


def data_assign(model: nn.Module, seed: int) -> None:
    for i, (_, p) in enumerate(_params(model)):
        p.data = value_like(p, seed + i)


def copy_under_no_grad(model: nn.Module, seed: int) -> None:
    with torch.no_grad():
        for i, (_, p) in enumerate(_params(model)):
            p.copy_(value_like(p, seed + i))


def load_state_dict(model: nn.Module, seed: int) -> None:
    state = model.state_dict()
    model.load_state_dict({name: value_like(t, seed + i) if t.is_floating_point() else t
                           for i, (name, t) in enumerate(state.items())})


def optimizer_step(model: nn.Module, seed: int) -> None:
    params = [p for _, p in _params(model)]
    for i, p in enumerate(params):
        p.grad = value_like(p, seed + i)
    torch.optim.SGD(params, lr=0.5).step()
    for p in params:
        p.grad = None


def moved_away_and_back(model: nn.Module, seed: int) -> None:
    """`.cpu()` then `.cuda()` on a GPU (`.double()` then `.float()` on the CPU), changed while away."""
    device = next(model.parameters()).device
    gpu = device.type == "cuda"
    if gpu:
        model.cpu()
    else:
        model.double()
    with torch.no_grad():
        for i, (_, p) in enumerate(_params(model)):
            p.add_(value_like(p, seed + i))
    if gpu:
        model.to(device)
    else:
        model.float()


def data_mul(model: nn.Module, seed: int) -> None:
    for i, (_, p) in enumerate(_params(model)):
        p.data.mul_(-1.0 - 0.25 * ((seed + i) % 3))


def data_slice_assign(model: nn.Module, seed: int) -> None:
    """A third of the leading rows (the first tiles of a weight only): a partial in-place change."""
    for i, (_, p) in enumerate(_params(model)):
        if p.dim() == 0:
            p.data.fill_(value_like(p, seed + i).item())
        else:
            rows = max(1, p.shape[0] // 3)
            p.data[:rows] = value_like(p[:rows], seed + i)


def new_parameter(model: nn.Module, seed: int) -> None:
    """`module.weight = nn.Parameter(...)`: another tensor object in the parameter's place."""
    for i, (name, p) in enumerate(_params(model)):
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, nn.Parameter(value_like(p, seed + i)))


UPDATES: dict[str, Callable[[nn.Module, int], None]] = {
    "param.data.copy_": data_copy,
    "param.data = t": data_assign,
    "copy_ under no_grad": copy_under_no_grad,
    "load_state_dict": load_state_dict,
    "optimizer step (SGD)": optimizer_step,
    "moved away and back": moved_away_and_back,
    "param.data.mul_": data_mul,
    "param.data[:rows] = t": data_slice_assign,
    "new nn.Parameter": new_parameter,
}
