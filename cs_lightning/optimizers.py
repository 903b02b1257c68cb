"""Optimizers from a YAML block, built only when the parameters exist.

Two spellings are accepted for the same thing::

    optimizer: {AdamW: {lr: 3.0e-4, weight_decay: 0.1}}          # Cerebras Model Zoo
    optimizer: {class_path: torch.optim.AdamW,                     # Lightning / jsonargparse
                init_args: {lr: 3.0e-4, weight_decay: 0.1}}

`optimizer_factory` checks the block completely, up front (the name resolves, every
argument exists, the optimizer accepts the values), and returns a function of the
parameters. The optimizer itself is built later, in ``configure_optimizers``, after the
model is materialized: binding parameters at parse time, as Lightning's own
auto-configured optimizer does, would bind placeholders of a deferred model.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from cs_lightning.config_blocks import parse_block
from cs_lightning.errors import ConfigError, KeyPath

# parameters, or param groups (dicts holding them): what torch's optimizers take
OptimizerFactory = Callable[[ParamsT], torch.optim.Optimizer]


def torch_optimizers() -> dict[str, type[torch.optim.Optimizer]]:
    """Every optimizer class that ``torch.optim`` exports, by lowercase name."""
    found = {}
    for name in dir(torch.optim):
        obj = getattr(torch.optim, name)
        if inspect.isclass(obj) and issubclass(obj, torch.optim.Optimizer) and obj is not torch.optim.Optimizer:
            found[name.lower()] = obj
    return found


def _import_dotted(path: str) -> Any:
    """`package.module.Name` -> the object; ImportError/AttributeError if it is not there."""
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ImportError(f"{path!r} is not a dotted path such as 'package.module.Name'")
    return getattr(importlib.import_module(module_name), attr)


def resolve_optimizer(name: str, key: KeyPath | str = "optimizer") -> type[torch.optim.Optimizer]:
    """A torch optimizer by name (case-insensitive) or dotted import path; errors name the key path `key`."""
    if "." in name:
        try:
            cls = _import_dotted(name)
        except (ImportError, AttributeError) as err:
            raise ConfigError(
                key,
                f"cannot import optimizer {name!r} ({err}); "
                "fix: give a torch.optim name such as AdamW or an importable dotted path",
            ) from None
        if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)):
            raise ConfigError(key, f"{name!r} is not a torch.optim.Optimizer subclass; fix: name an optimizer class")
        return cls
    known = torch_optimizers()
    if name.lower() in known:
        return known[name.lower()]
    names = sorted(cls.__name__ for cls in known.values())
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(names)}"
    raise ConfigError(key, f"unknown optimizer {name!r}; fix: {hint}")


def _check_arguments(cls: type, args: Mapping[str, Any], key: KeyPath) -> None:
    """Every argument in `args` exists in `cls`'s signature, and the required ones are given.

    The first parameter (the parameters to optimize) is ours to supply.
    """
    params = list(inspect.signature(cls).parameters.values())[1:]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for arg in args:
        if arg not in names:
            close = difflib.get_close_matches(arg, names, n=1)
            hint = f"did you mean {close[0]}?" if close else f"{cls.__name__} takes {', '.join(names)}"
            raise ConfigError((*key, arg), f"{cls.__name__} has no argument {arg!r}; fix: {hint}")
    missing = [p.name for p in params if p.default is p.empty and p.kind is not p.VAR_POSITIONAL and p.name not in args]
    if missing:
        raise ConfigError(
            key, f"{cls.__name__} needs {', '.join(missing)}; fix: add " + ", ".join(f"{m}: <value>" for m in missing)
        )


def optimizer_factory(spec: Any, key: KeyPath = ("optimizer",)) -> OptimizerFactory:
    """Validate an optimizer block now; return `params -> optimizer` for later.

    Raises `ConfigError` (a ValueError) naming the YAML key path and the fix.
    """
    name, args, args_key = parse_block(spec, key, "optimizer", bare_name_ok=True)
    cls = resolve_optimizer(name, key)
    _check_arguments(cls, args, args_key)
    try:  # let the optimizer judge the values itself, on a throwaway parameter
        cls([torch.nn.Parameter(torch.zeros(1))], **args)
    except (ValueError, TypeError) as err:
        raise ConfigError(args_key, f"{cls.__name__} rejects {args}: {err}; fix: correct the value") from None

    def build(params: ParamsT) -> torch.optim.Optimizer:
        return cls(params, **args)

    return build
