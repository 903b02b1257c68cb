"""The CS-X options every csx strategy takes (:class:`CSXOptions`), checked as the strategy is built, and the
refusal of a keyword argument the strategy does not take, naming its closest spelling."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, get_type_hints

import torch

from cs_lightning.config_blocks import keyword_names
from cs_lightning.errors import UsageError, UsageTypeError, did_you_mean

INIT_MODES = ("exact", "independent")
# torch's own compiler, always registered: the one backend name accepted without looking it up.
_DEFAULT_BACKEND = "inductor"


@dataclass(frozen=True)
class CSXOptions:
    """The CS-X options every csx strategy takes: the one list of their names, defaults, checks and help.

    The strategies' keyword arguments, ``csx_options``, the CLI's ``--trainer.strategy.*`` flags and the
    README's list all come from these fields.
    """

    trace_check: bool = field(
        default=True, metadata={"help": "check that the first step traces as one graph, failing early when it cannot"}
    )
    compile: bool = field(
        default=False,
        metadata={"help": "compile the training step's forward and the optimizer update with torch.compile for speed"},
    )
    compile_backend: str | Callable[..., Any] = field(
        default=_DEFAULT_BACKEND, metadata={"help": "the torch.compile backend used when compile=True"}
    )
    init_mode: str = field(
        default="exact",
        metadata={
            "help": "'exact' (weights bit-identical to eager construction) or 'independent' (each tensor"
            " depends only on the seed and its name: faster, same across ranks)"
        },
    )
    strict_schedulers: bool = field(
        default=False,
        metadata={
            "help": "fail, instead of warning, when a torch scheduler returned by configure_optimizers"
            " has no closed form"
        },
    )

    def __post_init__(self) -> None:
        if self.init_mode not in INIT_MODES:
            hint = did_you_mean(str(self.init_mode).lower(), INIT_MODES)
            raise UsageError(f"init_mode={self.init_mode!r} is not supported; {hint}use one of {INIT_MODES}")
        for option in fields(self):
            value = getattr(self, option.name)
            if option.type in (bool, "bool") and not isinstance(value, bool):  # "bool": postponed annotations
                raise UsageTypeError(f"{option.name}={value!r} must be a bool (True or False)")
        _check_backend(self.compile_backend)
        if not self.compile and self.compile_backend != _DEFAULT_BACKEND:
            warnings.warn(
                f"compile_backend={self.compile_backend!r} has no effect without compile=True; fix: add "
                "compile=True to compile the step with it, or leave compile_backend out",
                UserWarning,
                stacklevel=3,
            )

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> CSXOptions:
        """The options among ``kwargs``, removed from it (the rest go to Lightning's strategy)."""
        return cls(**{name: kwargs.pop(name) for name in CSX_OPTION_NAMES if name in kwargs})


CSX_OPTION_NAMES = tuple(option.name for option in fields(CSXOptions))


def with_options_signature(init: Callable[..., None]) -> None:
    """Show the options as ``init``'s keyword arguments, typed, with their defaults and help, so
    LightningCLI (jsonargparse) offers them as ``--trainer.strategy.<option>`` and ``help()`` lists them."""
    types = get_type_hints(CSXOptions)
    options = [
        inspect.Parameter(
            option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default, annotation=types[option.name]
        )
        for option in fields(CSXOptions)
    ]
    self, rest = (
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation=Any),
    )
    init.__signature__ = inspect.Signature([self, *options, rest], return_annotation=None)  # type: ignore[attr-defined]
    lines = [f"    {option.name}: {option.metadata['help']}." for option in fields(CSXOptions)]
    init.__doc__ = "\n".join(["The CS-X options, then the Lightning strategy's arguments.", "", "Args:", *lines])


def refuse_unknown(cls: type, mixin: type, kwargs: Mapping[str, Any], known: set[str] | None) -> None:
    """Name a misspelled option of the strategy class ``cls`` (``mixin`` among its bases, before the Lightning
    strategy), with its closest spelling: Lightning's strategy would only say that its own ``__init__`` got an
    unexpected keyword argument. ``known``: the Lightning strategy's keyword arguments, None when it takes any."""
    unknown = [] if known is None else [name for name in kwargs if name not in known]
    if not unknown:
        return
    own = sorted(_own_names(cls, mixin))
    parent = next(c for c in cls.__mro__[cls.__mro__.index(mixin) + 1 :] if "__init__" in vars(c))
    # csx_ddp given csx_fsdp's state_dict_type, say: no misspelling, another strategy
    takers = [other for other in _strategies(mixin) if other is not cls and _takes(other, mixin, unknown[0])]
    if takers:
        named = " and ".join(f"{other.__name__} ({other.strategy_name})" for other in takers)  # type: ignore[attr-defined]
        hint = (
            f"{unknown[0]} is an argument of {named}; fix: use {'it' if len(takers) == 1 else 'one of them'}, or give"
        )
    else:
        hint = f"{did_you_mean(unknown[0], [*CSX_OPTION_NAMES, *own, *(known or ())])}fix: give"
    raise UsageTypeError(
        f"{cls.__name__} got an unexpected keyword argument {unknown[0]!r}; {hint} the CS-X options "
        f"{list(CSX_OPTION_NAMES)}{f', its own {own}' if own else ''} or {parent.__name__}'s arguments"
    )


def _own_names(cls: type, mixin: type) -> set[str]:
    """The keyword arguments of the strategy ``cls``'s classes before ``mixin``, the csx strategy's own."""
    return {name for c in cls.__mro__[: cls.__mro__.index(mixin)] for name in _own_keyword_names(c)}


def _strategies(mixin: type) -> list[type]:
    """The csx strategies: the classes of this package below ``mixin``, by name."""
    below: list[type] = mixin.__subclasses__()
    found = {strategy for child in below for strategy in (child, *_strategies(child))}
    return sorted((c for c in found if c.__module__.startswith("cs_lightning.")), key=lambda c: c.__name__)


def _takes(strategy: type, mixin: type, name: str) -> bool:
    known = strategy._lightning_arguments()  # type: ignore[attr-defined]
    return name in _own_names(strategy, mixin) or (known is not None and name in known)


def check_timeout(cls: type, kwargs: Mapping[str, Any]) -> None:
    """Refuse, as the strategy is built, a ``timeout`` that is not a ``timedelta``: torch would refuse it only
    once every process had started, in a traceback per rank."""
    timeout = kwargs.get("timeout")
    if timeout is None or isinstance(timeout, timedelta):
        return
    seconds = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    fix = f"timeout=timedelta(seconds={timeout!r})" if seconds else "a datetime.timedelta"
    raise UsageTypeError(
        f"{cls.__name__} got timeout={timeout!r}: the collectives' timeout is a datetime.timedelta; pass {fix}"
    )


def _own_keyword_names(cls: type) -> set[str]:
    """The named keyword arguments of the ``__init__`` that ``cls`` itself defines (none if it defines none)."""
    init = cls.__dict__.get("__init__")
    return set(keyword_names(init)[0]) if init is not None else set()


def _check_backend(backend: object) -> None:
    """Refuse, as the strategy is built, a backend torch.compile would refuse only at setup (after the run has
    written its log folder): a name torch does not know, or neither a name nor a callable. Looking a name up
    imports every backend torch registers (0.2-0.4 s once per process), so the default, torch's own, is not
    looked up: a strategy built without ``compile_backend`` pays nothing."""
    if callable(backend):
        return
    if not isinstance(backend, str):
        raise UsageTypeError(
            f"compile_backend={backend!r} is neither a backend name nor a callable; {_backend_choices()}"
        )
    if backend == _DEFAULT_BACKEND:
        return
    try:
        torch._dynamo.lookup_backend(backend)
    except torch._dynamo.exc.InvalidBackend:
        hint = did_you_mean(backend, torch._dynamo.list_backends(exclude_tags=()))
        raise UsageError(
            f"compile_backend={backend!r} is not a torch.compile backend; {hint}{_backend_choices()}"
        ) from None


def _backend_choices() -> str:
    return (
        f"pass one of {torch._dynamo.list_backends()} (torch._dynamo.list_backends(); its debug backends such as"
        " 'eager' and 'aot_eager' work too) or a backend callable."
    )
