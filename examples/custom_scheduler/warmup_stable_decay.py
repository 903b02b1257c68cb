"""A custom closed-form scheduler, written the way the Cerebras docs describe.

"Write a Custom Learning Rate Scheduler": subclass ``LRScheduler``, call
``super().__init__(optimizer, total_iters=..., last_epoch=...)`` and define the whole
schedule in ``_get_closed_form()`` with torch ops only (``torch.where``, no Python ``if``
on the step). Once this module is imported, its class is known by name, so the YAML file
can say ``WarmupStableDecayLR: {...}`` like any built-in scheduler.
"""

from __future__ import annotations

import torch

from cs_lightning.errors import UsageError
from cs_lightning.schedulers import LRScheduler


class WarmupStableDecayLR(LRScheduler):
    r"""Warmup, a long plateau, then a linear cool-down ("WSD", trapezoidal schedule).

    .. math::

        \eta(k) = \begin{cases}
            \eta_{peak} \, k / W & k < W \\
            \eta_{peak} + (\eta_{end} - \eta_{peak}) \,
                \mathrm{clip}\big((k - (T - D)) / D, 0, 1\big) & k \ge W
        \end{cases}

    with :math:`W` = ``warmup_steps``, :math:`D` = ``decay_steps``, :math:`T` = ``total_iters``,
    :math:`\eta_{peak}` = ``peak_learning_rate``, :math:`\eta_{end}` = ``end_learning_rate``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        peak_learning_rate: float,
        warmup_steps: int,
        decay_steps: int,
        total_iters: int,
        end_learning_rate: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        # a UsageError (a ValueError) refuses the values: `cs-lightning fit` says it in one line at the block's
        # key; any other error raised here is taken for a bug in this class, and keeps its traceback
        if warmup_steps < 1 or decay_steps < 1 or warmup_steps + decay_steps > total_iters:
            raise UsageError(
                f"WarmupStableDecayLR: got warmup_steps={warmup_steps}, decay_steps={decay_steps}, "
                f"total_iters={total_iters}; need warmup_steps >= 1, decay_steps >= 1 and "
                "warmup_steps + decay_steps <= total_iters"
            )
        self.peak_learning_rate = peak_learning_rate
        self.end_learning_rate = end_learning_rate
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        super().__init__(optimizer, total_iters=total_iters, last_epoch=last_epoch)

    def _get_closed_form(self) -> torch.Tensor:
        step = self.last_epoch.to(torch.float32)
        warmup = self.peak_learning_rate * step / self.warmup_steps
        into_decay = (step - (self.total_iters - self.decay_steps)) / self.decay_steps
        cooldown = self.peak_learning_rate + (self.end_learning_rate - self.peak_learning_rate) * into_decay.clamp(0, 1)
        return torch.where(step < self.warmup_steps, warmup, cooldown)
