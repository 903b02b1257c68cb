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

A block pasted from a Cerebras Model Zoo config runs as written where torch can do what it
asks (`learning_rate` is `lr`, `epsilon` is `eps`; `correct_bias: true` is what Adam/AdamW always do), with a
warning where it leaves a default that torch sets differently; the rest is refused, pointing
to ``cs-lightning convert``. `merge_optimizer_blocks` says how a later block (a second
``--config``, a command-line key) combines with an earlier one.
"""

from __future__ import annotations

import difflib
import inspect
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from cs_lightning.config_blocks import check_arguments, parse_block, refused_at
from cs_lightning.errors import ConfigError, ConfigTypeError, KeyPath, format_key_path
from cs_lightning.user_code import import_dotted

# parameters, or param groups (dicts holding them): what torch's optimizers take
OptimizerFactory = Callable[[ParamsT], torch.optim.Optimizer]

# Cerebras Model Zoo optimizer argument spellings -> torch.optim's (`fit` and `convert` read them alike).
MODEL_ZOO_ALIASES = {"learning_rate": "lr", "weight_decay_rate": "weight_decay", "epsilon": "eps"}

# Where cerebras.pytorch's optimizer defaults differ from torch.optim's, by lowercase class name.
CEREBRAS_DEFAULTS = {"adam": {"eps": 1e-6}, "adamw": {"eps": 1e-6, "weight_decay": 0.0}}

# Model Zoo's bias switch, for the torch classes that always correct the bias (correct_bias: true is what they do).
_BIAS_CORRECTED = (torch.optim.Adam, torch.optim.AdamW)

_CONVERT_HINT = "a Cerebras Model Zoo block? `cs-lightning convert modelzoo.yaml -o run.yaml` maps it to torch's"


def torch_optimizers() -> dict[str, type[torch.optim.Optimizer]]:
    """Every optimizer class that ``torch.optim`` exports, by lowercase name."""
    found = {}
    for name in dir(torch.optim):
        obj = getattr(torch.optim, name)
        if inspect.isclass(obj) and issubclass(obj, torch.optim.Optimizer) and obj is not torch.optim.Optimizer:
            found[name.lower()] = obj
    return found


def resolve_optimizer(name: str, key: KeyPath | str = "optimizer") -> type[torch.optim.Optimizer]:
    """A torch optimizer by name (case-insensitive) or dotted import path; errors name the key path `key`."""
    if not all(part.isidentifier() for part in name.split(".")):  # AdamW(lr=0.001): a call, or a block kept as text
        raise ConfigError(
            key,
            f"{name!r} is neither an optimizer's name nor a dotted import path; fix: write the name and its arguments "
            "as a block, {AdamW: {lr: 0.001}} (on the command line: --optimizer '{AdamW: {lr: 0.001}}' or "
            "--optimizer AdamW --optimizer.lr 0.001)",
        )
    if "." in name:
        try:
            cls = import_dotted(name)
        except ImportError as err:
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


def optimizer_help(name: str, option: str = "--optimizer") -> str:
    """What `--optimizer.help NAME` prints, as LightningCLI's does: the class, its summary and each
    argument with its default (and its Model Zoo spelling, which the block takes too)."""
    cls = resolve_optimizer(name, option.removeprefix("--") + ".help")
    spelled = {torch_name: alias for alias, torch_name in MODEL_ZOO_ALIASES.items()}
    where = "torch.optim" if getattr(torch.optim, cls.__name__, None) is cls else cls.__module__
    lines = [f"{where}.{cls.__qualname__}: {_summary(cls)}", "", "arguments:"]
    for arg, parameter in inspect.signature(cls).parameters.items():
        if arg == "params" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        default = "required" if parameter.default is parameter.empty else f"default: {parameter.default!r}"
        alias = f", Model Zoo: {spelled[arg]}" if arg in spelled else ""
        lines.append(f"  {option}.{arg}  ({default}{alias})")
    return "\n".join(lines)


def _summary(cls: type) -> str:
    """The first sentence of a class's docstring, on one line."""
    text = " ".join((inspect.getdoc(cls) or "").split())
    return text.split(". ")[0].rstrip(".") + "." if text else ""


def merge_optimizer_blocks(earlier: Any, later: Any) -> Any:
    """The optimizer block `later` given over `earlier` (a later --config file, a command-line key).

    As Lightning merges a class_path block: the arguments are merged, later wins, in `later`'s
    spelling (`learning_rate` replaces `lr`, and back); for another optimizer class only the
    earlier arguments it takes are kept (AdamW's lr and weight_decay carry over to SGD, its betas
    do not). A block of `init_args:` alone adds to the earlier optimizer; a block that is none of
    these shapes, or names an unknown optimizer (its error comes when it is checked), replaces the
    earlier one.
    """
    earlier_parts = _name_and_arguments(earlier)
    if earlier_parts is None or later is None:
        return later
    if isinstance(later, Mapping) and set(later) == {"init_args"} and isinstance(later["init_args"], Mapping):
        name, args = earlier_parts
        return _spelled_like(earlier, name, _merged_arguments(args, later["init_args"]))
    later_parts = _name_and_arguments(later)
    if later_parts is None:
        return later
    name, args = later_parts
    kept = earlier_parts[1]
    if not _same_optimizer(earlier_parts[0], name):
        try:
            parameters = inspect.signature(resolve_optimizer(name)).parameters
        except ConfigError:
            return later
        if all(p.kind is not p.VAR_KEYWORD for p in parameters.values()):  # one taking **kwargs takes them all
            kept = _taken_by(set(parameters), kept)
    # a bare name (--optimizer SGD) keeps the earlier block's spelling
    return _spelled_like(earlier if isinstance(later, str) else later, name, _merged_arguments(kept, args))


# Each argument's other spelling, both ways: learning_rate <-> lr...
_OTHER_SPELLING = {**MODEL_ZOO_ALIASES, **{torch_name: alias for alias, torch_name in MODEL_ZOO_ALIASES.items()}}


def _taken_by(parameters: set[str], args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a class with ``parameters`` takes: as written, in Model Zoo's spelling of one of them
    (read as torch's when built), or in torch's spelling of one it names Model Zoo's way (renamed)."""
    taken = {}
    for arg, value in args.items():
        if arg in parameters or MODEL_ZOO_ALIASES.get(arg) in parameters:
            taken[arg] = value
        elif _OTHER_SPELLING.get(arg) in parameters:
            taken[_OTHER_SPELLING[arg]] = value
    return taken


def _merged_arguments(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
    """`later` over `earlier`; a later argument replaces an earlier one in either spelling (learning_rate over lr),
    where keeping both would be refused as one argument given twice."""
    kept = {arg: value for arg, value in earlier.items() if _OTHER_SPELLING.get(arg) not in later}
    return {**kept, **later}


def _name_and_arguments(block: Any) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) of a well-formed block in any spelling, else None."""
    if isinstance(block, str):
        return block, {}
    if not isinstance(block, Mapping):
        return None
    if "class_path" in block:
        name, args = block["class_path"], block.get("init_args")
        if set(block) - {"class_path", "init_args"}:
            return None
    elif len(block) == 1 and "init_args" not in block:
        ((name, args),) = block.items()
    else:
        return None
    if not isinstance(name, str) or not isinstance(args, Mapping | None):
        return None
    return name, dict(args or {})


def _spelled_like(block: Any, name: str, args: dict[str, Any]) -> Any:
    if isinstance(block, Mapping) and "class_path" in block:
        return {"class_path": name, "init_args": args}
    return {name: args} if args or not isinstance(block, str) else name


def _same_optimizer(first: str, second: str) -> bool:
    """Whether two names (AdamW, adamw, torch.optim.AdamW) are one class; unknown names compare as text."""
    try:
        return resolve_optimizer(first) is resolve_optimizer(second)
    except ConfigError:  # said when the block is checked
        return first.lower() == second.lower()


def _from_model_zoo(cls: type, args: dict[str, Any], key: KeyPath) -> dict[str, Any]:
    """`args` with Model Zoo's spellings read as torch's: `learning_rate` is `lr`, and
    `correct_bias: true` is dropped for Adam/AdamW, which always do it; what torch cannot do is refused."""
    takes = set(inspect.signature(cls).parameters)
    renamed = _renamed(args, takes, key)
    if "adjust_learning_rate" in renamed and "adjust_learning_rate" not in takes:
        raise ConfigError(
            (*key, "adjust_learning_rate"),
            "per-layer learning-rate scales are not an optimizer argument in torch; fix: move them to a "
            "param_groups: block ([{tag:, params: [globs on parameter names], adjust_learning_rate:}]) with a "
            "ScalePerParamLR scheduler, or let `cs-lightning convert modelzoo.yaml -o run.yaml` write both",
        )
    if cls in _BIAS_CORRECTED and renamed.pop("correct_bias", True) is not True:
        raise ConfigError(
            (*key, "correct_bias"),
            f"{args['correct_bias']!r}: torch's {cls.__name__} always corrects the bias and cannot turn it "
            "off; fix: remove correct_bias (the run then corrects the bias), or name an optimizer class "
            "without bias correction by its dotted path (`cs-lightning convert` maps the rest of the block)",
        )
    if set(args) & {"correct_bias", *MODEL_ZOO_ALIASES}:
        _warn_of_other_defaults(cls, renamed, key)
    return renamed


def _renamed(args: dict[str, Any], takes: set[str], key: KeyPath) -> dict[str, Any]:
    """`args` with each Model Zoo alias that `takes` (the class's parameters) lacks renamed to torch's name."""
    aliases = {alias: target for alias, target in MODEL_ZOO_ALIASES.items() if alias in args and alias not in takes}
    for alias, target in aliases.items():
        if target in args:
            raise ConfigError(
                (*key, alias), f"Model Zoo's spelling of {target}, which is given too; fix: keep only {target}"
            )
    return {aliases.get(arg, arg): value for arg, value in args.items()}


def _warn_of_other_defaults(cls: type, args: dict[str, Any], key: KeyPath) -> None:
    """A block written for Model Zoo relied on cerebras.pytorch's defaults: say where torch's differ."""
    for arg, default in CEREBRAS_DEFAULTS.get(cls.__name__.lower(), {}).items():
        if arg not in args:
            torch_default = inspect.signature(cls).parameters[arg].default
            warnings.warn(
                f"{format_key_path(key)}: a Cerebras Model Zoo block without {arg}: torch's default {arg}="
                f"{torch_default} applies, where Model Zoo's was {default}; write {arg}: to choose",
                stacklevel=4,
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# What YAML gives that is never a number: text, true/false, a list or a mapping. None and a tensor may
# be (an Optional[float] turned off, torch's lr as a Tensor): the constructor judges those.
_NOT_A_NUMBER = (str, bool, list, tuple, dict)


def _check_kinds(cls: type, args: Mapping[str, Any], key: KeyPath) -> None:
    """A value is not of another kind than the constructor's default: a number (not NaN, and a finite ``lr``:
    torch takes ``lr: .inf`` and trains to NaN), or a tuple of numbers.

    torch checks its numbers with comparisons, so text reaches the user as "'<=' not supported
    between 'float' and 'str'", and ``lr: true`` is not refused at all (it trains at 1.0)."""
    parameters = inspect.signature(cls).parameters
    for arg, value in args.items():
        default: Any = parameters[arg].default if arg in parameters else None
        if _is_number(default) and isinstance(value, _NOT_A_NUMBER):
            quoted = number_in_text(value) is not None
            fix = f"write it without quotes: {value}" if quoted else f"write a number such as {default}"
            raise ConfigTypeError((*key, arg), f"expected a number, got {value!r}; fix: {fix}")
        if (
            _is_number(default)
            and isinstance(value, float)
            and (math.isnan(value) or (arg == "lr" and math.isinf(value)))
        ):
            raise ConfigError(
                (*key, arg), f"expected a finite number, got {value!r}; fix: write a number such as {default}"
            )
        numbers = isinstance(default, tuple) and bool(default) and all(map(_is_number, default))
        if numbers and not (
            isinstance(value, (list, tuple))
            and len(value) == len(default)
            and not any(isinstance(v, _NOT_A_NUMBER) for v in value)
        ):
            raise ConfigTypeError(
                (*key, arg),
                f"expected {len(default)} numbers, got {value!r}; fix: write a list such as {list(default)}",
            )


def number_in_text(value: Any) -> float | None:
    """The finite number a text reads as (``"2.0e-4"``), else None (for a bool or a number too)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if isinstance(value, str) and math.isfinite(number) else None


def optimizer_factory(spec: Any, key: KeyPath = ("optimizer",)) -> OptimizerFactory:
    """Validate an optimizer block now; return `params -> optimizer` for later.

    Raises `ConfigError` (a ValueError) naming the YAML key path and the fix.
    """
    name, args, args_key = parse_block(spec, key, "optimizer", bare_name_ok=True)
    cls = resolve_optimizer(name, key)
    args = _from_model_zoo(cls, args, args_key)
    ours = list(inspect.signature(cls).parameters)[:1]  # the parameters to optimize, which `build` passes
    check_arguments(cls, args, args_key, ours=ours, note=f" ({_CONVERT_HINT})")
    _check_kinds(cls, args, args_key)
    try:  # let the optimizer judge the values itself, on a throwaway parameter
        cls([torch.nn.Parameter(torch.zeros(1))], **args)
    except (ValueError, TypeError) as err:
        raise refused_at(args_key, err, f"{cls.__name__} rejects {args}: ") from None

    def build(params: ParamsT) -> torch.optim.Optimizer:
        return cls(params, **args)

    return build
