"""``compile=True``: the training step's forwards run captured by torch.compile, and the optimizer update compiled.

Only the training step runs compiled (the model called elsewhere, in a hook, stays eager); closed-form schedules
then write their values into in-place tensors, so a changing learning rate does not recompile.
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
from cs_lightning.schedulers.from_torch import closed_form_of

# Where an optimizer keeps its compiled update, between the steps of a fit.
_UPDATE = "_csx_compiled_update"


def compile_forwards(
    module: LightningModule,
    schedulers: Iterable[Any],
    backend: str | Callable[..., Any],
    fullgraph: bool,
    on_first_call: Callable[[float], None],
) -> trace.Capture:
    """The capture of ``module``'s forwards for the training steps of a fit (``fullgraph``: each one graph, which
    is then the trace check); the closed-form ones among ``schedulers`` write their values in place."""
    for scheduler in schedulers:
        closed = closed_form_of(scheduler)
        if closed is not None:
            closed.set_tensor_values(True)
    return trace.Capture(_trace_targets(module), backend=backend, fullgraph=fullgraph, on_first_call=on_first_call)


def forget_compiled_updates(optimizers: Iterable[Optimizer]) -> None:
    """Drop the compiled updates of ``optimizers``: the next fit compiles afresh."""
    for optimizer in optimizers:
        update = optimizer.__dict__.pop(_UPDATE, None)
        if update is not None:
            trace.forget(update._torchdynamo_orig_callable)


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
def compiled_update(optimizer: Optimizer, backend: str | Callable[..., Any]) -> Generator[None, None, None]:
    """Within the block ``optimizer.step(closure)`` runs the closure eagerly, then a compiled update."""
    update = optimizer.__dict__.get(_UPDATE)
    if update is None:
        update = optimizer.__dict__[_UPDATE] = torch.compile(optimizer.step, backend=backend)

    def step(closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        update(**kwargs)
        return loss

    with shadowed(optimizer, "step", step):
        yield


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
