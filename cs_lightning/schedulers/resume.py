"""Resuming schedulers from a checkpoint whose schedulers may differ from this run's.

A scheduler's state is its step and its arguments (``Scheduler.state_dict``). Loading one
restores both, as torch and cerebras.pytorch 2.10 do (``__dict__.update``): so a state of
another class cannot be loaded at all, and a state of the same class with other arguments
replaces the configured arguments. ``mismatch`` finds the first, for an error that names
both classes before anything is loaded (``check_scheduler_states``); ``Scheduler.load_state_dict``
warns of the second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cs_lightning.errors import CheckpointSchedulersError, KeyPath, format_key_path
from cs_lightning.schedulers.base import (
    Scheduler,
    _function_arguments,
    _is_scheduler_list,
    _saved_fields,
    _state_fields,
    state_keys,
)
from cs_lightning.schedulers.registry import _catalogue

_PACKAGE = "cs_lightning.schedulers."


def _expected_keys(scheduler: Scheduler) -> set[str]:
    return {"last_epoch", *_saved_fields(scheduler)}


def _may_be_state_of(cls: type[Scheduler], keys: set[str]) -> bool:
    """Whether a state with ``keys`` may be one of ``cls``: it holds the step and every argument, but those given
    a function (LambdaLR's ``lr_lambda``, a custom scheduler's ``fn``), which a state leaves out."""
    fields = {"last_epoch", *_state_fields(cls)}
    return keys <= fields and fields - keys <= _function_arguments(cls)


def saved_class(state: Mapping[str, Any]) -> str:
    """The class a scheduler state was taken from, as far as its keys tell (a state holds no class
    name): ``LinearLR``, ``ChainedLR, ChainedScheduler or ChainedWD``, ``a torch scheduler``, or its
    arguments when no class has them."""
    names = _catalogue_classes(state)
    if names:
        return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    if "_last_lr" in state:  # torch's bookkeeping, in every torch scheduler's state
        return "a torch scheduler"
    return f"a scheduler with arguments {sorted(state_keys(state) - {'last_epoch'})}"


def _catalogue_classes(state: Mapping[str, Any]) -> list[str]:
    """The names of the cs_lightning scheduler classes whose states have the keys of ``state``."""
    keys = state_keys(state)
    classes = [cls for found in _catalogue().values() for cls in found if _may_be_state_of(cls, keys)]
    # a subclass that keeps its parent's arguments has its parent's keys: name the catalogue's own
    own = [cls for cls in classes if cls.__module__.startswith(_PACKAGE)]
    return sorted({cls.__name__ for cls in own or classes})


def mismatch(scheduler: Scheduler, state: Any, where: KeyPath) -> str | None:
    """Why ``state`` cannot be loaded into ``scheduler`` (at ``where``, e.g. ``("schedulers", 0)``), or None."""
    if not isinstance(state, Mapping):
        return _class_mismatch(where, "no scheduler state", type(scheduler).__name__)
    if scheduler._step_of_foreign_state(dict(state)) is not None:
        return None
    if state_keys(state) != _expected_keys(scheduler):
        return _class_mismatch(where, saved_class(state), type(scheduler).__name__)
    for name in _saved_fields(scheduler):
        current, saved = getattr(scheduler, name), state[name]
        if isinstance(current, Scheduler):
            found = mismatch(current, saved, (*where, name))
        elif _is_scheduler_list(current):
            found = _list_mismatch(current, saved, (*where, name))
        else:
            continue
        if found:
            return found
    return None


def _torch_mismatch(scheduler: Any, state: Any, where: KeyPath) -> str | None:
    """Why a cs_lightning scheduler's ``state`` cannot be loaded into torch ``scheduler``, or None. torch's
    ``load_state_dict`` takes any dict (``__dict__.update``), and under csx the closed form driving it then
    goes on from the loaded step: a run whose values differ from torch's own, without a word. Another torch
    scheduler's state is torch's to judge, as it is without csx."""
    if not isinstance(state, Mapping) or not _catalogue_classes(state):
        return None
    return _class_mismatch(where, saved_class(state), f"torch's {type(scheduler).__name__}")


def _list_mismatch(children: Sequence[Scheduler], saved: Any, where: KeyPath) -> str | None:
    if not isinstance(saved, list) or len(saved) != len(children):
        return _count_mismatch(where, len(saved) if isinstance(saved, list) else 0, len(children))
    for index, (child, child_state) in enumerate(zip(children, saved)):
        found = mismatch(child, child_state, (*where, index))
        if found:
            return found
    return None


def _class_mismatch(where: KeyPath, saved: str, current: str) -> str:
    return f"{format_key_path(where)} is {saved} in the checkpoint but {current} in this run"


def _count_mismatch(where: KeyPath, saved: int, current: int) -> str:
    """Another number of schedulers: in the checkpoint (``where`` empty) or in a list at ``where``."""
    held = f"{format_key_path(where)} holds {_count(saved)} in the checkpoint" if where else f"holds {_count(saved)}"
    return f"{held}, this run {_count(current)}"


_FIX = "fix: resume with the schedulers it was trained with, or start a new run from its weights (without ckpt_path)"


def check_scheduler_states(ckpt_path: Any, saved: Any, schedulers: list[Any]) -> None:
    """Refuse, before anything is loaded, scheduler states (a checkpoint's ``lr_schedulers``) that this
    run's ``schedulers`` (cs_lightning's or torch's) cannot resume from; Lightning pairs them by position only."""
    if not isinstance(saved, list) or len(saved) != len(schedulers):
        counts = _count_mismatch((), len(saved) if isinstance(saved, list) else 0, len(schedulers))
        raise CheckpointSchedulersError("ckpt_path", f"{str(ckpt_path)!r} {counts}; {_FIX}")
    for index, (scheduler, state) in enumerate(zip(schedulers, saved)):
        where = ("schedulers", index)
        found = (mismatch if isinstance(scheduler, Scheduler) else _torch_mismatch)(scheduler, state, where)
        if found:
            raise CheckpointSchedulersError("ckpt_path", f"{str(ckpt_path)!r}: {found}; {_FIX}")


def _count(number: int) -> str:
    return f"{number} scheduler{'' if number == 1 else 's'}"
