"""The `optimizer:`, `schedulers:` and `param_groups:` blocks: checked at parse time, built into
factories that the model's `configure_optimizers` runs after materialization."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from types import MethodType
from typing import Any

import torch
from lightning.pytorch import LightningModule

from cs_lightning import param_groups
from cs_lightning import schedulers as cs_schedulers
from cs_lightning.errors import ConfigError, ParamGroupTagsError, UsageError
from cs_lightning.optimizers import OptimizerFactory, optimizer_factory
from cs_lightning.schedulers.base import _tree
from cs_lightning.schedulers.registry import named_tags

SchedulersFactory = Callable[[torch.optim.Optimizer], list]

# The steps checked (see Scheduler.check_steps) when a run has no end (max_steps: -1, max_epochs: -1)
_UNBOUNDED_STEPS = 2**62

# The fix of every line that finds no optimizer: block where one is needed
ADD_AN_OPTIMIZER = "fix: add an optimizer: block such as {AdamW: {lr: 0.001}}"


def _schedulers_factory(
    spec: Any,
    make_optimizer: OptimizerFactory,
    any_tags: bool,
    tagged: list[param_groups.TaggedGroup],
    steps: int | None,
) -> SchedulersFactory:
    """Validate a `schedulers:` block now, on a throwaway optimizer, over the run's `steps` when they are
    known (see `check_steps`); return `optimizer -> list`.

    The throwaway optimizer has the groups that the `optimizer:` and `param_groups:` blocks
    build (the untagged one unless a glob tags every parameter, one per `tagged` entry), or,
    with `any_tags` (drawing a schedule needs no model), one more group per other tag the
    block names. `build` reads both spellings and raises `ConfigError`s at the key path
    (`schedulers[0].SequentialLR...`, `schedulers[0].init_args...`).
    """
    try:
        built = cs_schedulers.build(spec, make_optimizer(probe_groups(tagged, spec, any_tags)))
    except ParamGroupTagsError as err:
        fix = (
            f"fix: use a tag of the param_groups: block ({', '.join(entry.tag for entry in tagged)}) or add an entry"
            if tagged
            else "the optimizer: block puts every parameter in one untagged group; fix: remove param_group_tags, "
            "add a param_groups: block (its entries share no parameter), or build tagged groups and these "
            "schedulers in configure_optimizers (groups that share parameters, as a Model Zoo params: list tags)"
        )
        raise err.with_fix(fix) from None
    scaling = [i for i, scheduler in enumerate(built) if _scales_per_group(scheduler)]
    if scaling and not any_tags and not tagged:
        raise ConfigError(
            ("schedulers", scaling[0]),
            "ScalePerParamLR multiplies in each param group's "
            "'adjust_learning_rate' (muP's per-layer scales), but the optimizer: block puts every "
            "parameter in one group without it, so it would scale nothing; fix: add a param_groups: "
            "block naming those parameters and their adjust_learning_rate, or build the groups and "
            "these schedulers in configure_optimizers",
        )
    if not scaling:
        _refuse_unapplied_scales(tagged)
    if steps is not None:
        check_steps(built, steps)

    def build(optimizer: torch.optim.Optimizer) -> list:
        return cs_schedulers.build(spec, optimizer)

    return build


def probe_groups(tagged: list[param_groups.TaggedGroup], spec: Any, any_tags: bool) -> list[dict[str, Any]]:
    """The groups of a throwaway optimizer for the `schedulers:` block `spec`: those the `param_groups:`
    entries `tagged` build and, with `any_tags`, one more per other tag `spec` names."""
    return param_groups.probe(tagged, named_tags(spec) if any_tags else ())


def _scales_per_group(scheduler: cs_schedulers.Scheduler) -> bool:
    """Whether a scheduler is, or composes, a ScalePerParamLR/WD."""
    scaling = (cs_schedulers.ScalePerParamLR, cs_schedulers.ScalePerParamWD)
    return any(isinstance(node, scaling) for node in _tree(scheduler))


def _refuse_unapplied_scales(tagged: list[param_groups.TaggedGroup]) -> None:
    """A group's adjust_learning_rate counts only under ScalePerParamLR: without one it would be ignored."""
    entry = param_groups.scaled_entry(tagged)
    if entry is not None:
        raise ConfigError(
            (*entry.key, "adjust_learning_rate"),
            f"{entry.scale} is multiplied into the schedule by ScalePerParamLR, and no scheduler in "
            "schedulers: is one, so it would be ignored; fix: wrap the schedule as "
            "schedulers: [{ScalePerParamLR: {scheduler: {...}}}]",
        )


def run_factories(
    config: Mapping[str, Any], any_tags: bool = False, steps: int | None = None
) -> tuple[OptimizerFactory | None, SchedulersFactory | None]:
    """The optimizer and scheduler factories of a parsed config, fully validated (`any_tags` and the
    run's `steps`: as in `_schedulers_factory`)."""
    optimizer_spec, scheduler_spec = config.get("optimizer"), config.get("schedulers")
    tagged = param_groups.parse(config.get("param_groups"))
    make_optimizer = optimizer_factory(optimizer_spec) if optimizer_spec is not None else None
    if make_optimizer is None and (tagged or scheduler_spec not in (None, [])):
        raise ConfigError(
            "param_groups" if tagged else "schedulers",
            f"{'param groups' if tagged else 'schedulers'} need an optimizer to act on; {ADD_AN_OPTIMIZER}",
        )
    if scheduler_spec in (None, []):
        _refuse_unapplied_scales(tagged)
        return make_optimizer, None
    assert make_optimizer is not None  # refused above
    return make_optimizer, _schedulers_factory(scheduler_spec, make_optimizer, any_tags, tagged, steps)


def attach_optimizers(
    model: LightningModule,
    make_optimizer: OptimizerFactory,
    make_schedulers: SchedulersFactory | None,
    tagged: list[param_groups.TaggedGroup],
) -> None:
    """Give `model` a `configure_optimizers` that builds from the factories when Lightning calls it.

    Lightning calls it after the strategy has materialized the model, so the optimizer
    sees the real parameters, grouped by the `param_groups:` entries `tagged`. Closed-form
    schedulers step every optimizer step.
    """

    def configure_optimizers(self: LightningModule) -> Any:
        trainable = param_groups.trainable(self)
        optimizer = make_optimizer(param_groups.split(trainable, tagged) if tagged else [p for _, p in trainable])
        if make_schedulers is None:
            return optimizer
        schedulers = make_schedulers(optimizer)
        if self.trainer.max_steps == -1:  # else checked with the config, before anything was written
            steps = self.trainer.estimated_stepping_batches  # the epochs' optimizer steps, known now
            check_steps(schedulers, int(steps) if math.isfinite(steps) else _UNBOUNDED_STEPS)
        return [optimizer], [cs_schedulers.lightning_config(s) for s in schedulers]

    if has_own_optimizers(model):
        warnings.warn(
            f"{type(model).__name__}.configure_optimizers is replaced by the YAML optimizer: block", stacklevel=2
        )
    # this one model's method, on purpose: the YAML blocks replace what its class defines
    model.configure_optimizers = MethodType(configure_optimizers, model)  # type: ignore[method-assign]


def check_steps(schedulers: list, steps: int) -> None:
    """Refuse now, at its key path, a `schedulers:` entry whose value at one of the first `steps` steps an
    update would refuse mid-run (see `Scheduler.check_steps`): `fit` stops before step 0, `schedule` shows
    nothing."""
    for index, scheduler in enumerate(schedulers):
        try:
            scheduler.check_steps(steps)
        except UsageError as err:
            raise ConfigError(("schedulers", index), str(err)) from None


def has_own_optimizers(model: LightningModule) -> bool:
    return type(model).configure_optimizers is not LightningModule.configure_optimizers
