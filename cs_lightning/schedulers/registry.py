"""Schedulers by name, and from the Cerebras Model Zoo YAML shapes.

``resolve`` finds a scheduler class by name, case-insensitively, over every subclass of
``Scheduler`` defined or imported so far (custom ones included), or by dotted import path.
``build`` turns a YAML block into schedulers on an optimizer::

    {LinearLR: {initial_learning_rate: 0.0, end_learning_rate: 2.0e-4, total_iters: 100}}
    [{LinearLR: {...}}, {CosineDecayWD: {...}}]                  # several schedulers
    {SequentialLR: {schedulers: [{LinearLR: {...}}, {CosineDecayLR: {...}}]}}
    {ScalePerParamLR: {scheduler: {CosineDecayLR: {...}}}}
    [{scheduler: Linear, ...}, {scheduler: CosineDecay, ...}]    # legacy: one sequence
    {class_path: cs_lightning.schedulers.LinearLR, init_args: {...}}

Missing ``SequentialLR`` milestones are the running sum of the children's
``total_iters``; given ones may differ from them (a stage cut short, or held past its
end), as in cerebras.pytorch 2.10. Errors name the YAML key path.
"""

from __future__ import annotations

import difflib
import inspect
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import yaml

from cs_lightning.config_blocks import check_arguments, parse_block, refused_at
from cs_lightning.errors import (
    ClosedFormError,
    ConfigError,
    ConfigTypeError,
    KeyPath,
    NotConvertible,
    ParamGroupTagsError,
    UsageError,
    UsageTypeError,
    format_key_path,
)
from cs_lightning.schedulers.base import Scheduler, _group_tags, _has_closed_form
from cs_lightning.schedulers.composite import _Sequential, warn_of_cut_stages
from cs_lightning.user_code import import_dotted


def _concrete(cls: type[Scheduler]) -> bool:
    return bool(cls.param_group_key) and not cls.__name__.startswith("_") and _has_closed_form(cls)


def _catalogue() -> dict[str, list[type[Scheduler]]]:
    """Every concrete scheduler class alive now, by lower-case name, one per ``module.qualname``.

    A class defined again at the same path (a notebook cell run twice, ``importlib.reload``) leaves the
    old one alive while anything refers to it: the class bound at that path now stands for it, or, where
    none is (a class defined in a function), the one defined last.
    """
    found: dict[str, dict[str, type[Scheduler]]] = {}
    pending: list[type[Scheduler]] = list(type.__subclasses__(Scheduler))  # the real list: base._HiddenSubclasses
    seen: set[type] = set()
    for cls in pending:  # grows as it goes: each class's subclasses in the order they were defined
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(type.__subclasses__(cls))
        if _concrete(cls):
            at_path = found.setdefault(cls.__name__.lower(), {})
            path = f"{cls.__module__}.{cls.__qualname__}"
            if path not in at_path or at_path[path] is not _bound_at(cls):
                at_path[path] = cls
    return {name: list(at_path.values()) for name, at_path in found.items()}


def _bound_at(cls: type) -> Any:
    """What the module of ``cls`` holds now at its qualified name; None when nothing does (a class defined
    in a function, a module no longer imported)."""
    bound: Any = sys.modules.get(cls.__module__)
    for name in cls.__qualname__.split("."):
        bound = getattr(bound, name, None)
    return bound


def _import(path: str) -> Any:
    try:
        return import_dotted(path)
    except ImportError as error:
        raise ConfigError(
            (),
            f"scheduler {path!r} cannot be imported: {error}; fix: give a scheduler's class name, e.g. "
            "LinearLR, or the dotted import path of one",
        ) from None


def resolve(name: str) -> type[Scheduler]:
    """The scheduler class called ``name`` (any case; ``Linear`` finds ``LinearLR``), or at
    the dotted import path ``name``.

    Raises `ConfigError` (a ValueError; a TypeError too for what is not a scheduler class) at
    an empty key path: a caller that knows where the name was written re-raises it `under` that.
    """
    if not isinstance(name, str):
        raise ConfigTypeError((), f"got scheduler name {name!r}; fix: give the class name as a string")
    if "." in name:
        cls = _import(name)
        if not (isinstance(cls, type) and issubclass(cls, Scheduler) and _concrete(cls)):
            raise ConfigTypeError(
                (),
                f"{name!r} is {cls!r}, not a closed-form scheduler class; fix: name one, or a subclass of "
                "cs_lightning.schedulers.LRScheduler or WeightDecayScheduler",
            )
        return cls
    catalogue = _catalogue()
    matches = catalogue.get(name.lower()) or catalogue.get(name.lower() + "lr")
    if not matches:
        known = sorted(cls.__name__ for classes in catalogue.values() for cls in classes)
        close = difflib.get_close_matches(name, known, n=4, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}?" if close else f"name one of {', '.join(known)}"
        raise ConfigError((), f"unknown scheduler {name!r}; fix: {hint} (or give a dotted import path)")
    if len(matches) > 1:
        paths = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in matches)
        raise ConfigError((), f"scheduler name {name!r} is ambiguous: {', '.join(paths)}; fix: give the dotted path")
    return matches[0]


def build(spec: Any, optimizer: torch.optim.Optimizer, key: KeyPath = ("schedulers",)) -> list[Scheduler]:
    """Schedulers on ``optimizer`` from a Cerebras-style YAML block (always a list).

    ``key`` is where the block sits in its file: errors are `ConfigError`s at key paths below it.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise UsageTypeError(f"build: got optimizer={optimizer!r}; pass a torch.optim.Optimizer")
    if _is_legacy(spec):
        return [_build_legacy(spec, optimizer, key)]
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        built = [_build_one(item, optimizer, (*key, i)) for i, item in enumerate(spec)]
        _refuse_two_writers(built, key)
        return built
    return [_build_one(spec, optimizer, key)]


def _refuse_two_writers(built: list[Scheduler], key: KeyPath) -> None:
    """Two schedulers of one list that set the same value of a param group: refused (see ``two_writers``)."""
    found = two_writers(built)
    if found is not None:
        index, later, groups = found
        raise ConfigError(
            (*key, later),
            f"{type(built[later]).__name__} sets {built[later].param_group_key!r} of {groups}, as "
            f"{format_key_path((*key, index))} ({type(built[index]).__name__}) does{TWO_WRITERS_FIX}",
        )


TWO_WRITERS_FIX = (
    ", so only the later would apply; fix: compose them in one SequentialLR (one after the other) or "
    "ChainedScheduler (multiplied), or give them param_group_tags of different param groups"
)


def two_writers(schedulers: Sequence[Any]) -> tuple[int, int, str] | None:
    """The first two closed-form schedulers (their indices) that set the same value of a param group, and
    which groups; None if there are none. Each step writes both, so only the later one applies (in
    cerebras.pytorch 2.10 too), while a table or a plot would show both."""
    for later_index, later in enumerate(schedulers):
        for index, earlier in enumerate(schedulers[:later_index]):
            if not (isinstance(earlier, Scheduler) and isinstance(later, Scheduler)):
                continue
            if earlier.optimizer is not later.optimizer or earlier.param_group_key != later.param_group_key:
                continue
            shared = sorted(set(earlier._targets) & set(later._targets))
            if shared:
                groups = later.optimizer.param_groups
                return index, later_index, ", ".join(_group_name(k, groups[k]) for k in shared)
    return None


def _group_name(index: int, group: dict) -> str:
    tags = sorted(tag for tag in _group_tags(group) if tag is not None)
    return f"param group {index} (" + (f"tagged {tags}" if tags else "untagged") + ")"


def named_tags(spec: Any) -> list[Any]:
    """Every tag that a ``param_group_tags`` anywhere in a YAML block names, None left out, sorted."""
    return sorted(_named_tags(spec) - {None}, key=str)


def _named_tags(spec: Any) -> set[Any]:
    if isinstance(spec, Mapping):
        found = set()
        for key, value in spec.items():
            if key != "param_group_tags":
                found |= _named_tags(value)
            elif isinstance(value, (list, tuple, set)):
                found |= set(value)
            else:
                found.add(value)
        return found
    if isinstance(spec, list):
        return set().union(*(_named_tags(item) for item in spec))
    return set()


# Legacy scheduler argument spellings (Model Zoo 1.x) -> cerebras.pytorch 2.x names,
# applied only where the scheduler class has the new name and not the old one.
_LEGACY_ARGUMENTS = {
    "total_iters": ("steps", "decay_steps"),
    "initial_learning_rate": ("learning_rate", "base_lr"),
    "base_lr": ("learning_rate", "initial_learning_rate"),
    "learning_rates": ("values",),
    "milestones": ("boundaries",),
}


def legacy_arguments(cls: type, args: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(old, new) for each argument in ``args`` under a Model Zoo 1.x name that ``cls`` takes as ``new``."""
    params = set(inspect.signature(cls).parameters)
    return [
        (old, new)
        for new, olds in _LEGACY_ARGUMENTS.items()
        for old in olds
        if new in params and old not in params and old in args and new not in args
    ]


def with_new_names(cls: type, args: Mapping[str, Any], path: KeyPath) -> dict[str, Any]:
    """``args`` (at ``path``) with Model Zoo 1.x spellings (``steps``, ``decay_steps``, ...) under the names
    ``cls`` takes; two spellings of one argument (``steps`` and ``decay_steps``) are refused, not one dropped."""
    renamed: dict[str, Any] = dict(args)
    spelled: dict[str, str] = {}
    for old, new in legacy_arguments(cls, args):
        if new in spelled:
            raise ConfigError(
                (*path, old),
                f"{old}: {args[old]!r} and {spelled[new]}: {args[spelled[new]]!r} both give {cls.__name__}'s "
                f"{new}; fix: keep the one you mean (a sequence's stages end at its milestones, which a SequentialLR"
                " block can give)",
            )
        spelled[new] = old
        renamed[new] = renamed.pop(old)
    return renamed


def _is_legacy(spec: Any) -> bool:
    items = [spec] if isinstance(spec, Mapping) else spec
    return (
        isinstance(items, Sequence)
        and not isinstance(items, str)
        and bool(items)
        and all(isinstance(item, Mapping) and "scheduler" in item for item in items)
        and all(isinstance(item["scheduler"], str) for item in items)
    )


def _legacy_block(item: Mapping[str, Any], path: KeyPath) -> dict[str, Any]:
    """``{scheduler: Linear, steps: 10, ...}`` -> ``{Linear: {total_iters: 10, ...}}``: a legacy item keeps
    its legacy argument names too, as Model Zoo 1.x wrote them."""
    name, args = item["scheduler"], {k: v for k, v in item.items() if k != "scheduler"}
    return {name: with_new_names(_resolve_at(name, (*path, "scheduler")), args, path)}


def _build_legacy(spec: Any, optimizer: torch.optim.Optimizer, path: KeyPath) -> Scheduler:
    """``[{scheduler: Linear, ...}, ...]``: one schedule, or a sequence of them.

    Built as the ``{Name: {args}}`` blocks it stands for; a refusal is said at the key as written.
    """
    items = [spec] if isinstance(spec, Mapping) else list(spec)
    written = [path] if isinstance(spec, Mapping) else [(*path, k) for k in range(len(items))]
    children = [_legacy_block(item, at) for item, at in zip(items, written, strict=True)]
    if len(children) == 1:
        block, at = children[0], written[0]
        built = [(*at, *block)]
    else:
        first = _resolve_at(items[0]["scheduler"], (*written[0], "scheduler"))
        sequence = "SequentialLR" if first.param_group_key == "lr" else "SequentialWD"
        block, at = {sequence: {"schedulers": children}}, path
        built = [(*path, sequence, "schedulers", k, *child) for k, child in enumerate(children)]
    try:
        return _build_one(block, optimizer, at)
    except ConfigError as error:
        raise as_written(error, items, written, built, path) from error


def as_written(
    error: ConfigError, items: list[Mapping], written: list[KeyPath], built: list[KeyPath], path: KeyPath
) -> ConfigError:
    """``error``, raised at the key of a ``{Name: {args}}`` block built from a legacy list, at the list's own key
    (``schedulers[0].steps`` for ``schedulers[0].LinearLR.total_iters``); the list's at ``path``. ``items``: the
    list's entries, ``written``: their keys, ``built``: the key of the block each was built as."""
    for item, at, block in zip(items, written, built, strict=True):
        if error.path[: len(block)] != block:
            continue
        rest = error.path[len(block) :]
        args = {key: value for key, value in item.items() if key != "scheduler"}
        old_names = dict(legacy_arguments(_resolve_at(item["scheduler"], at), args))
        written_as = next((old for old, new in old_names.items() if rest[:1] == (new,)), None)
        if written_as is None:
            return error.at((*at, *rest))
        # said in the words the user wrote: "steps must be >= 0", not "total_iters must be >= 0"
        message = re.sub(rf"\b{old_names[written_as]}\b", written_as, error.message)
        return type(error)((*at, written_as, *rest[1:]), message)
    return error.at(path) if error.path[: len(path)] == path else error


def _build_one(spec: Any, optimizer: torch.optim.Optimizer, path: KeyPath, tags: Any = None) -> Scheduler:
    """One block; ``tags``: the parent's ``param_group_tags``, the default of a child's."""
    block_path = path
    name, args, path = parse_block(spec, path, "scheduler")
    if "." in name:
        _refuse_torch_scheduler(name, args, optimizer, block_path)
    written = set(args)  # a refused value is said at its key only where the block itself holds it
    if tags is not None:
        args.setdefault("param_group_tags", tags)
    cls = _resolve_at(name, path)
    renamed = legacy_arguments(cls, args)
    if renamed:  # in {Name: {args}}, a cerebras.pytorch 2.x block, a 1.x name is a mistake
        old, new = renamed[0]
        raise ConfigError(
            (*path, old),
            f"{cls.__name__} has no argument {old!r}, Model Zoo 1.x's name for {new}; fix: write {new}, "
            "or cs-lightning convert the Model Zoo config it came from",
        )
    check_arguments(cls, args, path, ours=["optimizer"])
    parameters = inspect.signature(cls).parameters
    tags = args.get("param_group_tags")
    if "scheduler" in args and "scheduler" in parameters:
        args["scheduler"] = _build_one(args["scheduler"], optimizer, (*path, "scheduler"), tags)
    if "schedulers" in args and "schedulers" in parameters:
        args["schedulers"] = _build_children(args["schedulers"], optimizer, tags, (*path, "schedulers"))
    if "optimizer" in parameters:
        args["optimizer"] = optimizer
    # check_arguments refused what the call could not bind (an unknown or missing argument). The catalogue's checks
    # refuse a value with a CSLightningError naming the argument: one line. Any other error is raised by the code of
    # a constructor (a custom scheduler's own bug), and keeps its traceback.
    try:
        built = cls(**args)
    except ParamGroupTagsError as error:  # keeps its class, which the CLI catches to add its fix
        raise error.under(*path) from error
    except (UsageError, UsageTypeError, ClosedFormError) as error:
        raise _refused_argument(cls, {key: args[key] for key in written & args.keys()}, path, error) from error
    if isinstance(built, _Sequential) and "milestones" in args:
        warn_of_cut_stages(format_key_path(path), built.schedulers, built.milestones)
    return built


def _refuse_torch_scheduler(name: str, args: dict[str, Any], optimizer: torch.optim.Optimizer, path: KeyPath) -> None:
    """Refuse a torch scheduler's class path, naming the catalogue block that computes the same values.

    Not converted, as one that ``configure_optimizers`` returns is: a block's schedule counts
    optimizer steps, while Lightning steps a torch scheduler (its own ``lr_scheduler:`` key) each
    epoch unless told otherwise, so a silent conversion could change what its numbers mean. The
    refusal shows the closed form, whose step counts the user then reads and keeps or scales.
    """
    try:
        cls = _import(name)
    except ConfigError:
        return  # `resolve` says it
    torch_style = isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.LRScheduler)
    if not torch_style or issubclass(cls, Scheduler):
        return
    # imported here: from_torch builds on this package's classes, which import this module first
    from cs_lightning.schedulers.from_torch import _yaml_blocks

    generic = "write a closed-form scheduler of cs_lightning.schedulers (torch's class names, Cerebras arguments)"
    try:
        blocks = " and ".join(_flow_yaml(block) for block in _yaml_blocks(cls(_twin(optimizer), **args)))
        fix = f"fix: write its closed form instead, {blocks}"
    except NotConvertible as err:
        fix = f"it has no closed form ({err.reason}); fix: keep it in the model's configure_optimizers, or {generic}"
    except Exception:  # noqa: BLE001 - torch refused the arguments (or the optimizer's copy): only the hint is lost
        fix = f"fix: {generic}, e.g. {{StepLR: {{initial_learning_rate: 0.001, step_size: 3, gamma: 0.5}}}}"
    raise ConfigTypeError(
        path,
        f"{name!r} is a torch scheduler, and a scheduler block takes closed-form ones, which count optimizer steps "
        f"(Lightning steps a torch scheduler each epoch unless told interval: step); {fix}",
    )


def _twin(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """An optimizer of the same class and groups on throwaway parameters: a torch scheduler writes
    into the groups it is built on, and this one is built only to be read."""
    throwaway = [{**group, "params": [torch.zeros(1, requires_grad=True)]} for group in optimizer.param_groups]
    # torch's optimizers take their groups alone; Optimizer itself, which mypy sees, is never built
    return type(optimizer)(throwaway)  # type: ignore[call-arg]


def _flow_yaml(block: dict[str, Any]) -> str:
    """A block as one line of YAML, as a config file would hold it."""
    return str(yaml.safe_dump(block, default_flow_style=True, sort_keys=False, width=2**31 - 1)).strip()


def _resolve_at(name: str, path: KeyPath) -> type[Scheduler]:
    try:
        return resolve(name)
    except ConfigError as error:
        raise error.under(*path) from None


def _refused_argument(cls: type, args: Mapping[str, Any], path: KeyPath, error: ValueError | TypeError) -> ConfigError:
    """A constructor's refusal of one of the block's values (``LinearLR: got total_iters=-1; ...``), said at that
    value's own key, as a misspelt argument is; any other refusal at the block's."""
    for name, value in args.items():
        said = f"{cls.__name__}: got {name}={value!r}; "
        if str(error).startswith(said):
            retold = type(error)(f"got {value!r}; {str(error).removeprefix(said)}")
            return refused_at((*path, name), retold)
    return refused_at(path, error)


def _build_children(spec: Any, optimizer: torch.optim.Optimizer, tags: Any, path: KeyPath) -> list[Scheduler]:
    """Nested specs, built on the same optimizer; they inherit the parent's tags."""
    if not isinstance(spec, Sequence) or isinstance(spec, str):
        raise ConfigError(path, f"got {spec!r}; give a list of {{Name: {{arguments}}}}")
    return [_build_one(item, optimizer, (*path, i), tags) for i, item in enumerate(spec)]
