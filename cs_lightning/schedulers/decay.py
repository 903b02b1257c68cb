"""Decay curves: constant, polynomial, exponential, inverse-time, cosine, lambda.

Each curve is one closed form in a generic class (``_Polynomial``, ...) written with the
weight-decay argument names (``initial_val``, ``end_val``); the ``*WD`` class is that class
with its key, the ``*LR`` class renames the arguments (``initial_learning_rate``, ...).
In the formulas, :math:`k` is the step. The operations run in float32 in the same order as
cerebras.pytorch 2.10, so the values agree with it to float32 rounding. The step is
converted to float once (``_float_steps``: the rounding torch applies inside each mixed
int/float op, but much faster on long step tensors); after one out-of-place operation on
it, the rest run in place, so evaluating a million steps makes one tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from cs_lightning.schedulers import _checks
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
from cs_lightning.schedulers.evaluation import Affine


def _half(scale: float) -> float:
    """``scale / 2``, for ``(1 + cos x) / 2 * scale`` as ``(1 + cos x) * (scale / 2)``: one pass
    fewer, and the same float32 result, as halving is exact both ways (the tensor's
    ``x / 2``, the scalar's rounding to float32)."""
    return scale / 2


class _Constant(Scheduler):
    r"""Closed form of ConstantLR / ConstantWD.

    .. math:: v_k = v

    :math:`v` = ``learning_rate`` | ``val``. ``total_iters`` only gives the stage length
    to a ``SequentialLR`` that infers its milestones.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        val: float,
        total_iters: int | None = None,
        param_group_tags: Tags = None,
    ) -> None:
        self.val = self._arg(_checks.number, "val", val)
        super().__init__(optimizer, total_iters=total_iters, param_group_tags=param_group_tags)

    def _get_closed_form(self) -> Tensor:
        return self._const(self.val)


class _Polynomial(_PendingForm):
    r"""Closed form of PolynomialLR / PolynomialWD (LinearLR / LinearWD: power 1).

    .. math::
        v_k = \begin{cases}
            (v_0 - v_T)\,(1 - k / T)^{p} + v_T & k < T \\
            v_T & k \ge T
        \end{cases}

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`v_T` =
    ``end_learning_rate`` | ``end_val``, :math:`T` = ``total_iters``, :math:`p` = ``power``.
    ``cycle`` is accepted as in cerebras.pytorch 2.10, where it changes nothing: before
    :math:`T` its cycle count is 1 and from :math:`T` on the end value holds.
    """

    total_iters: int  # required here: the base class allows None

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        end_val: float,
        total_iters: int,
        power: float = 1.0,
        cycle: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.end_val = self._arg(_checks.number, "end_val", end_val)
        self.power = self._arg(_checks.positive, "power", power)
        self.cycle = self._arg(_checks.flag, "cycle", cycle)
        self._arg(_checks.integer, "total_iters", total_iters, 0)
        super().__init__(optimizer, total_iters=total_iters, param_group_tags=param_group_tags)

    def _closed_form(self) -> Affine:
        if self.total_iters == 0:  # every step is >= T: the end value throughout, as in 2.10
            return Affine(torch.zeros_like(self._float_steps()), 0.0, self.end_val)
        # From T on, k = T gives (1 - 1)^p = 0 and the end value, with no select.
        remaining = self._held(self.total_iters).div_(self.total_iters)
        remaining.neg_().add_(1)  # -x + 1 rounds as 1 - x
        if self.power != 1.0:  # x ** 1.0 is x: skip a pass over long step tensors
            remaining.pow_(self.power)
        return Affine(remaining, self.initial_val - self.end_val, self.end_val)


class _Linear(_Polynomial):
    """PolynomialLR / PolynomialWD with power 1."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        end_val: float,
        total_iters: int,
        cycle: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_val, end_val, total_iters, 1.0, cycle, param_group_tags)


class _Exponential(_PendingForm):
    r"""Closed form of ExponentialLR / ExponentialWD.

    .. math:: v_k = v_0 \, r^{k / T} \quad (\text{staircase: } r^{\lfloor k / T \rfloor})

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`r` = ``decay_rate``,
    :math:`T` = ``total_iters`` (the decay period; the decay goes on past it).
    """

    total_iters: int  # required here: the base class allows None

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        total_iters: int,
        decay_rate: float,
        staircase: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.decay_rate = self._arg(_checks.non_negative, "decay_rate", decay_rate)
        self.staircase = self._arg(_checks.flag, "staircase", staircase)
        self._arg(_checks.integer, "total_iters", total_iters, 1)
        super().__init__(optimizer, total_iters=total_iters, param_group_tags=param_group_tags)

    def _breakpoints(self, stop: int) -> list[int]:
        return every(self.total_iters, stop) if self.staircase else []

    def _closed_form(self) -> Affine:
        power = torch.div(self._float_steps(), self.total_iters)
        if self.staircase:
            power.floor_()
        return Affine(torch.pow(self.decay_rate, power, out=power), self.initial_val)


class _InverseExponentialTimeDecay(Scheduler):
    r"""Closed form of InverseExponentialTimeDecayLR / InverseExponentialTimeDecayWD.

    .. math:: v_k = \frac{v_0}{1 + r \, k^{e} / T}
        \quad (\text{staircase: } \lfloor k^{e} / T \rfloor)

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`e` =
    ``step_exponent``, :math:`T` = ``total_iters``, :math:`r` = ``decay_rate``.
    """

    total_iters: int  # required here: the base class allows None

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        step_exponent: int,
        total_iters: int,
        decay_rate: float,
        staircase: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.step_exponent = self._arg(_checks.positive, "step_exponent", step_exponent)
        self.decay_rate = self._arg(_checks.non_negative, "decay_rate", decay_rate)
        self.staircase = self._arg(_checks.flag, "staircase", staircase)
        self._arg(_checks.integer, "total_iters", total_iters, 1)
        super().__init__(optimizer, total_iters=total_iters, param_group_tags=param_group_tags)

    def _get_closed_form(self) -> Tensor:
        alpha = self._alpha(self._float_steps())
        denominator = alpha.mul_(self.decay_rate).add_(1.0)
        return torch.div(self._const(self.initial_val), denominator, out=denominator)

    def _alpha(self, steps: Tensor) -> Tensor:
        """:math:`k^e / T` at float ``steps``, floored for a staircase."""
        alpha = torch.pow(steps, self.step_exponent).div_(self.total_iters)
        return alpha.floor_() if self.staircase else alpha

    def _breakpoints(self, stop: int) -> list[int]:
        r"""The steps below ``stop`` where a staircase's level :math:`\lfloor k^e / T \rfloor` grows, as the
        closed form computes it: the first step of each of its first levels, found by bisection, then, where
        levels came faster than one a step (several in one), each next step where the level grows."""
        if not self.staircase:
            return []
        levels = torch.arange(1, MAX_BREAKPOINTS + 2, dtype=self._dtype)
        low, high = torch.zeros_like(levels, dtype=torch.int64), torch.full_like(levels, stop, dtype=torch.int64)
        while bool((low < high).any()):  # the first step whose level is each one (stop: none below it)
            middle = low + (high - low) // 2
            reached = self._alpha(middle.to(self._dtype)) >= levels
            high, low = torch.where(reached, middle, high), torch.where(reached, low, middle + 1)
        steps = [step for step in high.unique().tolist() if 0 < step < stop]
        wanted = MAX_BREAKPOINTS + 1 - len(steps)
        if steps and wanted > 0 and steps[-1] + 1 < stop:  # levels skipped: the rest are steps, not levels
            after = torch.arange(steps[-1], min(stop, steps[-1] + 1 + wanted))
            alpha = self._alpha(after.to(self._dtype))
            steps += after[1:][alpha[1:] > alpha[:-1]].tolist()
        return steps[: MAX_BREAKPOINTS + 1]


class _InverseSquareRootDecay(_PendingForm):
    r"""Closed form of InverseSquareRootDecayLR / InverseSquareRootDecayWD.

    .. math:: v_k = \frac{v_0 \, s}{\sqrt{\max(k, W)}}

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`s` = ``scale``,
    :math:`W` = ``warmup_steps`` (the value holds at :math:`v_0 s / \sqrt{W}` until then).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float = 1.0,
        scale: float = 1.0,
        warmup_steps: float = 1.0,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.scale = self._arg(_checks.number, "scale", scale)
        self.warmup_steps = self._arg(_checks.positive, "warmup_steps", warmup_steps)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _closed_form(self) -> Affine:
        warmup = self._const(self.warmup_steps)
        held = torch.clamp(self._float_steps(), min=warmup)
        return Affine(torch.div(self._const(self.scale), held.sqrt_(), out=held), self.initial_val)


class _CosineDecay(_PendingForm):
    r"""Closed form of CosineDecayLR / CosineDecayWD.

    .. math:: v_k = v_T + (v_0 - v_T) \, \tfrac12 \left(1 + \cos\frac{\pi \min(k, T)}{T}\right)

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`v_T` =
    ``end_learning_rate`` | ``end_val``, :math:`T` = ``total_iters``.
    """

    total_iters: int  # required here: the base class allows None

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        end_val: float,
        total_iters: int,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.end_val = self._arg(_checks.number, "end_val", end_val)
        self._arg(_checks.integer, "total_iters", total_iters, 1)
        super().__init__(optimizer, total_iters=total_iters, param_group_tags=param_group_tags)

    def _closed_form(self) -> Affine:
        # pi / T rounded as cerebras.pytorch rounds it: pi to float32 first, then divided
        angle = torch.div(self._const(math.pi), self.total_iters)
        wave = self._held(self.total_iters).mul_(angle).cos_().add_(1)
        return Affine(wave, _half(self.initial_val - self.end_val), self.end_val)


class _CosineAnnealing(_PendingForm):
    r"""Closed form of CosineAnnealingLR / CosineAnnealingWD.

    .. math:: v_k = \eta + (v_0 - \eta) \, \tfrac12 \left(1 + \cos\frac{\pi k}{T}\right)

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`T` = ``T_max``,
    :math:`\eta` = ``eta_min``. Periodic: back at :math:`v_0` at :math:`2T`.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        T_max: int,
        eta_min: float = 0.0,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.T_max = self._arg(_checks.integer, "T_max", T_max, 1)
        self.eta_min = self._arg(_checks.number, "eta_min", eta_min)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _closed_form(self) -> Affine:
        wave = self._own_float_steps().div_(self.T_max)
        wave.mul_(math.pi).cos_().add_(1)
        return Affine(wave, _half(self.initial_val - self.eta_min), self.eta_min)


class _CosineAnnealingWarmRestarts(_PendingForm):
    r"""Closed form of CosineAnnealingWarmRestarts / CosineAnnealingWarmRestartsWD.

    .. math::
        v_k = \eta + (v_0 - \eta) \, \tfrac12 \left(1 + \cos\frac{\pi t_k}{T_i}\right),
        \quad T_i = T_0 m^{i}, \quad t_k = k - T_0 \frac{m^{i} - 1}{m - 1}

    where period :math:`i` is the one containing :math:`k` (for :math:`m = 1`:
    :math:`t_k = k \bmod T_0`). :math:`v_0` = ``initial_learning_rate`` | ``initial_val``,
    :math:`T_0` = ``T_0``, :math:`m` = ``T_mult`` (an int >= 1), :math:`\eta` = ``eta_min``.
    As torch's CosineAnnealingWarmRestarts; cerebras.pytorch 2.10 refuses ``T_mult != 1``
    and from :math:`T_0` on holds a constant per period instead of restarting the cosine.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        T_0: int,
        T_mult: int = 1,
        eta_min: float = 0.0,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.T_0 = self._arg(_checks.integer, "T_0", T_0, 1)
        self.T_mult = self._arg(_checks.integer, "T_mult", T_mult, 1)
        self.eta_min = self._arg(_checks.number, "eta_min", eta_min)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _breakpoints(self, stop: int) -> list[int]:
        """The restarts: every T_0 steps, or after periods growing T_mult times."""
        if self.T_mult == 1:
            return every(self.T_0, stop)
        restarts, period = [self.T_0], self.T_0 * self.T_mult
        while restarts[-1] + period < stop:
            restarts.append(restarts[-1] + period)
            period *= self.T_mult
        return [r for r in restarts if r < stop]

    def _period(self, k: Tensor) -> tuple[Tensor, Tensor]:
        """(t_k, T_i) as exact integers."""
        t0, m = self.T_0, self.T_mult
        if m == 1:
            return torch.remainder(k, t0), torch.full_like(k, t0)
        # Float logarithms can land one period off at a restart; integers settle it.
        guess = torch.floor(torch.log1p(k.double() * (m - 1) / t0) / math.log(m)).long()
        start = t0 * (torch.pow(m, guess) - 1) // (m - 1)
        guess = torch.where(k < start, guess - 1, guess)
        start = t0 * (torch.pow(m, guess + 1) - 1) // (m - 1)
        period = torch.where(k >= start, guess + 1, guess)
        begin = t0 * (torch.pow(m, period) - 1) // (m - 1)
        return k - begin, t0 * torch.pow(m, period)

    def _closed_form(self) -> Affine:
        t_cur, t_i = self._period(self.last_epoch)
        wave = torch.div(t_cur.to(self._dtype), t_i.to(self._dtype))
        wave.mul_(math.pi).cos_().add_(1)
        return Affine(wave, _half(self.initial_val - self.eta_min), self.eta_min)


class _Multiplicative(_PendingForm):
    r"""Closed form of MultiplicativeLR / MultiplicativeWD.

    .. math:: v_k = v_0 \, c^{k}

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`c` = ``coefficient``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        coefficient: float,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        self.coefficient = self._arg(_checks.positive, "coefficient", coefficient)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _closed_form(self) -> Affine:
        powers = torch.pow(self._const(self.coefficient), self._float_steps())
        return Affine(powers, self.initial_val)


StepFunction = Callable[[Tensor], Tensor]


class _Lambda(Scheduler):
    r"""Closed form of LambdaLR / LambdaWD.

    .. math:: v_k = v_0 \, f(k)

    :math:`v_0` = ``initial_learning_rate`` | ``initial_val``, :math:`f` = ``lr_lambda`` |
    ``wd_lambda``: your function of the step tensor, in torch ops (it also receives a 1-D
    tensor of steps), or its dotted import path (``module.function``, as YAML gives it).
    Left out, :math:`f` is the function cerebras.pytorch 2.10 hard-codes (its LambdaLR,
    and Model Zoo's, takes none), :math:`f(k) = v_0 \, \frac{k}{30} \, 0.95^k`, so that
    ``{LambdaLR: {initial_learning_rate: ...}}`` gives the reference's numbers.

    The steps are int64, so Python numbers meeting them compute in torch's default dtype
    (float32 unless you changed it). A schedule computing in float64 (converted from torch's,
    whose LambdaLR computes in Python floats) hands its function float64 steps instead,
    exact integers: Python numbers then compute in float64 too, with no global setting
    changed.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_val: float,
        wd_lambda: StepFunction | str | None = None,
        param_group_tags: Tags = None,
    ) -> None:
        self.initial_val = self._arg(_checks.number, "initial_val", initial_val)
        given = self._reference_lambda if wd_lambda is None else wd_lambda
        self.wd_lambda = self._arg(_checks.function, "wd_lambda", given)
        super().__init__(optimizer, param_group_tags=param_group_tags)

    def _reference_lambda(self, steps: Tensor) -> Tensor:
        """cerebras.pytorch 2.10's fixed function: the initial value times k / 30 times 0.95 ** k
        (a bound method, so it is not saved and reads the current initial value)."""
        return torch.mul(torch.div(steps, 30), torch.pow(self._const(0.95), steps)) * self._const(self.initial_val)

    def _get_closed_form(self) -> Tensor:
        steps = self.last_epoch if self._dtype == torch.float32 else self._float_steps()
        factor = self.wd_lambda(steps)
        return torch.mul(self._const(self.initial_val), factor)


# -- learning rate -------------------------------------------------------------------


class ConstantLR(_Constant, LRScheduler):
    """A constant learning rate."""

    learning_rate = _Alias("val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        learning_rate: float,
        total_iters: int | None = None,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, learning_rate, total_iters, param_group_tags)


class PolynomialLR(_Polynomial, LRScheduler):
    """Polynomial decay of the learning rate."""

    initial_learning_rate = _Alias("initial_val")
    end_learning_rate = _Alias("end_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        end_learning_rate: float,
        total_iters: int,
        power: float = 1.0,
        cycle: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(
            optimizer,
            initial_learning_rate,
            end_learning_rate,
            total_iters,
            power,
            cycle,
            param_group_tags,
        )


class LinearLR(_Linear, LRScheduler):
    """Linear warmup or decay of the learning rate."""

    initial_learning_rate = _Alias("initial_val")
    end_learning_rate = _Alias("end_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        end_learning_rate: float,
        total_iters: int,
        cycle: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(
            optimizer,
            initial_learning_rate,
            end_learning_rate,
            total_iters,
            cycle,
            param_group_tags,
        )


class ExponentialLR(_Exponential, LRScheduler):
    """Exponential decay of the learning rate."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        total_iters: int,
        decay_rate: float,
        staircase: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, total_iters, decay_rate, staircase, param_group_tags)


class InverseExponentialTimeDecayLR(_InverseExponentialTimeDecay, LRScheduler):
    """Inverse-time decay of the learning rate."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        step_exponent: int,
        total_iters: int,
        decay_rate: float,
        staircase: bool = False,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(
            optimizer,
            initial_learning_rate,
            step_exponent,
            total_iters,
            decay_rate,
            staircase,
            param_group_tags,
        )


class InverseSquareRootDecayLR(_InverseSquareRootDecay, LRScheduler):
    """Inverse-square-root decay of the learning rate."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float = 1.0,
        scale: float = 1.0,
        warmup_steps: float = 1.0,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, scale, warmup_steps, param_group_tags)


class CosineDecayLR(_CosineDecay, LRScheduler):
    """Cosine decay of the learning rate, then constant."""

    initial_learning_rate = _Alias("initial_val")
    end_learning_rate = _Alias("end_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        end_learning_rate: float,
        total_iters: int,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, end_learning_rate, total_iters, param_group_tags)


class CosineAnnealingLR(_CosineAnnealing, LRScheduler):
    """Periodic cosine annealing of the learning rate."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        T_max: int,
        eta_min: float = 0.0,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, T_max, eta_min, param_group_tags)


class CosineAnnealingWarmRestarts(_CosineAnnealingWarmRestarts, LRScheduler):
    """Cosine annealing with warm restarts."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        T_0: int,
        T_mult: int = 1,
        eta_min: float = 0.0,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, T_0, T_mult, eta_min, param_group_tags)


class MultiplicativeLR(_Multiplicative, LRScheduler):
    """The learning rate times a coefficient per step."""

    initial_learning_rate = _Alias("initial_val")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        coefficient: float,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, coefficient, param_group_tags)


class LambdaLR(_Lambda, LRScheduler):
    """The learning rate times your function of the step."""

    initial_learning_rate = _Alias("initial_val")
    lr_lambda = _Alias("wd_lambda")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float,
        lr_lambda: StepFunction | str | None = None,
        param_group_tags: Tags = None,
    ) -> None:
        super().__init__(optimizer, initial_learning_rate, lr_lambda, param_group_tags)


# -- weight decay: the generic argument names ----------------------------------------


class ConstantWD(_Constant, WeightDecayScheduler):
    """A constant weight decay."""


class PolynomialWD(_Polynomial, WeightDecayScheduler):
    """Polynomial decay of the weight decay."""


class LinearWD(_Linear, WeightDecayScheduler):
    """Linear change of the weight decay."""


class ExponentialWD(_Exponential, WeightDecayScheduler):
    """Exponential decay of the weight decay."""


class InverseExponentialTimeDecayWD(_InverseExponentialTimeDecay, WeightDecayScheduler):
    """Inverse-time decay of the weight decay."""


class InverseSquareRootDecayWD(_InverseSquareRootDecay, WeightDecayScheduler):
    """Inverse-square-root decay of the weight decay."""


class CosineDecayWD(_CosineDecay, WeightDecayScheduler):
    """Cosine decay of the weight decay, then constant."""


class CosineAnnealingWD(_CosineAnnealing, WeightDecayScheduler):
    """Periodic cosine annealing of the weight decay."""


class CosineAnnealingWarmRestartsWD(_CosineAnnealingWarmRestarts, WeightDecayScheduler):
    """Cosine annealing of the weight decay with warm restarts."""


class MultiplicativeWD(_Multiplicative, WeightDecayScheduler):
    """The weight decay times a coefficient per step."""


class LambdaWD(_Lambda, WeightDecayScheduler):
    """The weight decay times your function of the step."""
