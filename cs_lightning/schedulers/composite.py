"""Composition: SequentialLR, ChainedScheduler/ChainedLR, ScalePerParamLR and WD twins.

A parent evaluates its children's closed forms at the steps it hands them, so any
scheduler (custom ones included) composes, and children never step the optimizer. The
children are built on the same optimizer first; the parent writes its own values last.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor

from cs_lightning.errors import UsageError, UsageTypeError
from cs_lightning.schedulers import _checks, evaluation
from cs_lightning.schedulers.base import (
    MAX_BREAKPOINTS,
    LRScheduler,
    Scheduler,
    Tags,
    WeightDecayScheduler,
    _PendingForm,
    shown_tags,
)
from cs_lightning.schedulers.decay import _CosineDecay, _Polynomial
from cs_lightning.schedulers.evaluation import Steps, Value


def _check_children(parent: Scheduler, name: str, children: Sequence[Scheduler]) -> None:
    """Children share the parent's optimizer, key and tags, and scale no group themselves."""
    owner = type(parent).__name__
    for index, child in enumerate(children):
        where = f"{owner}: {name}[{index}] ({type(child).__name__})"
        if child.optimizer is not parent.optimizer:
            raise UsageError(f"{where} is built on another optimizer; fix: build it on the same one")
        if child.param_group_key != parent.param_group_key:
            raise UsageError(
                f"{where} schedules {child.param_group_key!r}, not {parent.param_group_key!r}; "
                f"fix: compose {parent.param_group_key!r} schedulers only"
            )
        if child.param_group_tags != parent.param_group_tags:
            raise UsageError(
                f"{where} has param_group_tags={shown_tags(child.param_group_tags)}, the parent "
                f"{shown_tags(parent.param_group_tags)}; fix: give both the same tags"
            )
        if not bool((child._scales == 1.0).all()):
            raise UsageError(f"{where} scales groups; make ScalePerParam the outermost scheduler")


def _scheduler_list(owner: str, name: str, value: object) -> list[Scheduler]:
    if not isinstance(value, (list, tuple)) or not value:
        raise UsageTypeError(f"{owner}: got {name}={value!r}; give a non-empty list of schedulers")
    for index, child in enumerate(value):
        if not isinstance(child, Scheduler):
            raise UsageTypeError(f"{owner}: got {name}[{index}]={child!r}; give cs_lightning schedulers")
    return list(value)


def _ends(owner: str, children: list[Scheduler]) -> list[int]:
    """The steps where each child but the last ends: the running sum of their ``total_iters``."""
    ends, end = [], 0
    for index, child in enumerate(children[:-1]):
        if child.total_iters is None:
            raise UsageError(
                f"{owner}: milestones are missing and schedulers[{index}] ({type(child).__name__}) has no "
                "total_iters to infer them from; fix: give milestones (the step where each next scheduler starts)"
            )
        end += child.total_iters
        ends.append(end)
    return ends


def warn_of_cut_stages(owner: str, children: list[Scheduler], milestones: list[int]) -> None:
    """Warn of a milestone in a YAML block that ends a warmup or decay before its total_iters: its value
    jumps there. That is how cerebras.pytorch and torch run it (so Python's SequentialLR, which a torch
    schedule converts to, says nothing), and in a config it is almost never meant: all 416 stages of the
    294 Model Zoo configs the team keeps end where their scheduler does."""
    start = 0
    for index, (child, milestone) in enumerate(zip(children, milestones)):
        length = child.total_iters
        ends = isinstance(child, (_Polynomial, _CosineDecay)) and not getattr(child, "cycle", False)
        if ends and length is not None and milestone - start < length:
            warnings.warn(
                f"{owner}: milestones[{index}]={milestone} starts schedulers[{index + 1}] {milestone - start} "
                f"steps into schedulers[{index}] ({type(child).__name__}, total_iters={length}), cutting it "
                f"short: the value jumps there; fix: give milestones[{index}]={start + length}, or leave milestones "
                "out to infer them",
                UserWarning,
                stacklevel=3,
            )
        start = milestone


class _Composite(Scheduler):
    """A scheduler whose closed form evaluates other schedulers' closed forms."""

    def _children(self) -> tuple[str, list[Scheduler]]:
        """The argument holding the children, and the children."""
        raise NotImplementedError

    def _bind_groups(self) -> None:
        super()._bind_groups()
        _check_children(self, *self._children())


class _Sequential(_Composite, _PendingForm):
    r"""Closed form of SequentialLR / SequentialWD: one child after the other.

    .. math:: v_k = f_j(k - m_{j-1}) \quad \text{for } m_{j-1} \le k < m_j
        \quad (m_{-1} = 0, m_n = \infty)

    :math:`f_j` = ``schedulers`` (each counts from its own step 0, at its milestone),
    :math:`m_j` = ``milestones`` (strictly increasing, one fewer than the schedulers; left
    out, the running sum of the children's ``total_iters``, each child lasting its length, as
    Model Zoo configs infer them: cerebras.pytorch 2.10's class requires them). A
    child's ``total_iters`` does not bound its stage, as in cerebras.pytorch 2.10 and torch:
    a milestone may cut a warmup short, or come after a child reaches its end value (which
    it then holds, or keeps decaying, as its closed form says); ExponentialLR's is a decay
    period and ConstantLR ignores its own. Its
    ``total_iters`` is the last milestone plus the last child's, when that child has one,
    so a sequence nests in another whose milestones are inferred.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        schedulers: Sequence[Scheduler],
        milestones: Sequence[int] | None = None,
        last_epoch: int = -1,
        param_group_tags: Tags = None,
    ) -> None:
        owner = type(self).__name__
        self.schedulers = _scheduler_list(owner, "schedulers", schedulers)
        if milestones is None:
            milestones = _ends(owner, self.schedulers)
        self.milestones = _checks.milestones(owner, "milestones", milestones)
        if len(self.milestones) != len(self.schedulers) - 1:
            raise UsageError(
                f"{owner}: got {len(self.milestones)} milestones for {len(self.schedulers)} "
                "schedulers; give one milestone fewer than schedulers"
            )
        last = self.schedulers[-1].total_iters
        total = None if last is None else ([0, *self.milestones][-1] + last)
        super().__init__(optimizer, total_iters=total, last_epoch=last_epoch, param_group_tags=param_group_tags)

    def _children(self) -> tuple[str, list[Scheduler]]:
        return "schedulers", self.schedulers

    def _closed_form(self) -> Value:
        return evaluation.piecewise(self._steps(), self.milestones, self._stage, self._dtype)

    def _breakpoints(self, stop: int) -> list[int]:
        """Each milestone (the next child starts), and each child's own jumps within its stage."""
        points, starts, ends = [], [0, *self.milestones], [*self.milestones, stop]
        for child, start, end in zip(self.schedulers, starts, ends):
            if start >= stop:
                break
            if start > 0:
                points.append(start)
            points += [start + b for b in child._breakpoints(min(end, stop) - start)]
            if len(points) > MAX_BREAKPOINTS:
                break
        return points[: MAX_BREAKPOINTS + 1]

    def _stage(self, index: int, steps: Steps) -> Value:
        """Child ``index`` at ``steps`` of its stage, counted from the stage's start."""
        start = self.milestones[index - 1] if index else 0
        return self.schedulers[index]._value_at(steps.shifted(-start))


class _Chained(_Composite):
    r"""Closed form of ChainedScheduler / ChainedLR / ChainedWD: a product of schedules.

    .. math:: v_k = f_0(k) \prod_{j \ge 1} \frac{f_j(k)}{f_j^{\mathrm{init}}}

    :math:`f_j` = ``schedulers`` (all at step :math:`k`; the optimizer is theirs);
    :math:`f_j^{\mathrm{init}}` is a later child's initial value argument
    (``initial_learning_rate`` | ``initial_val``), or its value at step 0 if it has none.
    """

    def __init__(self, schedulers: Sequence[Scheduler], param_group_tags: Tags = None) -> None:
        owner = type(self).__name__
        if isinstance(schedulers, torch.optim.Optimizer) or isinstance(param_group_tags, torch.optim.Optimizer):
            raise UsageTypeError(  # torch's ChainedScheduler takes (schedulers, optimizer)
                f"{owner}: got an optimizer; {owner} takes none (its schedulers' is used); fix: "
                f"{owner}([scheduler, ...])"
            )
        self.schedulers = _scheduler_list(owner, "schedulers", schedulers)
        for child in self.schedulers[1:]:
            _initial_value(self, child)  # fail now on a child that starts at 0
        super().__init__(self.schedulers[0].optimizer, param_group_tags=param_group_tags)

    def _children(self) -> tuple[str, list[Scheduler]]:
        return "schedulers", self.schedulers

    def _breakpoints(self, stop: int) -> list[int]:
        points = sorted({b for child in self.schedulers for b in child._breakpoints(stop)})
        return points[: MAX_BREAKPOINTS + 1]

    def _get_closed_form(self) -> Tensor:
        steps = self._steps()
        value = self.schedulers[0]._closed_form_at(steps)
        for child in self.schedulers[1:]:  # initial values read now: a child's arguments may change
            value = torch.mul(value, torch.div(child._closed_form_at(steps), _initial_value(self, child)))
        return value


def _initial_value(parent: Scheduler, child: Scheduler) -> float:
    initial = getattr(child, "initial_val", None)
    if initial is None:
        initial = float(child._closed_form_at(torch.tensor(0, dtype=torch.int64)))
    if initial == 0:
        raise UsageError(
            f"{type(parent).__name__}: {type(child).__name__} starts at 0, so its relative change "
            "is undefined; put it first in the chain"
        )
    return initial


class _ScalePerParam(_Composite, _PendingForm):
    r"""Closed form of ScalePerParamLR / ScalePerParamWD: one schedule, scaled per group.

    .. math:: v_{k,g} = a_g \, f(k)

    :math:`f` = ``scheduler``, :math:`a_g` = group :math:`g`'s ``adjust_learning_rate``
    (else ``adjust_val``, else 1), read at construction; the weight-decay twin reads the
    same keys, as cerebras.pytorch 2.10 does.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        scheduler: Scheduler,
        param_group_tags: Tags = None,
    ) -> None:
        self.scheduler = _scheduler_list(type(self).__name__, "scheduler", [scheduler])[0]
        super().__init__(optimizer, total_iters=self.scheduler.total_iters, param_group_tags=param_group_tags)

    def _children(self) -> tuple[str, list[Scheduler]]:
        return "scheduler", [self.scheduler]

    def _group_scales(self) -> list[float]:
        groups = self.optimizer.param_groups
        return [
            _checks.number(
                type(self).__name__,
                f"param_groups[{index}]['adjust_learning_rate']",
                groups[index].get("adjust_learning_rate", groups[index].get("adjust_val", 1.0)),
            )
            for index in self._targets
        ]

    def _breakpoints(self, stop: int) -> list[int]:
        return self.scheduler._breakpoints(stop)

    def _closed_form(self) -> Value:
        return self.scheduler._value_at(self._steps())


class SequentialLR(_Sequential, LRScheduler):
    """Learning-rate schedulers one after the other."""


class ChainedLR(_Chained, LRScheduler):
    """A product of learning-rate schedules."""


class ChainedScheduler(ChainedLR):
    """torch's name for ChainedLR."""


class ScalePerParamLR(_ScalePerParam, LRScheduler):
    """A learning-rate schedule scaled per param group."""


class SequentialWD(_Sequential, WeightDecayScheduler):
    """Weight-decay schedulers one after the other."""


class ChainedWD(_Chained, WeightDecayScheduler):
    """A product of weight-decay schedules."""


class ScalePerParamWD(_ScalePerParam, WeightDecayScheduler):
    """A weight-decay schedule scaled per param group."""
