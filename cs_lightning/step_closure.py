"""Step closures: host-side work on tensors, deferred to the end of the training step.

On a CS-X system the host does not see a tensor's value until the step has finished; reading
one mid-step stalls the device. :func:`step_closure` makes that explicit: a decorated function
called during a training step is queued with its arguments, and runs once the step is done
(after the optimizer step), with every tensor argument of every queued call copied to the host
in one batch. Outside a step (plain PyTorch, validation, other strategies) it runs at once.
The tensors are read when the step ends, not when the call is made: one changed in place after
the call (a parameter, by the optimizer step) shows its new value; pass ``x.detach().clone()``
for the value at the call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.types import STEP_OUTPUT
from torch.utils._pytree import tree_flatten, tree_unflatten
from typing_extensions import override

from cs_lightning.errors import UsageTypeError

__all__ = ["StepBoundary", "StepClosureCallback", "deferred_to_step_end", "run_at_once", "step_closure"]

_Fn = TypeVar("_Fn", bound=Callable[..., Any])
_Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]

# The calls queued in the step that is open now; None while no step is open.
_queue: list[_Call] | None = None


def step_closure(fn: _Fn) -> _Fn:
    """Run ``fn`` at the end of the current training step, with its tensors read to the host.

    Returns ``None`` when the call is queued; outside a step the call runs immediately and
    returns what ``fn`` returns.
    """
    if not callable(fn):
        raise UsageTypeError(f"step_closure decorates a function, got {fn!r}; use it as @step_closure above a def")

    @functools.wraps(fn)
    def deferred(*args: Any, **kwargs: Any) -> Any:
        if _queue is None:
            return _run([(fn, args, kwargs)])[0]
        _queue.append((fn, args, kwargs))
        return None

    return deferred  # type: ignore[return-value]


@contextmanager
def deferred_to_step_end() -> Iterator[None]:
    """Open a step: closures called inside are queued and run when the block ends normally.

    On an exception the queued calls are dropped (the step did not complete) and the
    previous state is restored, so a failed step never leaves closures behind.
    """
    global _queue
    outer, _queue = _queue, []
    try:
        yield
        calls = _queue
    finally:
        _queue = outer
    if calls:  # most steps queue none: no flattening per step
        _run(calls)


@contextmanager
def run_at_once() -> Iterator[None]:
    """Within the block closures run when called, even while a step is open: validation that Lightning
    runs between the accumulated batches of one optimizer step is outside that step."""
    global _queue
    outer, _queue = _queue, None
    try:
        yield
    finally:
        _queue = outer


def _run(calls: list[_Call]) -> list[Any]:
    """Copy every tensor argument of ``calls`` to the host in one batch, then run them in order."""
    flat, spec = tree_flatten([(args, kwargs) for _, args, kwargs in calls])
    on_device = [isinstance(x, torch.Tensor) and x.device.type != "cpu" for x in flat]
    host = [x.detach().to("cpu", non_blocking=True) if moved else x for x, moved in zip(flat, on_device)]
    if any(on_device) and torch.cuda.is_available():
        torch.cuda.synchronize()  # one wait for all the non-blocking copies above
    host = [x.detach() if isinstance(x, torch.Tensor) else x for x in host]
    arguments = tree_unflatten(host, spec)
    return [fn(*args, **kwargs) for (fn, _, _), (args, kwargs) in zip(calls, arguments)]


class StepBoundary:
    """An open step between :meth:`begin` and :meth:`end`: what a strategy or callback drives."""

    def __init__(self) -> None:
        self._open: AbstractContextManager[None] | None = None

    @property
    def is_open(self) -> bool:
        return self._open is not None

    def begin(self) -> None:
        """Start a step (ending one still open)."""
        self.end()
        step = deferred_to_step_end()
        step.__enter__()
        self._open = step

    def end(self) -> None:
        """End the open step, if any: its closures run now."""
        self._close(None)

    def abandon(self, exception: BaseException) -> None:
        """The step failed: drop its closures."""
        self._close(exception)

    def _close(self, exception: BaseException | None) -> None:
        # marked closed first: a closure that raises leaves no step open behind it
        if self._open is not None:
            step, self._open = self._open, None
            if exception is None:
                step.__exit__(None, None, None)
            else:
                step.__exit__(type(exception), exception, exception.__traceback__)


class StepClosureCallback(Callback):
    """Step closures for any strategy: a step opens at each training batch start and ends with the batch.

    The batch ends after Lightning's optimizer step, so closures see the finished step. The
    csx strategies do the same from their own hooks; add this callback to other Trainers.
    """

    def __init__(self) -> None:
        self._step = StepBoundary()

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._step.begin()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        self._step.end()

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._step.abandon(exception)

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._step.end()
