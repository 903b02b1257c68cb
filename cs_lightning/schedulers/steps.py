"""Staircase schedules: StepLR, MultiStepLR, PiecewiseConstantLR and their WD twins.

As in ``decay``, a generic class holds the closed form with the weight-decay argument
names and the LR class renames them; :math:`k` is the step. A staircase has few distinct
values: over consecutive steps (stepping, ``values(range(n))``) each is computed once and
repeated, and any other steps look theirs up.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cs_lightning.schedulers import _checks
from cs_lightning.schedulers.base import (
    _EXACT,
    MAX_BREAKPOINTS,
    LRScheduler,
    Scheduler,
    Tags,
    WeightDecayScheduler,
    _Alias,
    bounds,
    every,
    padded,
)


def _stairs(scheduler: Scheduler, edges: Sequence[int], levels: Tensor) -> Tensor:
    r"""``levels[j]`` at the steps :math:`m_{j-1} \le k < m_j` (``edges`` = :math:`m`,
    increasing; one level more than edges), at the steps being evaluated."""
    steps = scheduler._ascending_steps()
    if steps is None:
        k = scheduler.last_epoch
        index = torch.searchsorted(torch.tensor(edges, dtype=k.dtype), k.reshape(-1), right=True)
        return levels.index_select(0, index).reshape(k.shape)
    ends = bounds(steps, edges)
    return torch.cat(
        [level.expand(end - begin) for level, begin, end in zip(levels, ends, ends[1:]) if end > begin],
        out=scheduler._claim_out(),
    )


class _Step(Scheduler):
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
        self.gamma = self._arg(_checks.positive, "gamma", gamma)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _get_closed_form(self) -> Tensor:
        steps = self._ascending_steps()
        if steps is not None and steps.step == 1 and steps.stop <= _EXACT[self._dtype]:
            return self._consecutive(steps)
        periods = torch.div(self._float_steps(), self.step_size, out=self._claim_out()).floor_()
        return self._levels(periods, out=periods)

    def _breakpoints(self, stop: int) -> list[int]:
        return every(self.step_size, stop) if self.gamma != 1 else []

    def _levels(self, periods: Tensor, out: Tensor | None = None) -> Tensor:
        return torch.pow(self._const(self.gamma), periods, out=out).mul_(self.initial_val)

    def _consecutive(self, steps: range) -> Tensor:
        """The closed form over consecutive steps, each period's value computed once. Below
        _EXACT the float floor(k / S) is the integer k // S, so the values are the same."""
        size = self.step_size
        first, last = steps.start // size, (steps.stop - 1) // size
        periods = padded(range(first, last + 1))  # whole vector lanes: see base._LANES
        levels = self._levels(torch.arange(periods.start, periods.stop, dtype=self._dtype))
        head = levels[0].expand(min(steps.stop, (first + 1) * size) - steps.start)
        if last == first:
            return head
        middle = levels[1 : last - first, None].expand(-1, size).reshape(-1)
        tail = levels[last - first].expand(steps.stop - last * size)
        return torch.cat([head, middle, tail], out=self._claim_out())


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
        self.gamma = self._arg(_checks.positive, "gamma", gamma)
        self.milestones = self._arg(_checks.milestones, "milestones", milestones)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _breakpoints(self, stop: int) -> list[int]:
        return [m for m in self.milestones if m < stop][: MAX_BREAKPOINTS + 1]

    def _get_closed_form(self) -> Tensor:
        levels = [self._const(self.initial_val)]
        for _ in self.milestones:
            levels.append(levels[-1] * self.gamma)
        return _stairs(self, self.milestones, torch.stack(levels))


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
            raise ValueError(
                f"{type(self).__name__}: got {len(self.vals)} values for "
                f"{len(self.milestones)} milestones; give one value more than milestones"
            )
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _breakpoints(self, stop: int) -> list[int]:
        return [m for m in self.milestones if m < stop][: MAX_BREAKPOINTS + 1]

    def _get_closed_form(self) -> Tensor:
        return _stairs(self, self.milestones, torch.tensor(self.vals, dtype=self._dtype))


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
