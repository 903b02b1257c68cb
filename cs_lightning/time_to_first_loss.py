"""Time to first loss: seconds from the start of ``fit()`` until the first loss is known.

It is the number deferred initialization exists to shorten. The callback works with any
strategy: it splits the time into *setup* (until the first training batch starts) and the
*first step* (that batch, through its optimizer step). A batch whose ``training_step`` returns
None is skipped, not a loss: the clock runs on to the first batch that returns one, and *first
step* spans the skipped batches too. The csx strategy starts the clock
earlier (when ``fit()`` hands it the model), adds its own phases (construct, materialize,
trace), and prints the line without being asked: it drives a clock of its own from its hooks
when the Trainer has no TimeToFirstLoss callback (so it costs no callback on every step).
The ``ttfl/*`` metrics reach the loggers only when asked for, by adding the callback: a run
under csx then logs exactly the metrics the same run logs under any other strategy. Under
other strategies the callback starts its clock at its ``setup`` hook, after Lightning launched
and joined the ranks (``ddp``): ``start()`` before ``fit()`` counts those too. The trial steps of Lightning's
tuners (``lr_find``, ``scale_batch_size``) are not the training's, and get no line: they run with the Trainer's
callbacks set aside, on a state restored afterwards; the first step of the training after them reports.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.types import STEP_OUTPUT
from tqdm import tqdm
from typing_extensions import override

from cs_lightning.errors import UsageError, UsageTypeError

__all__ = ["TimeToFirstLoss"]


class TimeToFirstLoss(Callback):
    """Report the time to first loss once: one log line, and ``ttfl/*`` metrics to the loggers.

    After the first step, :attr:`metrics` holds the seconds per phase (keys ``ttfl/total``,
    ``ttfl/setup``, ``ttfl/first_step`` and any phase a strategy added) and ``ttfl/loss``.

    Args:
        log_metrics: send :attr:`metrics` to the Trainer's loggers (the line is printed either way).
    """

    def __init__(self, log_metrics: bool = True) -> None:
        if not isinstance(log_metrics, bool):
            raise UsageTypeError(f"TimeToFirstLoss: got log_metrics={log_metrics!r}; pass True or False")
        self.log_metrics = log_metrics
        self.metrics: dict[str, float] = {}
        self._start: float | None = None
        self._first_step_start: float | None = None
        # the phases' seconds, by the part they fell in (a tuner's trial steps check the trace before the first step)
        self._in_setup: dict[str, float] = {}
        self._in_first_step: dict[str, float] = {}
        self._reported = False
        self._ended = False

    def start(self, at: float | None = None) -> None:
        """Start the clock (now, or at the ``time.perf_counter()`` value ``at``) unless it runs already.

        A clock runs until its fit ends, reported or not: each ``fit`` of a Trainer gets its own line.
        """
        if self._ended:
            self.metrics, self._first_step_start, self._start = {}, None, None
            self._in_setup, self._in_first_step = {}, {}
            self._reported = self._ended = False
        if self._start is None:
            self._start = time.perf_counter() if at is None else at

    def _end(self) -> None:
        """The fit ended, even before its first loss (it failed): the next one starts afresh."""
        self._ended = True

    def add_phase(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to a named part of the time to first loss (e.g. ``"materialize"``)."""
        if seconds < 0:
            raise UsageError(f"add_phase(seconds={seconds}) must be >= 0: phases are durations")
        part = self._in_setup if self._first_step_start is None else self._in_first_step
        part[name] = part.get(name, 0.0) + seconds

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self.start()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._end()

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._end()

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self.step_started()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        if self._reported or skipped(pl_module, outputs):  # a skipped batch: the first loss is still to come
            return
        loss = loss_of(outputs)
        if isinstance(loss, torch.Tensor) and pl_module.automatic_optimization:
            # Lightning hands callbacks the loss divided by accumulate_grad_batches: multiply back (in
            # float64, adding no rounding of its own; the division's, in the loss's dtype, stays: exact
            # for N a power of two). A csx strategy driving its own clock reports the returned loss as is.
            loss = loss.to(torch.float64) * trainer.accumulate_grad_batches
        self.step_ended(trainer, loss)

    def step_started(self) -> None:
        """A training step starts (the first one ends *setup*)."""
        if not self._reported and self._first_step_start is None:
            self._first_step_start = time.perf_counter()

    def step_ended(self, trainer: Trainer, loss: Any) -> None:
        """A training step ended with ``loss``: after the first one, report once. Callers leave out the
        steps that skipped their batch (:func:`skipped`): they have no loss yet."""
        if self._reported or self._start is None or self._first_step_start is None:
            return
        end = time.perf_counter()
        self._reported = True
        self.metrics = {
            "ttfl/total": end - self._start,
            "ttfl/setup": self._first_step_start - self._start,
            "ttfl/first_step": end - self._first_step_start,
            **{f"ttfl/{name}": seconds for name, seconds in self._phases().items()},
        }
        if loss is not None:
            self.metrics["ttfl/loss"] = float(loss)  # the one host read this callback makes
        # the progress bar is drawn on stdout, the line logged to stderr: on a terminal it would land
        # at the end of the bar's line. Clear the bar, write the line, draw the bar again below it.
        with tqdm.external_write_mode():
            rank_zero_info(self._line())
        if self.log_metrics:
            # the row of this batch, as `self.log` writes it: Lightning's logging step (a private attribute:
            # the step Lightning's own logger connector logs at, which no public one gives), and the epoch
            step = trainer.fit_loop.epoch_loop._batches_that_stepped
            for logger in trainer.loggers:
                logger.log_metrics({**self.metrics, "epoch": trainer.current_epoch}, step=step)

    def _phases(self) -> dict[str, float]:
        """Each phase's seconds, setup's and the first step's together."""
        phases = dict(self._in_setup)
        for name, seconds in self._in_first_step.items():
            phases[name] = phases.get(name, 0.0) + seconds
        return phases

    def _line(self) -> str:
        parts = {name.removeprefix("ttfl/"): value for name, value in self.metrics.items()}
        setup = _of_which(f"setup {parts['setup']:.2f} s", self._in_setup)
        first_step = _of_which(f"first step {parts['first_step']:.2f} s", self._in_first_step)
        loss = f"; first loss {parts['loss']:.6g}" if "loss" in parts else ""
        return f"Time to first loss: {parts['total']:.2f} s ({setup}; {first_step}){loss}"


def _of_which(part: str, phases: Mapping[str, float]) -> str:
    """``part`` and the phases within it (the rest of it is Lightning's and the user's own code)."""
    if not phases:
        return part
    named = [f"{name} {seconds:.2f} s" for name, seconds in phases.items()]
    return f"{part}, of which " + (named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}")


def loss_of(output: STEP_OUTPUT) -> Any:
    """The loss in a ``training_step``'s output: the output itself, or its ``"loss"`` entry."""
    return output.get("loss") if isinstance(output, Mapping) else output


def skipped(module: LightningModule, output: STEP_OUTPUT) -> bool:
    """Whether a ``training_step`` output skipped its batch: no loss under automatic optimization, where
    Lightning then runs no backward and the update has no gradients to apply. Under manual optimization
    the step made its own updates whatever it returns."""
    return module.automatic_optimization and loss_of(output) is None
