"""CSXModule: the Model Zoo Trainer's ``model`` / ``optimizer`` / ``schedulers`` callables as a LightningModule.

The model is built in ``configure_model`` (recorded, then materialized once under the csx
strategy), the optimizer and schedulers in ``configure_optimizers``, after the weights exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities.types import OptimizerLRScheduler
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from typing_extensions import override

from cs_lightning.errors import UsageTypeError

__all__ = ["CSXModule"]


class CSXModule(LightningModule):
    """Train a model given as the three callables of the Cerebras Model Zoo Trainer.

    Args:
        model: called with no arguments, returns the ``nn.Module``. Without ``loss`` its
            ``forward(batch)`` returns the loss; with ``loss``, batches are ``(inputs, targets)``
            and the loss is ``loss(model(inputs), targets)``.
        optimizer: called with the built model, returns its optimizer (an optimizer instance is
            accepted too when the model is an instance).
        schedulers: each called with the optimizer, returns a scheduler; all step every
            optimizer step, as in the Cerebras Trainer.
        loss: optional ``loss(outputs, targets) -> Tensor``.
    """

    def __init__(
        self,
        model: Callable[[], nn.Module] | nn.Module,
        optimizer: Callable[[nn.Module], Optimizer] | Optimizer,
        schedulers: Sequence[Callable[[Optimizer], LRScheduler]] = (),
        loss: Callable[[Any, Any], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("model", model), ("optimizer", optimizer), ("loss", loss)):
            if value is not None and not callable(value) and not isinstance(value, (nn.Module, Optimizer)):
                raise UsageTypeError(
                    f"CSXModule({name}={value!r}) must be callable; pass a function such as lambda: ..."
                )
        if callable(schedulers):
            raise UsageTypeError(
                f"CSXModule(schedulers={schedulers!r}) must be a list of callables taking the optimizer;"
                " put the one you have in a list: schedulers=[...]"
            )
        if (
            isinstance(schedulers, (str, bytes))
            or not isinstance(schedulers, Iterable)
            or not all(callable(s) for s in schedulers)
        ):
            raise UsageTypeError(
                f"CSXModule(schedulers={schedulers!r}) must be a list of callables taking the optimizer,"
                " e.g. [lambda optimizer: LinearLR(optimizer, ...)]"
            )
        if isinstance(optimizer, Optimizer) and not isinstance(model, nn.Module):
            raise UsageTypeError(
                "CSXModule(optimizer=<Optimizer instance>) needs the model's parameters, which do not exist"
                " before model() runs; pass optimizer=lambda model: ...(model.parameters(), ...)"
            )
        self.model: nn.Module | None = model if isinstance(model, nn.Module) else None
        self._model_fn: Callable[[], nn.Module] | None = None if isinstance(model, nn.Module) else model
        self._optimizer = optimizer
        self._schedulers = list(schedulers)
        self._loss = loss

    @override
    def configure_model(self) -> None:
        if self.model is None and self._model_fn is not None:
            self.model = _returned(self._model_fn(), nn.Module, "model", "model=lambda: MyNet(...)")

    @override
    def forward(self, batch: Any) -> torch.Tensor:
        """The loss of one batch."""
        model = self._built()
        if self._loss is None:
            return model(batch)
        inputs, targets = batch
        return self._loss(model(inputs), targets)

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self(batch)
        self.log("train_loss", loss)
        return loss

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self(batch)
        self.log("val_loss", loss)
        return loss

    @override
    def configure_optimizers(self) -> OptimizerLRScheduler:
        optimizer = self._optimizer
        if not isinstance(optimizer, Optimizer):
            example = "optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.1)"
            optimizer = _returned(optimizer(self._built()), Optimizer, "optimizer", example)
        schedulers = [{"scheduler": make(optimizer), "interval": "step"} for make in self._schedulers]
        # Lightning takes scheduler config dicts here; its type alias names only its dataclass
        return [optimizer], schedulers  # type: ignore[return-value]

    def _built(self) -> nn.Module:
        assert self.model is not None  # configure_model() built it: Lightning calls it before any step
        return self.model


def _returned(value: Any, kind: type, name: str, example: str) -> Any:
    """``value``, which the ``name`` callable returned, if it is a ``kind``; else the error that says so."""
    if not isinstance(value, kind):
        expected = {nn.Module: "torch.nn.Module", Optimizer: "torch.optim.Optimizer"}[kind]
        raise UsageTypeError(
            f"CSXModule({name}=...) returned {value!r:.80} ({type(value).__name__}) where a {expected} was"
            f" expected; the callable must return it, e.g. {example}"
        )
    return value
