"""Step closures: host-side work on tensors, deferred to the end of the training step.

On a CS-X system the host does not see a tensor's value until the step has finished; reading
one mid-step stalls the device. :func:`step_closure` makes that explicit: a decorated function
called during a training step is queued with its arguments, and runs once the step is done
(after the optimizer step), with every tensor argument of every queued call copied to the host
in one batch. Outside a step (plain PyTorch, validation, other strategies) it runs at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.types import STEP_OUTPUT
from torch.utils._pytree import tree_flatten, tree_unflatten
from typing_extensions import override

__all__ = ["StepClosureCallback", "deferred_to_step_end", "step_closure"]

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
        raise TypeError(f"step_closure decorates a function, got {fn!r}; use it as @step_closure above a def")

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
    _run(calls)


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


class StepClosureCallback(Callback):
    """Open a step at each training batch start; run its closures when the batch ends.

    The batch ends after Lightning's optimizer step, so closures see the finished step.
    The csx strategies add this callback themselves; add it to any other Trainer to get
    the same deferral there.
    """

    def __init__(self) -> None:
        self._open_step: ExitStack | None = None

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._end_step()
        self._open_step = ExitStack()
        self._open_step.enter_context(deferred_to_step_end())

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        self._end_step()

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._open_step is not None:  # the step failed: drop its closures
            self._open_step.__exit__(type(exception), exception, exception.__traceback__)
            self._open_step = None

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._end_step()

    def _end_step(self) -> None:
        if self._open_step is not None:
            open_step, self._open_step = self._open_step, None
            open_step.close()
