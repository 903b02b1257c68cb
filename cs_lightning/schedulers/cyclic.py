"""Cyclic schedules: CyclicLR, OneCycleLR, their WD twins and their momentum twins.

As in ``decay``, a generic class holds the closed form with the weight-decay argument
names and the LR class renames them; :math:`k` is the step.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cs_lightning.errors import UsageError
from cs_lightning.schedulers import _checks
from cs_lightning.schedulers.base import (
    LRScheduler,
    MomentumScheduler,
    Scheduler,
    Tags,
    WeightDecayScheduler,
    _Alias,
)

# The scale mode each built-in cyclic mode implies (as in torch and cerebras.pytorch).
_SCALE_MODES = {"triangular": "cycle", "triangular2": "cycle", "exp_range": "iterations"}


class _Cyclic(Scheduler):
    r"""Closed form of CyclicLR / CyclicWD.

    .. math::
        c = \left\lfloor 1 + \frac{k}{U + D} \right\rfloor, \quad
        x = 1 + \frac{k}{U + D} - c, \quad
        s = \begin{cases} x / \rho & x \le \rho \\ (x - 1) / (\rho - 1) & x > \rho \end{cases},
        \quad \rho = \frac{U}{U + D}

    .. math:: v_k = b + (M - b)\, s \, \sigma, \quad
        \sigma = 1 \text{ (triangular)}, \; 2^{1 - c} \text{ (triangular2)}, \;
        \gamma^{k} \text{ (exp\_range)}

    :math:`b` = ``base_lr`` | ``base_val``, :math:`M` = ``max_lr`` | ``max_val``,
    :math:`U` = ``step_size_up``, :math:`D` = ``step_size_down`` (default :math:`U`),
    :math:`\gamma` = ``gamma``. The mode fixes the scale mode, as in cerebras.pytorch 2.10
    and torch: a given ``scale_mode`` (``"cycle"`` or ``"iterations"``) is replaced by the
    mode's.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        base_val: float,
        max_val: float,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_mode: str = "cycle",
        param_group_tags: Tags = None,
    ) -> None:
        self.base_val = self._arg(_checks.number, "base_val", base_val)
        self.max_val = self._arg(_checks.number, "max_val", max_val)
        self.step_size_up = self._arg(_checks.integer, "step_size_up", step_size_up, 1)
        if step_size_down is None:
            step_size_down = step_size_up
        # D = 0 is a sawtooth (x <= rho = 1 always), as in 2.10 and torch; U = 0 is 0 / 0 at each cycle's start
        self.step_size_down = self._arg(_checks.integer, "step_size_down", step_size_down, 0)
        self.mode = self._arg(_checks.choice, "mode", mode, tuple(_SCALE_MODES))
        self.gamma = self._arg(_checks.positive, "gamma", gamma)
        # Checked, then overwritten from mode, as 2.10 and torch (without scale_fn) do
        self._arg(_checks.choice, "scale_mode", scale_mode, ("cycle", "iterations"))
        self.scale_mode = _SCALE_MODES[mode]
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _scale(self, cycle: Tensor) -> Tensor | float:
        if self.mode == "triangular2":
            return torch.div(self._const(1.0), torch.pow(self._const(2.0), cycle.sub(1)))
        if self.mode == "exp_range":
            return torch.pow(self._const(self.gamma), self._float_steps())
        return 1.0

    def _get_closed_form(self) -> Tensor:
        k = self._float_steps()
        total = self.step_size_up + self.step_size_down
        ratio = self.step_size_up / total
        cycle = torch.div(k, total).add_(1).floor_()
        x = torch.div(k, total).sub_(cycle).add_(1)
        rise = torch.where(x <= ratio, torch.div(x, ratio), x.sub(1).div_(ratio - 1))
        height = rise.mul_(self.max_val - self.base_val)
        return torch.mul(height, self._scale(cycle)).add_(self.base_val)


class _OneCycle(Scheduler):
    r"""Closed form of OneCycleLR / OneCycleWD.

    Phases :math:`j` end at the (unrounded) steps :math:`e = [pN - 1,\ N - 1]`, or with
    ``three_phase`` :math:`[pN - 1,\ 2pN - 2,\ N - 1]`; phase :math:`j` anneals from
    :math:`a_j` to :math:`z_j`: :math:`v_0 \to M \to v_0 / F` (three-phase:
    :math:`v_0 \to M \to v_0 \to v_0 / F`). With :math:`t = (k - e_{j-1}) / (e_j -
    e_{j-1})` (:math:`e_{-1} = 0`) in the phase containing :math:`k`:

    .. math::
        v_k = z_j + \frac{a_j - z_j}{2} (1 + \cos \pi t) \ \text{(cos)}, \qquad
        v_k = a_j + t\,(z_j - a_j) \ \text{(linear)}

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`M` = ``max_lr`` |
    ``max_val``, :math:`N` = ``total_steps``, :math:`p` = ``pct_start``, :math:`F` =
    ``final_div_factor``. As in cerebras.pytorch 2.10, the last phase continues past
    :math:`N - 1` (cos oscillates, linear extrapolates).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        max_val: float,
        total_steps: int = 1000,
        pct_start: float = 0.3,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        anneal_strategy: str = "cos",
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.max_val = self._arg(_checks.number, "max_val", max_val)
        self.total_steps = self._arg(_checks.integer, "total_steps", total_steps, 2)
        self.pct_start = self._arg(_checks.positive, "pct_start", pct_start)
        self.final_div_factor = self._arg(_checks.positive, "final_div_factor", final_div_factor)
        self.three_phase = self._arg(_checks.flag, "three_phase", three_phase)
        self.anneal_strategy = self._arg(_checks.choice, "anneal_strategy", anneal_strategy, ("cos", "linear"))
        ends = self._phase_ends()
        if not all(b > a for a, b in zip([0.0, *ends], ends)):
            raise UsageError(
                f"{type(self).__name__}: got pct_start={pct_start!r} with "
                f"total_steps={total_steps!r}, so the phases end at steps {ends}; every phase "
                "needs a positive length (pct_start * total_steps > 1, and pct_start < 1, "
                "or < 0.5 with three_phase)"
            )
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _phase_ends(self) -> list[float]:
        n, p = self.total_steps, self.pct_start
        if self.three_phase:
            return [p * n - 1, 2 * p * n - 2, n - 1]
        return [p * n - 1, n - 1]

    def _phase_values(self) -> list[tuple[float, float]]:
        low = self.initial_val / self.final_div_factor
        if self.three_phase:
            return [
                (self.initial_val, self.max_val),
                (self.max_val, self.initial_val),
                (self.initial_val, low),
            ]
        return [(self.initial_val, self.max_val), (self.max_val, low)]

    def _anneal(self, start: float, end: float, t: Tensor) -> Tensor:
        """From ``start`` at ``t = 0`` to ``end`` at ``t = 1``, computed in place of ``t``."""
        if self.anneal_strategy == "cos":
            return t.mul_(math.pi).cos_().add_(1).mul_((start - end) / 2.0).add_(end)
        return t.mul_(end - start).add_(start)

    def _get_closed_form(self) -> Tensor:
        k = self._float_steps()
        ends = self._phase_ends()
        begin = 0.0
        value = self._const(0.0)
        for index, (end, (start_val, end_val)) in enumerate(zip(ends, self._phase_values())):
            t = torch.sub(k, begin).div_(end - begin)
            phase = self._anneal(start_val, end_val, t)
            value = phase if index == 0 else torch.where(k > begin, phase, value)
            begin = end
        return value


class CyclicLR(_Cyclic, LRScheduler):
    """A learning rate cycling between two bounds."""

    base_lr = _Alias("base_val")
    max_lr = _Alias("max_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        base_lr: float,
        max_lr: float,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_mode: str = "cycle",
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(
            optimizer,
            base_lr,
            max_lr,
            step_size_up,
            step_size_down,
            mode,
            gamma,
            scale_mode,
            param_group_tags,
        )


class OneCycleLR(_OneCycle, LRScheduler):
    """The 1cycle learning-rate policy."""

    initial_learning_rate = _Alias("initial_val")
    max_lr = _Alias("max_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        max_lr: float,
        total_steps: int = 1000,
        pct_start: float = 0.3,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        anneal_strategy: str = "cos",
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(
            optimizer,
            initial_learning_rate,
            max_lr,
            total_steps,
            pct_start,
            final_div_factor,
            three_phase,
            anneal_strategy,
            param_group_tags,
        )


class CyclicWD(_Cyclic, WeightDecayScheduler):
    """A weight decay cycling between two bounds."""


class OneCycleWD(_OneCycle, WeightDecayScheduler):
    """The 1cycle policy for the weight decay."""


class CyclicMomentum(_Cyclic, MomentumScheduler):
    """A momentum (or Adam's beta1) cycling between two bounds.

    torch's CyclicLR with ``cycle_momentum=True`` cycles the momentum against the learning
    rate: ``CyclicMomentum(optimizer, base_val=max_momentum, max_val=base_momentum, ...)``
    with the learning rate's cycle arguments.
    """


class OneCycleMomentum(_OneCycle, MomentumScheduler):
    """The 1cycle policy for the momentum (or Adam's beta1).

    torch's OneCycleLR with ``cycle_momentum=True`` anneals the momentum against the learning
    rate, from ``max_momentum`` down to ``base_momentum`` and back:
    ``OneCycleMomentum(optimizer, initial_val=max_momentum, max_val=base_momentum,
    final_div_factor=1.0, ...)`` with the learning rate's phase arguments.
    """
