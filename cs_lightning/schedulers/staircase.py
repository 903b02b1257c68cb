"""Staircase schedules: StepLR, MultiStepLR, PiecewiseConstantLR and their WD twins.

As in ``decay``, a generic class holds the closed form with the weight-decay argument
names and the LR class renames them; :math:`k` is the step. A staircase has few distinct
values: ``evaluation.stairs`` and ``evaluation.per_period`` compute each once and repeat it
over its steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cs_lightning.errors import UsageError
from cs_lightning.schedulers import _checks, evaluation
from cs_lightning.schedulers.base import (
    MAX_BREAKPOINTS,
    LRScheduler,
    Scheduler,
    Tags,
    WeightDecayScheduler,
    _Alias,
    _PendingForm,
    every,
)
from cs_lightning.schedulers.evaluation import Value


class _Step(_PendingForm):
    r"""Closed form of StepLR / StepWD.

    .. math:: v_k = v_0 \, \gamma^{\lfloor k / S \rfloor}

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`S` = ``step_size``,
    :math:`\gamma` = ``gamma``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        step_size: int,
        gamma: float,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.step_size = self._arg(_checks.integer, "step_size", step_size, 1)
        self.gamma = self._arg(_checks.non_negative, "gamma", gamma)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _closed_form(self) -> Value:
        return evaluation.per_period(self._steps(), self.step_size, self._dtype, self._levels)

    def _breakpoints(self, stop: int) -> list[int]:
        return every(self.step_size, stop) if self.gamma != 1 else []

    def _levels(self, periods: Tensor) -> Tensor:
        r""":math:`v_0 \, \gamma^{p}` at the periods :math:`p = \lfloor k / S \rfloor` (a float tensor)."""
        return torch.pow(self._const(self.gamma), periods).mul_(self.initial_val)


class _MultiStep(Scheduler):
    r"""Closed form of MultiStepLR / MultiStepWD.

    .. math:: v_k = v_0 \, \gamma^{\#\{j : k \ge m_j\}}

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`\gamma` = ``gamma``,
    :math:`m_j` = ``milestones`` (strictly increasing steps).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        gamma: float,
        milestones: Sequence[int],
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.gamma = self._arg(_checks.non_negative, "gamma", gamma)
        self.milestones = self._arg(_checks.milestones, "milestones", milestones)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _breakpoints(self, stop: int) -> list[int]:
        return [m for m in self.milestones if m < stop][: MAX_BREAKPOINTS + 1]

    def _get_closed_form(self) -> Tensor:
        levels = [self._const(self.initial_val)]
        for _ in self.milestones:
            levels.append(levels[-1] * self.gamma)
        return evaluation.stairs(self._steps(), self.milestones, torch.stack(levels))


class _PiecewiseConstant(Scheduler):
    r"""Closed form of PiecewiseConstantLR / PiecewiseConstantWD.

    .. math:: v_k = v_j \quad \text{for } m_{j-1} \le k < m_j \quad (m_{-1} = 0, m_n = \infty)

    :math:`v_j` = ``learning_rates`` | ``vals`` (one more than the milestones),
    :math:`m_j` = ``milestones`` (strictly increasing steps).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        vals: Sequence[float],
        milestones: Sequence[int],
        param_group_tags: Tags = None,
    ) -> None:
        self.vals = self._arg(_checks.numbers, "vals", vals)
        self.milestones = self._arg(_checks.milestones, "milestones", milestones)
        if len(self.vals) != len(self.milestones) + 1:
            raise UsageError(
                f"{type(self).__name__}: got {len(self.vals)} values for {len(self.milestones)} milestones; "
                "fix: give one value more than milestones (the last holds from the last milestone on)"
            )
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _breakpoints(self, stop: int) -> list[int]:
        return [m for m in self.milestones if m < stop][: MAX_BREAKPOINTS + 1]

    def _get_closed_form(self) -> Tensor:
        return evaluation.stairs(self._steps(), self.milestones, torch.tensor(self.vals, dtype=self._dtype))


class StepLR(_Step, LRScheduler):
    """The learning rate times ``gamma`` every ``step_size`` steps."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        step_size: int,
        gamma: float,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, step_size, gamma, param_group_tags)


class MultiStepLR(_MultiStep, LRScheduler):
    """The learning rate times ``gamma`` at each milestone."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        gamma: float,
        milestones: Sequence[int],
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, gamma, milestones, param_group_tags)


class PiecewiseConstantLR(_PiecewiseConstant, LRScheduler):
    """A constant learning rate between milestones."""

    learning_rates = _Alias("vals")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        learning_rates: Sequence[float],
        milestones: Sequence[int],
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, learning_rates, milestones, param_group_tags)


class StepWD(_Step, WeightDecayScheduler):
    """The weight decay times ``gamma`` every ``step_size`` steps."""


class MultiStepWD(_MultiStep, WeightDecayScheduler):
    """The weight decay times ``gamma`` at each milestone."""


class PiecewiseConstantWD(_PiecewiseConstant, WeightDecayScheduler):
    """A constant weight decay between milestones."""
