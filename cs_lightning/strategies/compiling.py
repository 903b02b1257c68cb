"""``compile=True``: the training step's forwards run captured by torch.compile, and the optimizer update compiled.

Only the training step runs compiled (the model called elsewhere, in a hook, stays eager); the compiled update
reads the settings schedules change from tensors filled in place, so a changing learning rate does not
recompile, while everything else (loggers, checkpoints, the user) reads the Python floats the schedules write.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import nn
from torch.optim import Optimizer

from cs_lightning import trace
from cs_lightning.schedulers.base import _group_device
from cs_lightning.schedulers.from_torch import closed_form_of

# Where an optimizer keeps its compiled update, between the steps of a fit.
_UPDATE = "_csx_compiled_update"


# Where an optimizer keeps the tensors its compiled update reads the scheduled settings from, by (group, key).
_HELD = "_csx_scheduled_tensors"


def compile_forwards(
    module: LightningModule,
    backend: str | Callable[..., Any],
    fullgraph: bool,
    on_first_call: Callable[[float], None],
) -> trace.Capture:
    """The capture of ``module``'s forwards for the training steps of a fit (``fullgraph``: each one graph, which
    is then the trace check)."""
    return trace.Capture(_trace_targets(module), backend=backend, fullgraph=fullgraph, on_first_call=on_first_call)


def forget_compiled_updates(optimizers: Iterable[Optimizer]) -> None:
    """Drop the compiled updates of ``optimizers``: the next fit compiles afresh."""
    for optimizer in optimizers:
        optimizer.__dict__.pop(_HELD, None)
        update = optimizer.__dict__.pop(_UPDATE, None)
        if update is not None:
            trace.forget(update._torchdynamo_orig_callable)


# The settings a schedule may change that the update reads as numbers (a momentum or betas is read otherwise).
_HELD_KEYS = ("lr", "weight_decay")


def scheduled_settings(optimizer: Optimizer, schedulers: Iterable[Any]) -> list[tuple[int, str]]:
    """The (param group index, key) pairs of ``optimizer`` that ``schedulers`` change: where a closed form writes,
    and every group's lr where a torch scheduler steps on the host (ReduceLROnPlateau, or one handed over to
    torch's own steps)."""
    settings: set[tuple[int, str]] = set()
    for scheduler in schedulers:
        closed = closed_form_of(scheduler)
        if closed is None and getattr(scheduler, "optimizer", None) is optimizer:
            settings |= {(index, "lr") for index in range(len(optimizer.param_groups))}
        elif closed is not None and closed.optimizer is optimizer and closed.param_group_key in _HELD_KEYS:
            settings |= {(index, closed.param_group_key) for index in closed._targets}
    return sorted(settings)


def _trace_targets(module: LightningModule) -> list[nn.Module]:
    """The forwards a step may call first: the LightningModule's own, and its children holding weights.

    Children without parameters (metrics, losses) are left out: they are host-side bookkeeping.
    """
    targets: list[nn.Module] = []
    if type(module).forward is not LightningModule.forward:
        targets.append(module)
    targets += [child for child in module.children() if next(child.parameters(), None) is not None]
    return targets


@contextmanager
def compiled_update(
    optimizer: Optimizer, backend: str | Callable[..., Any], scheduled: Iterable[tuple[int, str]]
) -> Generator[None, None, None]:
    """Within the block ``optimizer.step(closure)`` runs the closure eagerly, then a compiled update, which reads
    the ``scheduled`` settings (``scheduled_settings``) from tensors."""
    update = optimizer.__dict__.get(_UPDATE)
    if update is None:
        update = optimizer.__dict__[_UPDATE] = torch.compile(optimizer.step, backend=backend)

    def step(closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with _held_as_tensors(optimizer, scheduled):
            update(**kwargs)
        return loss

    with shadowed(optimizer, "step", step):
        yield


@contextmanager
def _held_as_tensors(optimizer: Optimizer, scheduled: Iterable[tuple[int, str]]) -> Generator[None, None, None]:
    """Within the block each scheduled setting holding a Python float holds a 0-d float32 tensor instead, the same
    one at every step, filled with the float: a float would be a constant of the compiled update, recompiled as the
    schedule changes it. Afterwards the groups hold the floats again: loggers (LearningRateMonitor), checkpoints
    and the user read the schedule's values, as under any other strategy, not their float32 roundings."""
    held: dict[tuple[int, str], torch.Tensor] = optimizer.__dict__.setdefault(_HELD, {})
    groups = optimizer.param_groups
    floats = {}
    for index, key in scheduled:
        value = groups[index].get(key)
        if isinstance(value, float):  # a tensor of the user's is read as it is
            tensor = held.get((index, key))
            if tensor is None:
                device = _group_device(groups[index])
                tensor = held[index, key] = torch.tensor(value, dtype=torch.float32, device=device)
            else:
                tensor.fill_(value)
            floats[index, key] = value
            groups[index][key] = tensor
    try:
        yield
    finally:
        for (index, key), value in floats.items():
            groups[index][key] = value


@contextmanager
def shadowed(owner: Any, name: str, value: Any) -> Generator[None, None, None]:
    """Within the block an instance attribute ``name`` of ``owner`` is ``value``, shadowing its method;
    afterwards it is as it was: an instance attribute there before (the wrapper a torch LRScheduler sets
    on ``optimizer.step``, which warns when it is gone) is put back."""
    before = owner.__dict__.get(name, _ABSENT)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if before is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


_ABSENT = object()
