"""Stock ``torch.optim.lr_scheduler`` instances -> closed-form cs_lightning schedulers.

An existing Lightning project returns torch schedulers from ``configure_optimizers``.
Under ``strategy="csx"`` closed-form equivalents from this package's catalogue, built on the
same optimizer and at the same step, drive them (`drive`): the user's object stays, and the
learning rates are the ones torch's own stepping gives. For a plain PyTorch loop,
`convert_scheduler` returns the closed-form scheduler itself. Torch computes in float64 and
so do the converted schedules (the catalogue's own float32 would lose up to 1e-2 relative where a schedule nears 0, by
cancellation in ``1 + cos``).

Converted: StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR, PolynomialLR,
ConstantLR, OneCycleLR and CyclicLR (their momentum cycling too, by `drive`),
CosineAnnealingWarmRestarts, SequentialLR, ChainedScheduler, LambdaLR whose function works
on a step tensor, and MultiplicativeLR whose factor does not change with the step.
Everything else (ReduceLROnPlateau, Python-only lambdas, custom classes)
is not convertible: `convert_scheduler` says why in one warning and the torch scheduler
keeps running on the host, or, with ``strict=True``, raises `NotConvertible`.

Param groups with different base learning rates are handled by scaling one schedule per
group (`GroupScaledLR`) where torch's schedule is proportional to the base rate.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.optim import lr_scheduler as torch_lr

from cs_lightning import schedulers as cs
from cs_lightning.errors import NotConvertible, UsageError
from cs_lightning.schedulers import _checks
from cs_lightning.schedulers.base import Scheduler


def _once_per_job(name: str, fallback: Callable[..., None]) -> Callable[..., None]:
    """Lightning's ``rank_zero_<name>`` says it once per job, not once per rank; the schedulers work without
    Lightning, with ``fallback``."""
    try:
        from lightning.pytorch import utilities
    except ImportError:
        return fallback
    return getattr(utilities, f"rank_zero_{name}")


_info = _once_per_job("info", logging.getLogger(__name__).info)
_warn = _once_per_job("warn", warnings.warn)

# Relative difference between a group's value and the one the closed form wrote beyond which
# someone else set it (a float written and read back is equal; a tensor lr holds float32).
_ROUNDING = 1e-6
# The absolute one, for values near 0, where torch's recursive forms and the closed ones part in relative terms.
_ROUNDING_NEAR_0 = 1e-12
# Steps at which a MultiplicativeLR factor is probed for being constant.
_PROBE_STEPS = 256


class HostSchedulerWarning(UserWarning):
    """A torch scheduler stays on the host (not closed form) under the csx strategy."""


class GroupScaledLR(cs.ScalePerParamLR):
    r"""A schedule scaled by a given factor per param group.

    .. math:: v_{k,g} = s_g \, f(k)

    :math:`f` = ``scheduler``, :math:`s_g` = ``scales[g]``. ScalePerParamLR reads its
    factors from the param groups; this takes them as an argument, so converting a torch
    scheduler whose groups have different base learning rates leaves the groups untouched.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, scheduler: Scheduler, scales: Sequence[float]) -> None:
        self.scales = _checks.numbers("GroupScaledLR", "scales", scales)
        if len(self.scales) != len(optimizer.param_groups):
            raise UsageError(
                f"GroupScaledLR: got scales={self.scales} for {len(optimizer.param_groups)} param groups; "
                "give one per group"
            )
        super().__init__(optimizer, scheduler)

    def _group_scales(self) -> list[float]:
        return [self.scales[index] for index in self._targets]


class _Plan:
    """A conversion before it is built: a spec per class, and one scale per param group."""

    def __init__(
        self, name: str, args: dict[str, Any], scales: list[float], children: list[_Plan] | None = None
    ) -> None:
        self.name, self.args, self.scales, self.children = name, args, scales, children or []
        self.momentum: _Plan | None = None  # the momentum's schedule, when torch's cycles it too

    def describe(self) -> str:
        args = {k: v for k, v in self.args.items() if not callable(v)}
        inner = ", ".join(f"{k}={_short(v)}" for k, v in args.items())
        children = ", ".join(child.describe() for child in self.children)
        body = ", ".join(part for part in (f"[{children}]" if children else "", inner) if part)
        return f"{self.name}({body})"

    def build(self, optimizer: torch.optim.Optimizer) -> Scheduler:
        """The cs_lightning scheduler (unscaled: `convert_scheduler` adds the group scales)."""
        cls = getattr(cs, self.name)
        if self.name == "ChainedScheduler":
            return cls([child.build(optimizer) for child in self.children])
        if self.name == "SequentialLR":
            return cls(optimizer, [child.build(optimizer) for child in self.children], **self.args)
        return cls(optimizer, **self.args)


def _short(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


# ---------------------------------------------------------------------------- per class


def _bases(scheduler: torch_lr.LRScheduler) -> list[float]:
    return [float(b) for b in scheduler.base_lrs]


def _proportional(bases: Sequence[float], why: str | None) -> list[float]:
    """Per-group scales relative to group 0; `why` says what breaks proportionality, if anything."""
    if all(b == bases[0] for b in bases):
        return [1.0] * len(bases)
    if why is not None:
        raise NotConvertible(
            f"its param groups start from different learning rates {list(bases)} "
            f"and {why}, so no one schedule scales to every group"
        )
    if bases[0] == 0:
        raise NotConvertible(f"param group 0 has base learning rate 0, so groups {list(bases)} are not multiples of it")
    return [b / bases[0] for b in bases]


def _plain(name: str, scheduler: Any, args: Callable[[float], dict[str, Any]], why: str | None = None) -> _Plan:
    """One catalogue class, its arguments computed from group 0's base learning rate."""
    bases = _bases(scheduler)
    return _Plan(name, args(bases[0]), _proportional(bases, why))


def _step(s: torch_lr.StepLR) -> _Plan:
    return _plain("StepLR", s, lambda b: {"initial_learning_rate": b, "step_size": s.step_size, "gamma": s.gamma})


def _multistep(s: torch_lr.MultiStepLR) -> _Plan:
    if any(count > 1 for count in s.milestones.values()):
        raise NotConvertible(f"a milestone repeats ({dict(s.milestones)}), multiplying by gamma more than once there")
    return _plain(
        "MultiStepLR", s, lambda b: {"initial_learning_rate": b, "gamma": s.gamma, "milestones": sorted(s.milestones)}
    )


def _geometric(b: float, gamma: float) -> dict[str, Any]:
    r"""ExponentialLR arguments for :math:`b\,\gamma^k`."""
    return {"initial_learning_rate": b, "total_iters": 1, "decay_rate": gamma}


def _exponential(s: torch_lr.ExponentialLR) -> _Plan:
    return _plain("ExponentialLR", s, lambda b: _geometric(b, s.gamma))


def _cosine(s: torch_lr.CosineAnnealingLR) -> _Plan:
    return _plain(
        "CosineAnnealingLR",
        s,
        lambda b: {"initial_learning_rate": b, "T_max": s.T_max, "eta_min": float(s.eta_min)},
        f"eta_min={s.eta_min} is not 0" if s.eta_min else None,
    )


def _warm_restarts(s: torch_lr.CosineAnnealingWarmRestarts) -> _Plan:
    return _plain(
        "CosineAnnealingWarmRestarts",
        s,
        lambda b: {"initial_learning_rate": b, "T_0": s.T_0, "T_mult": s.T_mult, "eta_min": float(s.eta_min)},
        f"eta_min={s.eta_min} is not 0" if s.eta_min else None,
    )


def _linear(s: torch_lr.LinearLR) -> _Plan:
    return _plain(
        "LinearLR",
        s,
        lambda b: {
            "initial_learning_rate": b * s.start_factor,
            "end_learning_rate": b * s.end_factor,
            "total_iters": s.total_iters,
        },
    )


def _polynomial(s: torch_lr.PolynomialLR) -> _Plan:
    return _plain(
        "PolynomialLR",
        s,
        lambda b: {
            "initial_learning_rate": b,
            "end_learning_rate": 0.0,
            "total_iters": s.total_iters,
            "power": float(s.power),
        },
    )


def _constant(s: torch_lr.ConstantLR) -> _Plan:
    if s.total_iters == 0:  # torch's stepping applies the factor at step 0 and never undoes it
        return _plain("ConstantLR", s, lambda b: {"learning_rate": b * s.factor})
    return _plain(
        "PiecewiseConstantLR", s, lambda b: {"learning_rates": [b * s.factor, b], "milestones": [s.total_iters]}
    )


def _same_function(functions: Sequence[Callable[..., Any]]) -> Callable[..., Any]:
    if any(f is not functions[0] for f in functions):
        raise NotConvertible("its param groups have different lr_lambda functions")
    return functions[0]


def _lambda(s: torch_lr.LambdaLR) -> _Plan:
    given = _same_function(s.lr_lambdas)
    function = _in_torchs_dtype(given)
    try:
        function(torch.arange(_PROBE_STEPS, dtype=torch.float64))
    except Exception as err:  # noqa: BLE001 - any failure of the user's function means: Python-only
        # said here, of the user's function: the catalogue's own check would speak of its internals
        raise NotConvertible(
            f"its lr_lambda, {_function_name(given)}, does not work on a tensor of steps ({err}). A closed form"
            " calls it once with all the steps, so it must use torch ops on its argument (torch.minimum,"
            " torch.where), not Python's min/max/if/int(). Rewrite it so, or use a cs_lightning scheduler"
            " (e.g. cs_lightning.schedulers.LinearLR for a warmup), or let the torch LambdaLR step on the host"
            " (strict_schedulers=False, the default)"
        ) from None
    return _plain("LambdaLR", s, lambda b: {"initial_learning_rate": b, "lr_lambda": function})


def _function_name(function: Callable[..., Any]) -> str:
    """``the lambda at train.py:12`` / ``warmup (train.py:12)``: how the user finds the function they wrote."""
    code = getattr(function, "__code__", None)
    if code is None:
        return repr(function)
    where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    name = getattr(function, "__qualname__", code.co_name)
    return f"the lambda at {where}" if name.endswith("<lambda>") else f"{name} ({where})"


def _in_torchs_dtype(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The function, computing in the dtype torch's LambdaLR computes it in.

    torch calls it with an int step: Python arithmetic then computes in float64 (as the
    converted schedule does: it hands its function float64 steps), but torch ops in the
    default dtype, usually float32. So a function whose value at an int step is a float32
    tensor gets int64 steps here, and computes in the default dtype as in torch.
    """
    try:
        value = function(1)
    except Exception:  # noqa: BLE001 - the user's function is Python-only: the closed-form check says why
        return function
    if not (isinstance(value, torch.Tensor) and value.dtype == torch.float32):
        return function

    @functools.wraps(function)
    def in_float32(steps: torch.Tensor) -> torch.Tensor:
        return function(steps.to(torch.int64))

    return in_float32


def _multiplicative(s: torch_lr.MultiplicativeLR) -> _Plan:
    """A constant factor only: one value for a whole tensor of steps (a function that ignores
    the step), the same one each step gets alone. A factor computed from the step tensor
    could change at any later step, which no probe can rule out."""
    factor = _same_function(s.lr_lambdas)
    try:
        on_tensor = torch.as_tensor(factor(torch.arange(1, _PROBE_STEPS + 1)), dtype=torch.float64)
        on_ints = [float(factor(k)) for k in range(1, _PROBE_STEPS + 1)]
    except Exception as err:  # noqa: BLE001 - any failure of the user's function means: Python-only
        raise NotConvertible(f"its lr_lambda does not work on a tensor of steps ({err})") from None
    if on_tensor.ndim or any(value != float(on_tensor) for value in on_ints):
        raise NotConvertible(
            "its factor changes with the step, and a running product of "
            "step-dependent factors has no closed form; use LambdaLR with the "
            "product written out"
        )
    return _plain("ExponentialLR", s, lambda b: _geometric(b, on_ints[0]))


def _momentum_bounds(s: Any, highs: Sequence[Any], lows: Sequence[Any]) -> tuple[float, float] | None:
    """``(max_momentum, base_momentum)`` when the scheduler cycles the momentum, else None."""
    if not s.cycle_momentum:
        return None
    highs, lows = [float(m) for m in highs], [float(m) for m in lows]
    if len(set(highs)) > 1 or len(set(lows)) > 1:
        raise NotConvertible(
            f"it cycles the momentum between bounds that differ per param group "
            f"(max_momentum {highs}, base_momentum {lows}), so no one schedule fits every group"
        )
    return highs[0], lows[0]


def _cyclic(s: torch_lr.CyclicLR) -> _Plan:
    if s._scale_fn_custom is not None:
        raise NotConvertible("it has a custom scale_fn (a Python function of the cycle)")
    up = round(s.total_size * s.step_ratio)
    down = round(s.total_size) - up
    bases, peaks = _bases(s), [float(m) for m in s.max_lrs]
    same_shape = all(math.isclose(p * bases[0], peaks[0] * b, rel_tol=1e-12) for b, p in zip(bases, peaks))
    scales = _proportional(bases, None if same_shape else f"max_lr/base_lr differs per group {peaks}")
    cycle = {"step_size_up": up, "step_size_down": down, "mode": s.mode, "gamma": float(s.gamma)}
    plan = _Plan("CyclicLR", {"base_lr": bases[0], "max_lr": peaks[0], **cycle}, scales)
    momentum = _momentum_bounds(s, getattr(s, "max_momentums", []), getattr(s, "base_momentums", []))
    if momentum is not None:  # against the learning rate: from max_momentum down to base_momentum
        plan.momentum = _Plan(
            "CyclicMomentum", {"base_val": momentum[0], "max_val": momentum[1], **cycle}, [1.0] * len(bases)
        )
    return plan


def _one_cycle(s: torch_lr.OneCycleLR) -> _Plan:
    groups = s.optimizer.param_groups
    phases = s._schedule_phases
    peaks = [float(g["max_lr"]) for g in groups]
    scales = _proportional(peaks, None)
    shape = {
        "total_steps": s.total_steps,
        "pct_start": (phases[0]["end_step"] + 1) / s.total_steps,
        "three_phase": len(phases) == 3,
        "anneal_strategy": s._anneal_func_type,
    }
    plan = _Plan(
        "OneCycleLR",
        {
            "initial_learning_rate": float(groups[0]["initial_lr"]),
            "max_lr": peaks[0],
            "final_div_factor": float(groups[0]["initial_lr"]) / float(groups[0]["min_lr"]),
            **shape,
        },
        scales,
    )
    momentum = _momentum_bounds(s, [g.get("max_momentum") for g in groups], [g.get("base_momentum") for g in groups])
    if momentum is not None:  # max_momentum -> base_momentum -> max_momentum (and stays, in a third phase)
        plan.momentum = _Plan(
            "OneCycleMomentum",
            {"initial_val": momentum[0], "max_val": momentum[1], "final_div_factor": 1.0, **shape},
            [1.0] * len(groups),
        )
    return plan


def _without_momentum(children: list[_Plan]) -> None:
    for index, child in enumerate(children):
        if child.momentum is not None:
            raise NotConvertible(
                f"schedulers[{index}] ({child.name}) also cycles the momentum, which "
                "a composed schedule does not convert; pass it cycle_momentum=False"
            )


def _common_scales(children: list[_Plan]) -> list[float]:
    scales = children[0].scales
    if any(not all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(c.scales, scales)) for c in children):
        raise NotConvertible("its schedulers scale the param groups differently")
    return scales


# torch schedulers that pick up at a SequentialLR milestone from their own step 0.
_RESTART_AT_MILESTONE = (
    torch_lr.StepLR,
    torch_lr.MultiStepLR,
    torch_lr.ExponentialLR,
    torch_lr.CosineAnnealingLR,
    torch_lr.LinearLR,
    torch_lr.PolynomialLR,
    torch_lr.ConstantLR,
    torch_lr.LambdaLR,
    torch_lr.CyclicLR,
    torch_lr.OneCycleLR,
    torch_lr.CosineAnnealingWarmRestarts,
)


def _sequential(s: torch_lr.SequentialLR) -> _Plan:
    for index, child in enumerate(s._schedulers[1:], start=1):
        if not isinstance(child, _RESTART_AT_MILESTONE):
            raise NotConvertible(
                f"schedulers[{index}] ({type(child).__name__}) continues from the "
                "learning rate before its milestone instead of restarting"
            )
        if isinstance(child, torch_lr.ConstantLR) and child.total_iters == 0:
            raise NotConvertible(
                f"schedulers[{index}] (ConstantLR with total_iters=0) restarts at the "
                "full rate, which its own stepping never reaches (it keeps the factor)"
            )
    children = [_plan(child, f"schedulers[{i}]") for i, child in enumerate(s._schedulers)]
    _without_momentum(children)
    return _Plan("SequentialLR", {"milestones": list(s._milestones)}, _common_scales(children), children)


# torch schedulers whose step multiplies the current learning rate (chainable form), so
# that a chain of them is the product of their closed forms. (CosineAnnealingLR is not one:
# past T_max its recursion adds instead of multiplying.)
_MULTIPLICATIVE = (
    torch_lr.StepLR,
    torch_lr.MultiStepLR,
    torch_lr.ExponentialLR,
    torch_lr.LinearLR,
    torch_lr.PolynomialLR,
    torch_lr.ConstantLR,
    torch_lr.MultiplicativeLR,
)


def _chained(s: torch_lr.ChainedScheduler) -> _Plan:
    r"""torch multiplies :math:`b\,\prod_j f_j(k)/b`; ChainedScheduler multiplies
    :math:`f_0(k)\prod_{j\ge1} f_j(k)/f_j^{\mathrm{init}}`, so the groups' scales take the
    difference :math:`\prod_{j\ge1} f_j^{\mathrm{init}}/b`."""
    if len(s._schedulers) == 1:
        return _plan(s._schedulers[0], "schedulers[0]")
    for index, child in enumerate(s._schedulers):
        if not isinstance(child, _MULTIPLICATIVE):
            raise NotConvertible(
                f"schedulers[{index}] ({type(child).__name__}) does not just multiply "
                "the learning rate, so the chain is not a product of schedules"
            )
    children = [_plan(child, f"schedulers[{i}]") for i, child in enumerate(s._schedulers)]
    _without_momentum(children)
    correction = math.prod(
        _initial(child) / _bases(torch_child)[0] for child, torch_child in zip(children[1:], s._schedulers[1:])
    )
    scales = [scale * correction for scale in _common_scales(children)]
    return _Plan("ChainedScheduler", {}, scales, children)


def _initial(plan: _Plan) -> float:
    """The value ChainedScheduler divides a later child by: its initial argument, else f(0)."""
    args = plan.args
    if "initial_learning_rate" in args:  # ExponentialLR, also for torch MultiplicativeLR
        return args["initial_learning_rate"]
    return args["learning_rate"] if "learning_rate" in args else args["learning_rates"][0]


_CONVERTERS: dict[type, Callable[[Any], _Plan]] = {
    torch_lr.StepLR: _step,
    torch_lr.MultiStepLR: _multistep,
    torch_lr.ExponentialLR: _exponential,
    torch_lr.CosineAnnealingLR: _cosine,
    torch_lr.LinearLR: _linear,
    torch_lr.PolynomialLR: _polynomial,
    torch_lr.ConstantLR: _constant,
    torch_lr.OneCycleLR: _one_cycle,
    torch_lr.CyclicLR: _cyclic,
    torch_lr.CosineAnnealingWarmRestarts: _warm_restarts,
    torch_lr.SequentialLR: _sequential,
    torch_lr.ChainedScheduler: _chained,
    torch_lr.LambdaLR: _lambda,
    torch_lr.MultiplicativeLR: _multiplicative,
}


def _plan(scheduler: Any, where: str = "") -> _Plan:
    # exact type: a subclass may change the formula (but `drive`'s own subclass does not)
    converter = _CONVERTERS.get(type(scheduler).__bases__[0] if scheduler in _DRIVERS else type(scheduler))
    if converter is None:
        if isinstance(scheduler, torch_lr.ReduceLROnPlateau):
            raise NotConvertible("it reacts to a monitored metric, which no function of the step can")
        raise NotConvertible(f"{type(scheduler).__qualname__} is not a stock torch scheduler with a known closed form")
    try:
        return converter(scheduler)
    except NotConvertible as err:
        if not where:
            raise
        raise err.under(f"{where} ({type(scheduler).__name__})") from None


def _yaml_blocks(scheduler: Any) -> list[dict[str, Any]]:
    """The YAML scheduler blocks, in the Cerebras spelling, of the catalogue schedules that compute
    a torch scheduler's values: its learning rate's, then its momentum's if it cycles one.

    Raises `NotConvertible` when there is none, or when a block cannot say it (a schedule scaled
    per param group, a Python function).
    """
    plan = _plan(scheduler)
    if any(scale != 1.0 for scale in plan.scales):
        raise NotConvertible(f"its param groups start from different learning rates (scaled {plan.scales})")
    return [_yaml_block(part) for part in (plan, plan.momentum) if part is not None]


def _yaml_block(plan: _Plan) -> dict[str, Any]:
    if any(callable(value) for value in plan.args.values()):
        raise NotConvertible(f"its closed form, {plan.name}, takes the Python function it was given")
    args = {key: _readable(value) for key, value in plan.args.items()}
    children = [_yaml_block(child) for child in plan.children]
    return {plan.name: {"schedulers": children, **args} if children else args}


def _readable(value: Any) -> Any:
    """A float as 12 digits (``0.001``, not ``b * factor``'s ``0.0009999999999999998``): far below
    the catalogue's float32."""
    if isinstance(value, list):
        return [_readable(item) for item in value]
    return float(f"{value:.12g}") if isinstance(value, float) else value


# -------------------------------------------------------------------------------- public


def _steps_taken(scheduler: Any) -> int:
    """How many times the torch scheduler has stepped (ChainedScheduler keeps no count)."""
    if isinstance(scheduler, torch_lr.ChainedScheduler):
        return _steps_taken(scheduler._schedulers[0])
    return int(scheduler.last_epoch)


def _step_of_torch_state(keys: frozenset[str], state: dict[str, Any]) -> int | None:
    """The step of a state dict with the keys of the torch scheduler a conversion replaced
    (a checkpoint written before the switch to csx), else None. Its arguments are not read:
    the converted scheduler has them from the same ``configure_optimizers``."""
    if set(state) != keys:
        return None
    if "last_epoch" not in state:  # ChainedScheduler counts in its children
        first = state["_schedulers"][0]
        return _step_of_torch_state(frozenset(first), first)
    return state["last_epoch"]


def convert_scheduler(scheduler: Any, *, strict: bool = False) -> Scheduler | None:
    """The closed-form equivalent of a torch LR scheduler, built on its optimizer, at its step.

    Args:
        scheduler: a ``torch.optim.lr_scheduler`` instance (a cs_lightning scheduler is
            returned as is).
        strict: raise `NotConvertible` instead of warning when there is no closed form.

    Returns:
        The new scheduler, which has already written its current values into the
        optimizer's param groups (one info line says what was converted into what) and
        also resumes from the torch scheduler's state dict (its step), or
        None when the scheduler is not convertible (after one `HostSchedulerWarning`
        saying why; keep stepping the torch scheduler then). A scheduler that also cycles
        the momentum needs two closed forms: `drive` converts it, this does not.
    """
    if isinstance(scheduler, Scheduler):
        return scheduler
    converted = _convert(scheduler, strict, with_momentum=False)
    return None if converted is None else converted[0]


_CYCLED = ("lr", "momentum", "betas")  # what a conversion writes into the param groups


def _build(plan: _Plan, optimizer: torch.optim.Optimizer) -> tuple[Scheduler, Scheduler | None]:
    """The planned closed forms; a catalogue constructor refusing what torch accepted means: none.

    Constructors refuse a value with ValueError/TypeError naming it (ClosedFormError, a
    TypeError, for a function that is Python-only): that, and only that, becomes `NotConvertible`.
    """
    try:
        return plan.build(optimizer), None if plan.momentum is None else plan.momentum.build(optimizer)
    except (ValueError, TypeError) as err:
        raise NotConvertible(str(err)) from err


def _convert(
    scheduler: Any, strict: bool, with_momentum: bool, stacklevel: int = 3, site: tuple[str, int] | None = None
) -> tuple[Scheduler, Scheduler | None] | None:
    """The closed forms of a torch scheduler's learning rate and, if it cycles it, momentum. The warning when
    there are none points ``stacklevel`` frames up, or at ``site`` (file, line) when given."""
    name = type(scheduler).__name__
    groups = scheduler.optimizer.param_groups
    held = [{key: group[key] for key in _CYCLED if key in group} for group in groups]
    try:
        plan = _plan(scheduler)
        if plan.momentum is not None and not with_momentum:
            raise NotConvertible(
                "it also cycles the optimizer's momentum (cycle_momentum=True), which one "
                "learning-rate scheduler cannot do; from_torch.drive (what strategy='csx' "
                "does) converts both schedules, or pass cycle_momentum=False"
            )
        converted, momentum = _build(plan, scheduler.optimizer)
    except NotConvertible as err:
        _restore(groups, held)  # a schedule built before the failure wrote its values
        failure = err.under(f"torch {name} is not converted to a closed form")
        if strict:
            raise failure from None
        message = f"{failure}; it keeps running on the host, as under any other strategy"
        if site is None:
            warnings.warn(message, HostSchedulerWarning, stacklevel=stacklevel)
        else:  # the code that made the scheduler, which is not on the stack (configure_optimizers)
            warnings.warn_explicit(message, HostSchedulerWarning, *site)
        return None
    if any(scale != 1.0 for scale in plan.scales):
        converted = GroupScaledLR(scheduler.optimizer, converted, plan.scales)
    _restore(groups, held)  # torch's objects: a tensor lr stays the one the closed form fills
    steps = _steps_taken(scheduler)
    for closed in (converted, momentum):
        if closed is not None:
            closed._refuses_invalid = False  # torch's values, whatever they are (see Scheduler._valid_rows)
            closed._set_dtype(torch.float64)
            closed._jump(steps)
    # a per-instance hook, on purpose: this one scheduler also resumes from the torch scheduler's state dicts
    converted._step_of_foreign_state = functools.partial(  # type: ignore[method-assign]
        _step_of_torch_state, frozenset(scheduler.state_dict())
    )
    _info(
        f"cs_lightning: torch {name} converted to the closed form {plan.describe()}"
        + (f" scaled per param group by {plan.scales}" if isinstance(converted, GroupScaledLR) else "")
        + ("" if momentum is None or plan.momentum is None else f", its momentum to {plan.momentum.describe()}")
    )
    return converted, momentum


def _restore(groups: Sequence[dict[str, Any]], held: Sequence[dict[str, Any]]) -> None:
    """Put back the values (the very objects) the param groups held before a conversion built its closed forms."""
    for group, values in zip(groups, held):
        group.update(values)


# torch scheduler -> the closed forms driving it, learning rate first, then the momentum if it
# cycles one (weak: a scheduler its user drops frees its drivers)
_DRIVERS: weakref.WeakKeyDictionary[Any, list[Scheduler]] = weakref.WeakKeyDictionary()


def drive(scheduler: Any, *, strict: bool = False) -> bool:
    """Have a torch scheduler's closed-form equivalent drive it, in place.

    The user's object stays the scheduler everyone sees (``isinstance``, Lightning's
    ``lr_schedulers()``, the user's own reference), and still does torch's bookkeeping on
    each ``step()`` (``last_epoch``, ``_step_count``, children, ``step(epoch)``'s warning);
    the closed form then writes the param groups' values and ``get_last_lr()`` reads them,
    until torch's step gives other values (after a group's lr was set from outside, from a
    fractional epoch; see `_follow_torchs`): torch's steps then go on alone. A group added
    later holds torch's values.
    Its ``state_dict()`` is torch's own, so checkpoints load both ways between a plain
    Lightning run and a csx one; ``load_state_dict`` moves the closed form to the loaded step.

    Returns:
        True when a closed form drives it, False when there is none (after one
        `HostSchedulerWarning`, or `NotConvertible` with ``strict``): it runs as torch's alone.
    """
    return _drive(scheduler, strict, site=None)


def _drive(scheduler: Any, strict: bool, site: tuple[str, int] | None) -> bool:
    """`drive`; its warning (a scheduler left on the host) points at ``site`` (file, line) when given."""
    if isinstance(scheduler, Scheduler) or scheduler in _DRIVERS:
        return True
    converted = _convert(scheduler, strict, with_momentum=True, stacklevel=4, site=site)  # drive's caller
    if converted is None:
        return False
    _DRIVERS[scheduler] = [closed for closed in converted if closed is not None]
    # mypy checks a class against Hashable with its instances' __hash__ signature (python/mypy#11470)
    scheduler.__class__ = _driven(type(scheduler))  # type: ignore[arg-type]
    _follow(scheduler, _DRIVERS[scheduler])
    return True


def closed_form_of(scheduler: Any) -> Scheduler | None:
    """The closed form that computes a scheduler's learning rates: itself, its driver, or None."""
    return scheduler if isinstance(scheduler, Scheduler) else _DRIVERS.get(scheduler, [None])[0]


def _follow(scheduler: Any, drivers: list[Scheduler]) -> None:
    """Move the closed forms to the torch scheduler's step; their values become the groups' and ``_last_lr``."""
    for driver in drivers:
        driver._jump(_steps_taken(scheduler))
    _last_lr_from_groups(scheduler)


def _last_lr_from_groups(scheduler: Any) -> None:
    scheduler._last_lr = [_copy(group["lr"]) for group in scheduler.optimizer.param_groups]


def _follow_torchs(scheduler: Any, drivers: list[Scheduler], what: str) -> None:
    """``_follow``, after torch's own step or load has set the groups: when its values part from the closed
    form's, they are put back and torch's own steps take over (``what`` says where they came from). torch's
    chainable schedulers go on from whatever a group holds (each its own way: a ratio, a cosine's increment,
    nothing at a milestone), and from a fractional epoch; the closed form knows none of it."""
    groups = scheduler.optimizer.param_groups
    torchs = [{key: _copy(group[key]) for key in _CYCLED if key in group} for group in groups]
    _follow(scheduler, drivers)
    driver = drivers[0]
    for index, written in zip(driver._targets, driver._cursor.last):
        held = torchs[index]["lr"]
        if not _same(held, written):
            for group, values in zip(groups, torchs):
                for key, value in values.items():
                    _put(group, key, value)
            _last_lr_from_groups(scheduler)
            _hand_over(
                scheduler,
                f"{what} gives param_groups[{index}] lr={float(held):.8g} at step {_steps_taken(scheduler)}, "
                f"where the closed form gives {written:.8g} (the lr was set from outside, or the step is not a "
                "whole number)",
            )
            return


def _same(held: Any, written: float) -> bool:
    """Whether a group's ``held`` value is ``written`` but for rounding: a tensor lr (bfloat16, say) holds a
    value torch's step computed in its dtype, a few units in its last place from the closed form's."""
    rounding = 4 * torch.finfo(held.dtype).eps if isinstance(held, torch.Tensor) else 0.0
    return math.isclose(float(held), written, rel_tol=max(_ROUNDING, rounding), abs_tol=_ROUNDING_NEAR_0)


def _hand_over(scheduler: Any, why: str) -> None:
    """From now on the torch scheduler steps on its own, as under any other strategy (its state is complete:
    checkpoints and ``get_last_lr()`` go on as torch's)."""
    del _DRIVERS[scheduler]
    _warn(
        f"cs_lightning: torch {type(scheduler).__name__}: {why}; torch's own steps take over from here, on the "
        "host, as no closed form gives their values from there",
        category=HostSchedulerWarning,
    )


def _settings(scheduler: Any) -> str | None:
    """What the closed forms of a torch scheduler are built from (its arguments, base values, group scales)."""
    try:
        plan = _plan(scheduler)
    except NotConvertible:
        return None
    return f"{plan.describe()} {plan.scales} {plan.momentum and plan.momentum.describe()}"


def _follow_loaded(scheduler: Any, settings: str | None) -> None:
    """Follow a state dict just loaded. torch takes a checkpoint's arguments too (``T_max``, ``base_lrs``,
    ``total_steps``: a resume after editing them goes on with the checkpoint's), so closed forms built from
    other settings are built again, from the loaded ones."""
    if _settings(scheduler) != settings:
        converted = _convert(scheduler, strict=False, with_momentum=True)
        if converted is None:  # warned: torch's own steps go on
            del _DRIVERS[scheduler]
            return
        _DRIVERS[scheduler] = [closed for closed in converted if closed is not None]
    # Lightning loads the optimizer first: the groups hold the values the saved run had reached
    _follow_torchs(scheduler, _DRIVERS[scheduler], "the checkpoint")


def _copy(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _put(group: dict[str, Any], key: str, value: Any) -> None:
    """Set a param group's value as torch's schedulers do: a tensor it holds is filled in place."""
    if isinstance(group[key], torch.Tensor):
        group[key].fill_(float(value))
    else:
        group[key] = value


@functools.cache
def _driven(cls: type[torch_lr.LRScheduler]) -> type[torch_lr.LRScheduler]:
    """``cls`` with ``step`` and ``load_state_dict`` followed by the closed form (same name, same state)."""

    def step(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.step(self, *args, **kwargs)
        drivers = _DRIVERS.get(self)
        if drivers is not None:  # a group added since (BackboneFinetuning's) has torch's value: no driver writes it
            _follow_torchs(self, drivers, "torch's step")

    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        settings = _settings(self)
        cls.load_state_dict(self, state_dict)
        if self in _DRIVERS:
            _follow_loaded(self, settings)

    def __reduce_ex__(self: Any, protocol: Any) -> Any:
        # a copy or a pickle is the plain torch scheduler: the driver lives in this process only
        return _undriven, (cls, self.__dict__)

    return type(
        cls.__name__,
        (cls,),
        {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "step": step,
            "load_state_dict": load_state_dict,
            "__reduce_ex__": __reduce_ex__,
        },
    )


def _undriven(cls: type[torch_lr.LRScheduler], state: dict[str, Any]) -> Any:
    """A torch scheduler of class ``cls`` holding ``state`` (what a driven one copies or pickles into)."""
    scheduler = cls.__new__(cls)
    scheduler.__dict__.update(state)
    return scheduler


def convert_lightning_configs(
    configs: Sequence[Any], *, strict: bool = False, site: tuple[str, int] | None = None
) -> None:
    """Have closed forms drive the torch schedulers of Lightning's ``LRSchedulerConfig`` list.

    Meant for the strategy, right after Lightning has read ``configure_optimizers``
    (``trainer.strategy.lr_scheduler_configs``). Each config keeps its scheduler object,
    ``interval`` and ``frequency``: the values change exactly when the torch ones did. The warning for a
    scheduler left on the host points at ``site`` (file, line: where ``configure_optimizers`` is defined).
    """
    for config in configs:
        _drive(config.scheduler, strict, site)


__all__ = [
    "GroupScaledLR",
    "HostSchedulerWarning",
    "NotConvertible",
    "closed_form_of",
    "convert_lightning_configs",
    "convert_scheduler",
    "drive",
]
