"""Base classes of the closed-form schedulers.

A schedule is a pure function of the step, ``value = f(last_epoch)``, written as torch ops
in ``_get_closed_form()``. The same function serves three uses:

* stepping: ``step()`` writes ``f(k)`` into every targeted ``param_group[key]``;
* vectorized evaluation: ``values(steps)`` runs it once on a 1-D step tensor;
* composition: a parent (``SequentialLR``, ``ChainedScheduler``, ...) evaluates a child's
  closed form at the step it hands to that child.

``step()`` stays cheap because values are evaluated a block of steps at a time (one
vectorized call of the closed form), so a step is a list lookup and a write per group.
Values are float32, as the same schedule computes on a CS-X (and in cerebras.pytorch);
a scheduler converted from torch's computes in float64, as torch does.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import math
import types
import typing
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from numbers import Real
from typing import Any, ClassVar, TypeGuard

import torch
from torch import Tensor
from torch.optim.lr_scheduler import EPOCH_DEPRECATION_WARNING
from torch.optim.lr_scheduler import LRScheduler as _TorchLRScheduler

from cs_lightning.errors import ClosedFormError, ParamGroupTagsError, UsageError, UsageTypeError
from cs_lightning.schedulers import _checks, evaluation
from cs_lightning.schedulers.evaluation import Steps, Value

Tags = str | None | Sequence[str | None]

# Steps evaluated per vectorized call of the closed form while stepping: a multiple of the
# vector lanes and under the size torch splits among threads (see evaluation).
_BLOCK = 1024
# Arguments (in their weight-decay spelling) that are values of the schedule itself.
_VALUE_ARGUMENTS = frozenset({"initial_val", "end_val", "val", "vals", "base_val", "max_val", "eta_min"})
# Arguments that multiply every value of the schedule.
_FACTOR_ARGUMENTS = frozenset({"scale"})
# How errors name each scheduled setting.
_SETTING_NAMES = {"lr": "learning rate", "weight_decay": "weight decay", "momentum": "momentum"}
# Jumps a schedule reports for plots and tables (see Scheduler._breakpoints); a schedule
# with more has them closer together than a plot's samples, which then show its envelope.
MAX_BREAKPOINTS = 4096


# check_steps: every step is checked up to this many (0.1 to 0.6 s of values() on 2 cores); past it, this
# many evenly spaced ones. Evaluated a chunk at a time, so memory stays that of one chunk.
_CHECKED_STEPS = 2**22
_CHECK_CHUNK = 2**20


# The state dict key of the scales of param groups that joined later (see Scheduler._rebase).
_GROUP_SCALES = "group_scales"

# Each optimizer's schedulers, by the order they were made (see Scheduler._watch_updates).
_WATCHED: weakref.WeakKeyDictionary[torch.optim.Optimizer, weakref.WeakValueDictionary[int, Any]] = (
    weakref.WeakKeyDictionary()
)
_ORDER = itertools.count()


def _refuse_updates(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    """The step pre-hook: each scheduler still alive counts the update, and refuses one that would use its
    value out of range."""
    for scheduler in list(_WATCHED.get(optimizer, {}).values()):
        scheduler._updates += 1
        scheduler._refuse_an_update()


class EpochSteppingWarning(UserWarning):
    """A closed-form scheduler was stepped once for several optimizer steps (once per epoch, say), while a
    Cerebras schedule counts optimizer steps."""


class _Alias:
    """An argument name of an LR class that stores into its generic twin's attribute.

    ``LinearLR`` takes ``initial_learning_rate`` where ``LinearWD`` takes ``initial_val``;
    both closed forms read ``initial_val``, and both names read and write the same value.
    """

    def __init__(self, target: str) -> None:
        self.target = target

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj, self.target)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj, self.target, value)


def shown_tags(tags: Any) -> Any:
    """Tags as an error shows them: a set sorted into a list (``['a', 'b']``, not ``{'b', 'a'}``)."""
    return sorted(tags, key=str) if isinstance(tags, (set, frozenset)) else tags


def _tag_set(owner: str, tags: Any) -> set[str | None] | None:
    if tags is None:
        return None
    if isinstance(tags, str):
        return {tags}
    if not isinstance(tags, (list, tuple, set)):
        raise UsageTypeError(f"{owner}: got param_group_tags={shown_tags(tags)!r}; give a tag, a list of tags or None")
    for tag in tags:
        if tag is not None and not isinstance(tag, str):
            raise UsageTypeError(f"{owner}: got param_group_tags={shown_tags(tags)!r}; tags are strings or None")
    unique = set(tags)
    if len(unique) != len(tags):
        raise UsageError(f"{owner}: got param_group_tags={tags!r}; each tag may appear once")
    return unique


def _group_tags(group: dict) -> set:
    tags = group.get("tags", {None})
    return {tags} if isinstance(tags, str) else set(tags)


class _Cursor:
    """Where stepping is: the step, a block of precomputed rows, the row written last."""

    __slots__ = ("block", "last", "refusal", "start", "step", "valid")

    def __init__(self, step: int) -> None:
        self.step = step
        self.start = step
        self.block: list[list[float]] = []
        self.valid = 0  # rows of the block before the first one an update may not use (see Scheduler._refusal)
        self.refusal: str | None = None  # why the row written last may not be used (see Scheduler._refusal)
        self.last: list[float] = []


class _HiddenSubclasses(type):
    """Metaclass of the closed-form schedulers: their subclasses are left out of ``__subclasses__()``.

    LightningCLI resolves a short class name in its ``lr_scheduler`` key (``--lr_scheduler
    StepLR``) by walking the subclasses of torch's ``LRScheduler``; this catalogue's StepLR,
    OneCycleLR, ... would make those names ambiguous, and they must keep meaning torch's
    classes. This package's registry walks the real list (``type.__subclasses__``), and full
    class paths (``cs_lightning.schedulers.StepLR``) resolve as before.
    """

    def __subclasses__(cls) -> list[type]:
        return []


class Scheduler(_TorchLRScheduler, metaclass=_HiddenSubclasses):
    """A schedule of one optimizer setting (``param_group_key``), in closed form.

    Subclass ``LRScheduler`` or ``WeightDecayScheduler``, store your arguments, call
    ``super().__init__(optimizer, total_iters=..., last_epoch=...)`` and override
    ``_get_closed_form()``: torch ops on ``self.last_epoch`` (a tensor of steps), no Python
    ``if``/``min``/``int()`` on it; ``torch.where`` selects between branches. It returns the
    value at those steps, a tensor (or a number, for a constant). Two rules:

    * store each argument before calling ``super().__init__()``: it evaluates the closed form;
    * store each argument under its own name (``self.period = period``): ``state_dict()`` saves
      the constructor's arguments by name, and resuming checks them.

    Args:
        optimizer: the optimizer whose param groups receive the values.
        total_iters: the schedule's length, where it has one (used to infer
            ``SequentialLR`` milestones).
        last_epoch: the step before the first one; ``-1`` starts at step 0.
        param_group_tags: schedule only the groups whose ``tags`` include one of these
            (``None``: every group; ``[None]``: the groups without tags).
    """

    param_group_key: ClassVar[str] = ""
    # Where the closed form is evaluated: on the CPU, as last_epoch is. cerebras.pytorch's schedulers make their
    # tensors with device=self.device, and a custom one written for it works here as is (setting it too).
    device: torch.device = torch.device("cpu")
    # Keys of which a scheduled group must have one, or the value written is read by no one
    # (an optimizer without weight decay, say), and optimizers that have them, for the error.
    _group_needs: ClassVar[tuple[str, ...]] = ()
    _optimizers_with_them: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A public class (LinearLR) shows the formula of the closed form it inherits from
        # its generic class (_Polynomial), so help() and the docs have it.
        super().__init_subclass__(**kwargs)
        form = next(
            (
                base
                for base in cls.__mro__[1:]
                if base.__name__.startswith("_") and {"_get_closed_form", "_closed_form"} & vars(base).keys()
            ),
            None,
        )
        if form is not None and form.__doc__ and cls.__doc__ and not cls.__name__.startswith("_"):
            cls.__doc__ = f"{inspect.cleandoc(cls.__doc__)}\n\n{inspect.cleandoc(form.__doc__)}"

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        total_iters: int | None = None,
        last_epoch: int = -1,
        param_group_tags: Tags = None,
    ) -> None:
        owner = type(self).__name__
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise UsageTypeError(f"{owner}: got optimizer={optimizer!r}; pass a torch.optim.Optimizer")
        if not self.param_group_key:
            raise UsageTypeError(f"{owner}: subclass LRScheduler or WeightDecayScheduler, not Scheduler")
        if not _has_closed_form(type(self)):
            raise UsageTypeError(f"{owner}: override _get_closed_form() (torch ops on self.last_epoch)")
        if total_iters is not None:  # an int, not a numpy one: state dicts load with weights_only
            # 0 is a stage of no steps: Model Zoo configs turn a warmup off with it
            total_iters = _checks.integer(owner, "total_iters", total_iters, 0)
        last_epoch = _checks.integer(owner, "last_epoch", last_epoch, -1)
        self.optimizer = optimizer
        self.total_iters = total_iters
        self.param_group_tags = _tag_set(owner, param_group_tags)
        self._probe: Steps | None = None
        self._dtype = torch.float32
        self._tensor_values = False
        self._refuses_invalid = True  # see _refusal; False for a schedule converted from torch's
        # Groups present now are bound by their tags; a group added later joins at a step
        # (see _adopt_new_groups). Groups that follow the schedule from a value of their own
        # (joined later: see _rebase) have their own scale, {index: scale}.
        self._bound = self._seen = len(optimizer.param_groups)
        self._own_scales: dict[int, float] = {}
        self._bind_groups()
        # torch's attribute, read by Lightning; None for a group without the key (momentum)
        self.base_lrs: list[Any] = [group.get(self.param_group_key) for group in optimizer.param_groups]
        self._cursor = _Cursor(last_epoch + 1)
        self._updates = 0  # optimizer steps since the last step() (see _warn_of_skipped_updates)
        self._warned_of_skipped_updates = False
        self._check_closed_form()
        refusal = self._refusal(0)
        if refusal is not None:  # a schedule that starts out of range is wrong from its arguments
            raise UsageError(refusal)
        self._write(self._cursor.block[0])
        self._watch_updates()

    def _arg(self, check: Callable[..., Any], name: str, value: Any, *extra: Any) -> Any:
        """Run an argument check, naming the argument as this class spells it. A value of the
        schedule (``initial_learning_rate``, ``end_val``, ...) and a factor of every value
        (``scale``) must also be >= 0: torch's optimizers refuse a negative lr, weight_decay or
        momentum, and a schedule should not reach one hundreds of steps into a run."""
        owner, public = type(self).__name__, _public_name(type(self), name)
        if name in _VALUE_ARGUMENTS and name != "vals" and isinstance(value, (list, tuple)):
            raise UsageTypeError(  # one value per param group, as torch's base_lrs hold them
                f"{owner}: got {public}={value!r}; {public} must be a number, one for the param groups it "
                "schedules; fix: give groups of other values schedulers of their own (param_group_tags), or scale "
                "one schedule per group by its adjust_learning_rate with ScalePerParamLR (ScalePerParamWD)"
            )
        checked = check(owner, public, value, *extra)
        values = checked if isinstance(checked, list) else [checked]
        if name in _VALUE_ARGUMENTS | _FACTOR_ARGUMENTS and any(v < 0 for v in values):
            setting = _SETTING_NAMES[self.param_group_key]
            factor = f"{public} multiplies every {setting}; " if name in _FACTOR_ARGUMENTS else ""
            raise UsageError(f"{owner}: got {public}={value!r}; {factor}{self._non_negative()}")
        return checked

    def _non_negative(self) -> str:
        """The rule a value of this schedule follows, e.g. ``a learning rate must be >= 0 (...)``."""
        key = self.param_group_key
        return f"a {_SETTING_NAMES[key]} must be >= 0 (torch's optimizers refuse {key} < 0)"

    # -- the closed form -------------------------------------------------------------

    def _get_closed_form(self) -> Tensor:
        """The schedule's value at ``self.last_epoch``, as torch ops (override this).

        Subclasses written for older cerebras.pytorch releases override
        ``_get_closed_form_lr`` instead; it is used when present.
        """
        legacy = getattr(self, "_get_closed_form_lr", None)
        if legacy is None:
            raise NotImplementedError(f"{type(self).__name__}: override _get_closed_form()")
        return legacy()

    # torch's int attribute, a tensor here: closed forms compute with it
    @property  # type: ignore[override]
    def last_epoch(self) -> Tensor:
        """The step as an int64 tensor: 0-d when stepping, 1-D inside ``values()``."""
        probe = self._probe
        return torch.tensor(self._cursor.step, dtype=torch.int64) if probe is None else probe.ints()

    @last_epoch.setter
    def last_epoch(self, step: int | Tensor) -> None:
        self._cursor.step = int(step)

    def _float_steps(self) -> Tensor:
        """``last_epoch`` in the compute dtype (float32; float64 for a scheduler converted
        from torch's), made once per evaluation: modify it out of place only."""
        probe = self._probe
        if probe is None:
            return torch.tensor(self._cursor.step, dtype=self._dtype)
        return probe.floats(self._dtype)

    def _steps(self) -> Steps:
        """The steps of this evaluation (the current step outside one), for a composite to
        hand to its children: they then share one conversion to floats."""
        return self._probe if self._probe is not None else Steps(self.last_epoch)

    def _ascending_steps(self) -> range | None:
        """The steps of this evaluation as an increasing range, or None when they are not one
        (closed forms may take a faster path over consecutive steps)."""
        probe = self._probe
        return None if probe is None else probe.ascending()

    def _own_float_steps(self) -> Tensor:
        """``_float_steps()`` as a tensor of this closed form's own, to change in place."""
        probe = self._probe
        if probe is None:
            return torch.tensor(self._cursor.step, dtype=self._dtype)
        return probe.own_floats(self._dtype)

    def _held(self, last: int) -> Tensor:
        """``min(k, last)`` for the steps :math:`k` in float steps, as a tensor of the closed
        form's own (to change in place): the steps themselves when none is past ``last``."""
        steps = self._ascending_steps()
        if steps and steps[-1] <= last:
            return self._own_float_steps()
        return torch.clamp(self._float_steps(), max=last)

    def _const(self, value: float) -> Tensor:
        """A 0-d constant of the compute dtype, for closed forms that need a tensor operand."""
        return torch.tensor(value, dtype=self._dtype)

    def _value(self) -> Value:
        """The closed form's value at ``self.last_epoch``, where a built-in schedule may leave
        its last operations to whoever keeps the value (see ``evaluation.Pending``)."""
        return self._get_closed_form()

    def _closed_form_at(self, steps: range | Tensor | Steps) -> Tensor:
        """Evaluate the closed form with ``last_epoch`` = ``steps``, in the compute dtype."""
        return evaluation.as_tensor(self._value_at(steps))

    def _value_at(self, steps: range | Tensor | Steps) -> Value:
        """``_closed_form_at``, its last multiply-add possibly still to run (see ``_value``)."""
        if not isinstance(steps, Steps):
            steps = Steps(steps)
        saved, self._probe = self._probe, steps
        try:
            value = self._value()
        finally:
            self._probe = saved
        if isinstance(value, evaluation.Pending):  # a built-in's: one value per step, in the compute dtype
            return value
        if not isinstance(value, (Tensor, Real)) or isinstance(value, bool):
            raise ClosedFormError(
                f"{type(self).__name__}._get_closed_form returned {value!r}; return the value at "
                "self.last_epoch: a tensor computed from it with torch ops (or a number, for a constant)"
            )
        if not isinstance(value, Tensor):
            value = torch.as_tensor(value, dtype=self._dtype)
        elif value.dtype != self._dtype:
            value = value.to(self._dtype)
        if value.shape not in (torch.Size(), steps.shape):
            raise ClosedFormError(
                f"{type(self).__name__}._get_closed_form returned shape {tuple(value.shape)} "
                f"for steps of shape {tuple(steps.shape)}; return one value per step"
            )
        return value.expand(steps.shape)

    def _check_closed_form(self) -> None:
        """Fail now, naming the class, if the closed form branches in Python on the step."""
        start = self._cursor.step
        try:
            curve = self._closed_form_at(range(start, start + _BLOCK))
        except Exception as error:
            try:
                self._closed_form_at(torch.tensor(start))
            except Exception:  # noqa: BLE001
                raise self._argument_stored_late(error) or error from None
            raise self._python_control_flow(error) from error
        # A closed form that branches on the whole tensor (`.all()`, `.any()`) gives other
        # values for a step alone than for the same step among others.
        for offset in (0, _BLOCK - 1):
            alone = float(self._closed_form_at(torch.tensor(start + offset)))
            among = float(curve[offset])
            if not (
                math.isclose(alone, among, rel_tol=1e-6) or alone == among or (math.isnan(alone) and math.isnan(among))
            ):
                raise self._python_control_flow(
                    f"step {start + offset} gives {alone} alone but {among} among other steps"
                )
        self._set_block(start, curve)

    def _argument_stored_late(self, error: Exception) -> ClosedFormError | None:
        """The error to raise if ``error`` is the closed form reading an attribute this scheduler
        does not have yet: an argument stored after ``super().__init__()``, which evaluates it."""
        if not (isinstance(error, AttributeError) and error.obj is self):
            return None
        return ClosedFormError(
            f"{type(self).__name__}._get_closed_form reads self.{error.name}, which is not set yet: "
            f"store the arguments (self.{error.name} = ...) before calling super().__init__(), "
            "which evaluates the closed form"
        )

    def _python_control_flow(self, cause: object) -> ClosedFormError:
        return ClosedFormError(
            f"{type(self).__name__}._get_closed_form cannot be evaluated on a tensor of steps "
            f"({cause}). It must use torch ops only on self.last_epoch: no Python if/min/max/"
            "int()/.item() on it; write branches as torch.where(condition, a, b)"
        )

    def _breakpoints(self, stop: int) -> list[int]:
        """The steps in ``(0, stop)`` where the value may jump (a new stage or period starts),
        increasing, at most ``MAX_BREAKPOINTS + 1`` of them. Plots and tables show these steps
        besides their samples, so a jump looks like one however long the schedule. None here:
        a continuous schedule needs none, and a custom one is sampled only."""
        return []

    # -- param groups ------------------------------------------------------------------

    def _bind_groups(self) -> None:
        groups = self.optimizer.param_groups[: self._bound]
        tags = self.param_group_tags
        self._targets = [i for i, group in enumerate(groups) if tags is None or tags & _group_tags(group)]
        if not self._targets:
            available = set().union(*(_group_tags(group) for group in groups))
            named = sorted(tag for tag in available if tag is not None)
            have = " and ".join([*([f"tagged {named}"] if named else []), *(["untagged"] if None in available else [])])
            raise ParamGroupTagsError(
                (),
                f"{type(self).__name__}: got param_group_tags={shown_tags(tags)}, which "
                f"match no param group of its optimizer (its groups are {have or 'none'})",
            )
        own = self._own_scales
        scales = [own.get(index, scale) for index, scale in zip(self._targets, self._group_scales())]
        joined = sorted(index for index in own if index >= self._bound)
        self._targets += joined
        scales += [own[index] for index in joined]
        self._scales = torch.tensor(scales, dtype=torch.float64)
        self._unscaled = bool((self._scales == 1.0).all())
        self._check_groups_read_the_value()

    def _check_groups_read_the_value(self) -> None:
        if not self._group_needs:
            return
        groups = self.optimizer.param_groups
        for index in self._targets:
            if not any(key in groups[index] for key in self._group_needs):
                what = self.param_group_key.replace("_", " ")
                raise UsageError(
                    f"{type(self).__name__}: param_groups[{index}] has no {' or '.join(self._group_needs)} "
                    f"({type(self.optimizer).__name__} has no {what}); fix: schedule the {what} of an optimizer "
                    f"that has one ({self._optimizers_with_them}, ...)"
                )

    def _adopt_new_groups(self) -> None:
        r"""Schedule the param groups added to the optimizer since the last step (e.g. by
        Lightning's ``BackboneFinetuning``), as torch's chainable schedulers do: a group that
        joins at step :math:`k` holding :math:`v` gets :math:`v\,f(m)/f(k)` at step :math:`m`,
        the schedule's own changes from its own value."""
        groups = self.optimizer.param_groups
        if len(groups) <= self._seen:
            return
        tags = self.param_group_tags
        new = {
            i: self._read(i) for i in range(self._seen, len(groups)) if tags is None or tags & _group_tags(groups[i])
        }
        self._seen = len(groups)
        if new:
            self._rebase(new)

    def _rebase(self, values: dict[int, float]) -> None:
        """Param groups (index -> value) follow the schedule from these values, at this step."""
        step = self._cursor.step
        now = float(self._closed_form_at(torch.tensor(step)))
        for index, value in values.items():
            if now == 0:
                raise UsageError(
                    f"{type(self).__name__}: param_groups[{index}] joins the schedule at step {step} "
                    f"holding {self.param_group_key}={value}, but the schedule is 0 there, so "
                    "no multiple of it starts from that value; add the group where the schedule is "
                    "not 0, or build the scheduler after adding the group"
                )
            self._own_scales[index] = value / now
        self._bind_groups()
        self._cursor.block = []  # its rows hold the values of the old scales

    def _group_scales(self) -> list[float]:
        """One multiplier per targeted group (ScalePerParam overrides this)."""
        return [1.0] * len(self._targets)

    def _set_block(self, start: int, value: Value) -> None:
        """Keep the rows of ``_BLOCK`` steps from ``start`` on, given the closed form's value there."""
        block = torch.empty(_BLOCK, len(self._targets), dtype=self._dtype)
        evaluation.store(self, value, block, range(len(self._targets)))
        cursor = self._cursor
        cursor.block = block.tolist()
        cursor.start = start
        cursor.valid = self._valid_rows(block)

    def _valid_rows(self, block: Tensor) -> int:
        """The rows of ``block`` before its first negative or non-finite value (see ``_refusal``). All of
        them for a schedule converted from torch's: it writes what torch's would, and torch refuses no
        value (its linear OneCycleLR gives a negative lr at step total_steps, which Lightning writes
        after a run's last step)."""
        if not self._refuses_invalid:
            return _BLOCK
        below = block < torch.tensor(self._bounds(), dtype=block.dtype)
        valid = torch.isfinite(block).logical_and_(block >= 0).logical_and_(below).all(dim=1)  # nan >= 0 is False
        return _BLOCK if bool(valid.all()) else int(valid.logical_not_().nonzero()[0])

    def _bounds(self) -> list[float]:
        """Per targeted group, the value its values must stay below (see ``_refusal``): none here."""
        return [math.inf] * len(self._targets)

    def _rule(self, position: int, value: float) -> str:
        """What ``value``, out of range for the ``position``-th targeted group, breaks (see ``_refusal``)."""
        return f"; {self._non_negative()}, and finite"

    def _refusal(self, index: int) -> str | None:
        """Why row ``index`` of the block may not be used by an update (a negative or non-finite value), or
        None. A schedule may turn negative (a lambda) or overflow (a growing MultiplicativeLR) far into a run,
        where its arguments do not show it. Such a row is still written, as cerebras.pytorch writes it:
        Lightning steps the schedulers once more after a run's last update (OneCycleLR extrapolates below 0
        there), and `_refuse_an_update` refuses the update that would use it."""
        cursor = self._cursor
        row = cursor.block[index]
        if index < cursor.valid:
            return None
        # past the first invalid row, a row may be valid again (a schedule negative for a while)
        return self._invalid(cursor.start + index, row)

    def _invalid(self, step: int, row: list[float]) -> str | None:
        """The refusal of ``row``, the values of ``step``, if one is out of range (negative, not finite, or
        past its group's bound, see ``_bounds``), else None."""
        out = [(i, v) for i, (v, bound) in enumerate(zip(row, self._bounds())) if not 0 <= v < bound]  # nan too
        if not out:
            return None
        position, value = out[0]
        return (
            f"{type(self).__name__}: step {step} gives {self.param_group_key}={value}"
            f"{self._rule(position, value)}; fix: change the schedule's arguments (or its _get_closed_form) "
            "so that no step gives one"
        )

    def check_steps(self, count: int) -> None:
        """Raise now the refusal an update of the first ``count`` steps would raise mid-run (a negative or
        non-finite value, see ``_refusal``), with the same message: a run of ``count`` steps (Lightning's
        ``max_steps``) stops at step 0 instead of hours in. The closed form is evaluated on many steps at
        once: up to 2**22 steps, every one; past that, 2**22 steps evenly spaced from 0 to ``count - 1``
        (then the steps between the first bad one and the one before it, to name the first bad step),
        which can miss only a stretch of bad values shorter than their spacing (238 steps for 10**9)."""
        count = _checks.integer(type(self).__name__, "count", count, 0)
        # converted from torch's: it writes what torch's would; checked this far already (the CLI, then csx)
        if not self._refuses_invalid or count <= self.__dict__.get("_checked_steps", 0):
            return
        step = self._first_bad_step(0, count - 1)
        refusal = None if step is None else self._invalid(step, self.values([step])[0, self._targets].tolist())
        if refusal is not None:
            raise UsageError(refusal)
        self._checked_steps = count

    def _first_bad_step(self, first: int, last: int) -> int | None:
        """The first checked step from ``first`` to ``last`` whose value is negative or not finite, or None
        (see ``check_steps``); once a spaced one is bad, the first bad one is searched before it the same way."""
        if last - first < _CHECKED_STEPS:
            steps = torch.arange(first, last + 1)
        else:
            steps = torch.linspace(first, last, _CHECKED_STEPS, dtype=torch.float64).round_().long()
        bad = self._first_bad(steps)
        if bad is None or last - first < _CHECKED_STEPS:
            return None if bad is None else int(steps[bad])
        return self._first_bad_step(int(steps[bad - 1]) + 1 if bad else first, int(steps[bad]))

    def _first_bad(self, steps: Tensor) -> int | None:
        """The index in ``steps`` of the first step with a value out of range (see ``_invalid``), or None."""
        for start in range(0, len(steps), _CHECK_CHUNK):
            values = self.values(steps[start : start + _CHECK_CHUNK])[:, self._targets]
            below = values < torch.tensor(self._bounds(), dtype=values.dtype)
            bad = torch.isfinite(values).logical_and_(values >= 0).logical_and_(below).all(dim=1).logical_not_()
            if bool(bad.any()):
                return start + int(bad.nonzero()[0])
        return None

    def _watch_updates(self) -> None:
        """Refuse an update that would use a value out of range (see `_refusal`), by a step pre-hook of the
        optimizer: one per optimizer, calling its schedulers in the order they were made. It holds them
        weakly: one thrown away stops checking, and is freed; no hook is ever removed, so none can be while
        the optimizer's step loops over its hooks (the cyclic collector frees a composite at any moment)."""
        watched = _WATCHED.get(self.optimizer)
        if watched is None:
            watched = _WATCHED[self.optimizer] = weakref.WeakValueDictionary()
            self.optimizer.register_step_pre_hook(_refuse_updates)
        watched[next(_ORDER)] = self

    def _refuse_an_update(self) -> None:
        """Raise the refusal of the row this schedule wrote last, while the param groups still hold it: a
        schedule composed into another writes nothing (its parent's values are used), and one whose values
        another scheduler has since replaced is no longer used."""
        refusal = self._cursor.refusal
        if refusal is None or self._parents:
            return
        held = [self._read(index) for index in self._targets]
        if all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(held, self._cursor.last)):
            raise UsageError(refusal)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_composed_by", None)  # weak references: each parent links its children again as it loads
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_updates", 0)  # a scheduler pickled by an earlier release
        self.__dict__.setdefault("_warned_of_skipped_updates", False)
        for name, value in state.items():
            if name[0] != "_":
                for child in _schedulers_in(value):
                    child._link(self)
        self._watch_updates()  # a pickled optimizer keeps no hooks

    def _refill(self, step: int) -> list[float]:
        self._set_block(step, self._value_at(range(step, step + _BLOCK)))
        self._cursor.refusal = self._refusal(0)
        return self._cursor.block[0]

    def _write(self, row: list[float]) -> None:
        self._cursor.last = row
        groups = self.optimizer.param_groups
        key = self.param_group_key
        for index, value in zip(self._targets, row):
            group = groups[index]
            held = group.get(key)
            # A tensor the group holds (Adam(params, lr=torch.tensor(...)), or one torch's LambdaLR left
            # there) is filled in place, as torch's schedulers fill it: a compiled step or the user may hold
            # it. Its dtype and device stay.
            if isinstance(held, Tensor):
                if any(other is not group and other.get(key) is held for other in groups):
                    # the optimizer's default, shared by groups: this group's value must not change theirs
                    held = group[key] = held.clone()
                held.fill_(value)
            elif self._tensor_values:
                group[key] = torch.tensor(value, dtype=torch.float32, device=_group_device(group))
            else:
                group[key] = value

    def _read(self, index: int) -> float:
        """The value param group ``index`` holds where ``_write`` writes it (a tensor value read as a float)."""
        return float(self.optimizer.param_groups[index][self.param_group_key])

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name[0] != "_" and name != "last_epoch":
            for child in _schedulers_in(value):
                child._link(self)
            self._changed()

    def _link(self, parent: Scheduler) -> None:
        """``parent`` composes this schedule. Held weakly: a composite thrown away (one whose construction
        failed, one made for a table) no longer claims it."""
        links = self.__dict__.setdefault("_composed_by", [])
        if not any(link() is parent for link in links):
            links.append(weakref.ref(parent))

    def _changed(self) -> None:
        """An argument changed: the precomputed rows of this schedule, and of every schedule
        composing it, are stale (each recomputes them at its next step)."""
        cursor = self.__dict__.get("_cursor")
        if cursor is not None:
            cursor.block = []
        self.__dict__.pop("_checked_steps", None)
        for parent in self._parents:
            parent._changed()

    @property
    def _parents(self) -> list[Scheduler]:
        """The schedulers alive that compose this one (set as their arguments)."""
        return [parent for link in self.__dict__.get("_composed_by", []) if (parent := link()) is not None]

    # -- public API ---------------------------------------------------------------------

    def step(self, epoch: int | None = None) -> None:
        """Advance one optimizer step and write the new value into the param groups.

        Args:
            epoch: deprecated, as in torch: jump to this step instead (torch's closed-form
                meaning of ``step(epoch)``), with torch's deprecation warning.
        """
        if self._parents:  # its values would replace the parent's, unchecked and unreported
            name, parent = type(self).__name__, type(self._parents[0]).__name__
            raise UsageError(
                f"{name}.step(): this {name} is composed into a {parent}, which computes its values from "
                f"its own step; fix: step the {parent} only"
            )
        self._adopt_new_groups()
        self._warn_of_skipped_updates()
        if epoch is None:
            self._jump(self._cursor.step + 1)
            return
        warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._jump(_checks.integer(type(self).__name__, "epoch", epoch, 0))

    def _warn_of_skipped_updates(self) -> None:
        """Warn, once, of a step() after several optimizer steps: Lightning steps a scheduler returned without
        a config once per epoch, and nothing else would show that the schedule runs that many times slower."""
        updates, self._updates = self._updates, 0
        if updates < 2 or self._warned_of_skipped_updates:
            return
        self._warned_of_skipped_updates = True
        warnings.warn(
            f"{type(self).__name__}.step() came after {updates} optimizer steps, but a Cerebras schedule "
            f"counts optimizer steps: it runs {updates} times slower than written; step it after every "
            "optimizer step (in Lightning, return lightning_config(scheduler) from configure_optimizers: a "
            "scheduler returned without a config is stepped once per epoch), or, if its steps are meant to "
            "be epochs, filter out EpochSteppingWarning",
            EpochSteppingWarning,
            stacklevel=3,
        )

    def _expect_skipped_updates(self) -> None:
        """No `EpochSteppingWarning`: a Lightning config asks for steps each epoch (or every few batches)."""
        self._warned_of_skipped_updates = True

    def _jump(self, step: int) -> None:
        """Go to ``step`` and write its values (from the precomputed block when it holds them)."""
        cursor = self._cursor
        index = step - cursor.start
        fresh = 0 <= index < len(cursor.block)
        if fresh:
            cursor.refusal = self._refusal(index)
        row = cursor.block[index] if fresh else self._refill(step)
        cursor.step = step
        self._write(row)

    def values(self, steps: int | Iterable[int] | Tensor) -> Tensor:
        """The schedule at many steps at once, changing nothing.

        Args:
            steps: step indices (a 1-D int tensor, a range or a list), or an int ``n`` for
                ``range(n)``.

        Returns:
            A tensor of shape ``(len(steps), len(optimizer.param_groups))``, float32 (the
            compute dtype: float64 for a scheduler converted from torch's); groups this
            scheduler does not target hold nan.
        """
        return evaluation.values(self, steps)

    def _set_dtype(self, dtype: torch.dtype) -> None:
        """Compute this schedule (and every schedule it composes) in ``dtype`` (float32 or
        float64), from now on; the new values are written into the param groups."""
        tree = list(_tree(self))
        for scheduler in tree:
            scheduler._dtype = dtype
        for scheduler in tree:  # a parent's values need its children in dtype already
            scheduler._cursor.last = scheduler._refill(scheduler._cursor.step)
        self._write(self._cursor.last)

    def set_tensor_values(self, enabled: bool) -> None:
        """Hold each targeted value as a 0-d float32 tensor updated in place (for compiled
        steps: no recompiles as it changes), or, by default, as a Python float (a tensor a group
        already holds stays that tensor, filled in place, as torch's schedulers fill it)."""
        self._tensor_values = _checks.flag(type(self).__name__, "enabled", enabled)
        if not self._tensor_values:  # floats again: a tensor held now would otherwise be filled in place
            for index in self._targets:
                group = self.optimizer.param_groups[index]
                group[self.param_group_key] = float(group[self.param_group_key])
        self._write(self._cursor.last)

    def get_last_value(self) -> list[float | None]:
        """The values written last, one per param group (None where not targeted)."""
        out: list[float | None] = [None] * len(self.optimizer.param_groups)
        for index, value in zip(self._targets, self._cursor.last):
            out[index] = value
        return out

    def get_last_lr(self) -> list[float | None]:  # type: ignore[override]  # None: a group not scheduled
        """torch's name for ``get_last_value``."""
        return self.get_last_value()

    def get_lr(self) -> list[float | None]:  # type: ignore[override]  # None: a group not scheduled
        """The current values (closed-form schedulers have no separate 'next' value)."""
        return self.get_last_value()

    def state_dict(self) -> dict[str, Any]:
        """The step and the arguments (nested schedulers as their own state dicts)."""
        state: dict[str, Any] = {"last_epoch": self._cursor.step}
        for name in _saved_fields(self):
            state[name] = _to_state(getattr(self, name))
        if self._own_scales:  # param groups that joined later, following the schedule from their own value
            state[_GROUP_SCALES] = dict(self._own_scales)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume exactly where ``state_dict`` was taken; ``state_dict`` is not modified.

        Its arguments replace this scheduler's, as in torch and cerebras.pytorch 2.10; a warning
        names those that change (a config edited before resuming does not take effect)."""
        configured = self.state_dict()
        self._load_state(state_dict)
        self._write(self._cursor.last)
        if self._step_of_foreign_state(state_dict) is None:
            changes = _changed_arguments(configured, state_dict)
            if changes:
                warnings.warn(
                    f"{type(self).__name__}.load_state_dict: the checkpoint's arguments differ from the "
                    f"configured ones ({', '.join(changes)}, configured -> checkpoint); the checkpoint's "
                    "values are used",
                    UserWarning,
                    stacklevel=2,
                )

    def _step_of_foreign_state(self, state_dict: dict[str, Any]) -> int | None:
        """The step in a state dict of another format that this scheduler resumes from
        (only its step is read), or None. None here; a scheduler converted from torch's
        reads the torch scheduler's state dict (a checkpoint from before the switch)."""
        return None

    def _load_state(self, state_dict: dict[str, Any]) -> None:
        """``load_state_dict`` without writing into the param groups: a composite loads its
        children this way, so they do not replace the values (tensors) it holds there."""
        owner = type(self).__name__
        step = self._step_of_foreign_state(state_dict)
        if step is None:
            expected = {"last_epoch", *_saved_fields(self)}
            if state_keys(state_dict) != expected:
                raise UsageError(
                    f"{owner}.load_state_dict: got keys {sorted(state_dict)}, expected "
                    f"{sorted(expected)} (a state dict from another scheduler class?)"
                )
            scales = self._saved_group_scales(state_dict)
            for name in expected - {"last_epoch"}:
                _load_field(self, name, state_dict[name])
            self._own_scales = scales
            self._seen = max([self._bound, *(index + 1 for index in scales)])  # a later group joins at next step
            self._bind_groups()
            step = state_dict["last_epoch"]
        step = _checks.integer(owner, "last_epoch", step, 0)
        self._cursor = _Cursor(step)
        self._cursor.last = self._refill(step)
        self._updates = 0  # the optimizer steps of a run resumed (or of an LR finder's trial undone) are not due

    def _saved_group_scales(self, state_dict: Mapping[str, Any]) -> dict[int, float]:
        """The scales of the param groups that joined the saved run later (see `_rebase`), each to follow the
        schedule from its own value again: refused, before anything is loaded, when the optimizer lacks one."""
        scales = {int(index): float(scale) for index, scale in state_dict.get(_GROUP_SCALES, {}).items()}
        groups = len(self.optimizer.param_groups)
        missing = sorted(index for index in scales if index >= groups)
        if missing:
            raise UsageError(
                f"{type(self).__name__}.load_state_dict: the state schedules param_groups[{missing[0]}], which "
                f"joined the saved run later, but the optimizer has {groups} param group(s); fix: add the "
                "groups to the optimizer before loading"
            )
        return scales


class _PendingForm(Scheduler):
    """A built-in schedule whose closed form (``_closed_form``) may leave its last operations
    to whoever keeps its value: ``values()`` then runs them straight into the tensor it returns
    (see ``evaluation.Pending``). Its ``_get_closed_form`` gives that value as a tensor, for a
    subclass that overrides it and calls ``super()``."""

    def _closed_form(self) -> Value:
        raise NotImplementedError

    def _get_closed_form(self) -> Tensor:
        return evaluation.as_tensor(self._closed_form())

    def _value(self) -> Value:
        if type(self)._get_closed_form is not _PendingForm._get_closed_form:  # a subclass's own closed form
            return self._get_closed_form()
        return self._closed_form()


class LRScheduler(Scheduler):
    """A closed-form schedule of the learning rate (``param_group["lr"]``).

    Subclass it for a schedule of your own, as ``Scheduler`` says: store each argument under its
    own name, before calling ``super().__init__()``, and override ``_get_closed_form()``."""

    param_group_key: ClassVar[str] = "lr"


class WeightDecayScheduler(Scheduler):
    """A closed-form schedule of the weight decay (``param_group["weight_decay"]``).

    Subclass it for a schedule of your own, as ``Scheduler`` says: store each argument under its
    own name, before calling ``super().__init__()``, and override ``_get_closed_form()``."""

    param_group_key: ClassVar[str] = "weight_decay"
    _group_needs = ("weight_decay",)
    _optimizers_with_them = "SGD, Adam, AdamW"


class MomentumScheduler(Scheduler):
    """A closed-form schedule of the momentum: ``param_group["momentum"]`` (SGD, RMSprop), or
    ``betas[0]`` in groups that have betas and no momentum (Adam's beta1), as torch's
    OneCycleLR and CyclicLR cycle it. Values are Python floats (``set_tensor_values`` is
    refused: torch optimizers take betas as floats)."""

    param_group_key: ClassVar[str] = "momentum"
    _group_needs = ("momentum", "betas")
    _optimizers_with_them = "SGD, RMSprop, Adam, AdamW"

    def _bind_groups(self) -> None:
        super()._bind_groups()
        self._check_beta1_arguments()

    def _check_beta1_arguments(self) -> None:
        """Refuse a value argument >= 1 where it becomes an Adam-family beta1: torch's Adam refuses
        ``betas[0] >= 1`` when built, but takes one a scheduler writes, then divides by ``1 - beta1**step``
        (ZeroDivisionError at 1, a diverging run above). SGD and RMSprop take a momentum >= 1: so is it here."""
        groups = self.optimizer.param_groups
        betas = [index for index in self._targets if "momentum" not in groups[index]]
        if not betas:
            return
        for name in sorted(_VALUE_ARGUMENTS & vars(self).keys()):
            value = vars(self)[name]
            if any(v >= 1 for v in (value if isinstance(value, list) else [value])):
                public = _public_name(type(self), name)
                raise UsageError(
                    f"{type(self).__name__}: got {public}={value!r}, {self._beta1_rule(betas[0])} (its step "
                    f"divides by 1 - beta1**step); fix: give {public} < 1 (e.g. 0.95), or schedule the momentum "
                    "of an optimizer that has one (SGD, RMSprop)"
                )

    def _beta1_rule(self, index: int) -> str:
        optimizer = type(self.optimizer).__name__
        return (
            f"which becomes beta1 (betas[0]) of {optimizer}'s param_groups[{index}]; torch's {optimizer} "
            "needs 0 <= beta1 < 1"
        )

    def _bounds(self) -> list[float]:
        """Below 1 in a group with betas: a beta1 computed past its arguments' values (a final_div_factor < 1, an
        exp_range gamma > 1) must not reach an update either."""
        groups = self.optimizer.param_groups
        return [math.inf if "momentum" in groups[index] else 1.0 for index in self._targets]

    def _rule(self, position: int, value: float) -> str:
        index = self._targets[position]
        if value >= 1 and "momentum" not in self.optimizer.param_groups[index]:
            return f", {self._beta1_rule(index)}"
        return super()._rule(position, value)

    def _write(self, row: list[float]) -> None:
        self._cursor.last = row
        groups = self.optimizer.param_groups
        for index, value in zip(self._targets, row):
            group = groups[index]
            if "momentum" in group:
                group["momentum"] = value
            else:
                group["betas"] = (value, *group["betas"][1:])

    def _read(self, index: int) -> float:
        group = self.optimizer.param_groups[index]
        return float(group["momentum"] if "momentum" in group else group["betas"][0])

    def set_tensor_values(self, enabled: bool) -> None:
        if _checks.flag(type(self).__name__, "enabled", enabled):
            raise UsageError(
                f"{type(self).__name__}.set_tensor_values: got enabled=True; momentum "
                "values stay Python floats (torch optimizers take betas as floats)"
            )


def lightning_config(scheduler: Scheduler, **overrides: Any) -> dict[str, Any]:
    """Lightning's scheduler config for a closed-form scheduler: step every optimizer step.

    A closed-form schedule counts optimizer steps (its lengths are in steps), while
    Lightning steps a bare scheduler once per epoch; ``configure_optimizers`` can return
    ``{"optimizer": opt, "lr_scheduler": lightning_config(s)}``. ``overrides`` (e.g.
    ``name=...``) are added to the config.
    """
    if not isinstance(scheduler, _TorchLRScheduler):
        raise UsageTypeError(
            f"lightning_config(scheduler=...) got {type(scheduler).__name__}, not a scheduler; pass the scheduler"
            " made on the optimizer, e.g. lightning_config(LinearLR(optimizer, ...))"
        )
    frequency = overrides.get("frequency", 1)
    if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
        raise UsageError(
            f"lightning_config(frequency={frequency!r}): the scheduler steps every `frequency` optimizer steps,"
            " a whole number >= 1; leave it out to step every step (frequency=1)"
        )
    return {"scheduler": scheduler, "interval": "step", "frequency": 1, **overrides}


def _has_closed_form(cls: type[Scheduler]) -> bool:
    return cls._get_closed_form is not Scheduler._get_closed_form or hasattr(cls, "_get_closed_form_lr")


def every(period: int, stop: int) -> list[int]:
    """Breakpoints every ``period`` steps below ``stop``: ``[period, 2 period, ...]``, capped."""
    return list(range(period, min(stop, period * (MAX_BREAKPOINTS + 2)), period))


def _group_device(group: dict) -> torch.device:
    params = group.get("params") or []
    return params[0].device if params else torch.device("cpu")


def _tree(scheduler: Scheduler) -> Iterator[Scheduler]:
    """A scheduler and, depth first, every scheduler among its arguments."""
    yield scheduler
    for name in _state_fields(type(scheduler)):
        for child in _schedulers_in(getattr(scheduler, name, None)):
            yield from _tree(child)


@functools.cache
def _public_name(cls: type, name: str) -> str:
    """``initial_learning_rate`` for ``initial_val`` on an LR class; ``name`` otherwise."""
    for klass in cls.__mro__:
        for attribute, value in vars(klass).items():
            if isinstance(value, _Alias) and value.target == name:
                return attribute
    return name


@functools.cache
def _state_fields(cls: type) -> tuple[str, ...]:
    """The constructor's argument names, which ``state_dict`` saves under the same names."""
    skip = {"self", "optimizer", "last_epoch"}
    return tuple(
        name
        for name, parameter in inspect.signature(cls).parameters.items()
        if name not in skip and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    )


def _saved_fields(scheduler: Scheduler) -> list[str]:
    """Arguments the instance keeps under their own name, except functions."""
    return [
        name
        for name in _state_fields(type(scheduler))
        if hasattr(scheduler, name) and _is_state(getattr(scheduler, name))
    ]


def _is_scheduler_list(value: Any) -> TypeGuard[list[Scheduler] | tuple[Scheduler, ...]]:
    """Whether an argument is a non-empty list (or tuple) of schedulers, such as SequentialLR's ``schedulers``."""
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(item, Scheduler) for item in value)


def _schedulers_in(value: Any) -> Sequence[Scheduler]:
    """The schedulers an argument holds: itself, its items, or none."""
    return [value] if isinstance(value, Scheduler) else value if _is_scheduler_list(value) else []


def _is_state(value: Any) -> bool:
    """Arguments worth saving: data and nested schedulers, not functions."""
    return isinstance(value, Scheduler) or _is_scheduler_list(value) or not callable(value)


@functools.cache
def _function_arguments(cls: type) -> frozenset[str]:
    """The constructor arguments of ``cls`` that may hold a function, so that a state of ``cls`` may leave
    them out (see `_is_state`), as far as the class tells without an instance: those annotated as a callable
    (or a union with one). An argument without an annotation counts as data: taking it for a possible
    function would let a state match every class whose other arguments it has."""
    try:
        parameters = inspect.signature(cls, eval_str=True).parameters
    except (NameError, AttributeError, TypeError, SyntaxError):  # an annotation only a type checker reads
        return frozenset()
    return frozenset(name for name in _state_fields(cls) if _admits_a_function(parameters[name].annotation))


def _admits_a_function(annotation: Any) -> bool:
    """Whether an argument annotated ``annotation`` may be given a function."""
    if annotation is Any or annotation is Callable:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_admits_a_function(member) for member in typing.get_args(annotation))
    return origin is Callable


def _to_state(value: Any) -> Any:
    if isinstance(value, Scheduler):
        return value.state_dict()
    if _is_scheduler_list(value):
        return [child.state_dict() for child in value]
    if isinstance(value, set):
        return sorted(value, key=str)
    return copy.deepcopy(value)


def _load_field(scheduler: Scheduler, name: str, saved: Any) -> None:
    current = getattr(scheduler, name)
    if isinstance(current, Scheduler):
        current._load_state(saved)
    elif _is_scheduler_list(current):
        if len(saved) != len(current):
            raise UsageError(
                f"{type(scheduler).__name__}.load_state_dict: got {len(saved)} states for "
                f"{name}, which has {len(current)} schedulers"
            )
        for child, child_state in zip(current, saved):
            child._load_state(child_state)
    elif name == "param_group_tags":
        scheduler.param_group_tags = _tag_set(type(scheduler).__name__, saved)
    else:
        setattr(scheduler, name, copy.deepcopy(saved))


def state_keys(state: Mapping[str, Any]) -> set[str]:
    """The keys of a scheduler state that its class decides, the step and the arguments: not the scales of the
    param groups that joined later, which a state of any class may hold."""
    return set(state) - {_GROUP_SCALES}


def _changed_arguments(configured: Mapping[str, Any], loaded: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``name=configured -> loaded`` for each argument, nested ones by their path (``schedulers[1].total_iters``),
    that differs between two state dicts of one scheduler (the step is not an argument)."""
    changes = []
    for name, old in configured.items():
        if name in ("last_epoch", _GROUP_SCALES):  # where the run is, not what was configured
            continue
        new = loaded[name]
        if isinstance(old, Mapping):
            changes += _changed_arguments(old, new, f"{prefix}{name}.")
        elif isinstance(old, list) and old and all(isinstance(item, Mapping) for item in old):
            for index, (child, child_new) in enumerate(zip(old, new)):
                changes += _changed_arguments(child, child_new, f"{prefix}{name}[{index}].")
        elif not _equal(old, new):
            changes.append(f"{prefix}{name}={old!r} -> {new!r}")
    return changes


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # arrays and tensors of several values have no truth value
        return False
