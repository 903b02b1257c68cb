"""The cs_lightning error hierarchy: catch ``CSLightningError`` to catch them all.

Each class also derives from the builtin that fits, so ``except ValueError`` / ``except TypeError``
keep working: a value refused is a `UsageError` (a ValueError), an argument of the wrong kind a
`UsageTypeError` (a TypeError); YAML mistakes are `ConfigError`s at their key path.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CSLightningError(Exception):
    """Base class of every error cs_lightning raises on purpose."""


class UsageError(CSLightningError, ValueError):
    """A cs_lightning function or class was given a value it does not take."""


class TrainerArgumentError(UsageError):
    """A Trainer argument the csx strategies cannot run with, named by ``argument`` (the CLI says the error at
    ``trainer.<argument>``); the message says the fix."""

    def __init__(self, argument: str, message: str) -> None:
        self.argument = argument
        super().__init__(message)

    def __reduce__(self) -> tuple[type[TrainerArgumentError], tuple[object, ...]]:
        return type(self), (self.argument, str(self))


class UsageTypeError(CSLightningError, TypeError):
    """A cs_lightning function or class was given something of the wrong kind."""


class DeferredInitError(CSLightningError, RuntimeError):
    """A constructor did something deferred initialization cannot replay faithfully."""


class DeferredInitUsageError(UsageTypeError):
    """``deferred_init`` or ``materialize`` was given something other than what they take."""


class DeferredInitWarning(UserWarning):
    """Deferred initialization fell back to eager work, or found something suspicious."""


# A YAML key path: mapping keys and list indices, outermost first, e.g. ("schedulers", 0, "LinearLR").
KeyPath = tuple[str | int, ...]


def format_key_path(path: KeyPath) -> str:
    """``("schedulers", 0, "SequentialLR", "schedulers", 1)`` -> ``schedulers[0].SequentialLR.schedulers[1]``.

    The one place a key path becomes text: an index is ``[i]``, a key follows a dot.
    """
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else f".{key}" if text else str(key)
    return text


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the choice closest to a misspelt ``word``, or ``""`` when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


class ConfigError(CSLightningError, ValueError):
    """A YAML configuration is wrong at key path ``path``; the message says the fix.

    A caller that knows where the failing block sits re-raises with ``err.under(*prefix)``:
    the path grows as a tuple, the text is composed only by ``format_key_path``.
    """

    def __init__(self, path: KeyPath | str, message: str) -> None:
        """``path``: a tuple of keys and indices, or one key as a string (``"--out"``)."""
        self.path: KeyPath = (path,) if isinstance(path, str) else tuple(path)
        self.message = message
        super().__init__(f"{self.key}: {message}" if self.path else message)

    @property
    def key(self) -> str:
        """The key path as written in error lines, e.g. ``schedulers[0].LinearLR``."""
        return format_key_path(self.path)

    def under(self, *prefix: str | int) -> ConfigError:
        """The same error, of the same class, at ``prefix + path``: where the block sits in a larger file."""
        return self.at((*prefix, *self.path))

    def at(self, path: KeyPath) -> ConfigError:
        """The same error, of the same class, at ``path`` instead: where the user wrote what was read."""
        return type(self)(path, self.message)

    def __reduce__(self) -> tuple[type[ConfigError], tuple[object, ...]]:
        return type(self), (self.path, self.message)  # pickles (to another rank) with its path


class ConfigTypeError(ConfigError, TypeError):
    """A YAML value of the wrong kind, or a required argument missing (a TypeError, as in a call)."""


class ParamGroupTagsError(ConfigError):
    """A scheduler's ``param_group_tags`` match no param group of its optimizer.

    ``problem`` says what; the fix follows it, by default the one for a scheduler built in
    Python (tag the optimizer's groups). A ConfigError (a ValueError) so that ``under`` keeps
    the class while the key path grows through nested YAML blocks; the CLI catches it by type
    and puts the fix its config allows in its place (``with_fix``).
    """

    PYTHON_FIX = (
        "fix: give the optimizer's param groups the tags you mean (a group {'params': [...], 'tags': "
        "{'decoder'}}) or drop param_group_tags"
    )

    def __init__(self, path: KeyPath | str, problem: str, fix: str = PYTHON_FIX) -> None:
        self.problem, self.fix = problem, fix
        super().__init__(path, f"{problem}; {fix}")

    def at(self, path: KeyPath) -> ParamGroupTagsError:
        return type(self)(path, self.problem, self.fix)

    def with_fix(self, fix: str) -> ParamGroupTagsError:
        """The same problem at the same path, followed by ``fix`` instead."""
        return type(self)(self.path, self.problem, fix)

    def __reduce__(self) -> tuple[type[ConfigError], tuple[object, ...]]:
        return type(self), (self.path, self.problem, self.fix)


class CheckpointSchedulersError(ConfigError):
    """``ckpt_path`` holds schedulers that the configured ones cannot resume from (another number of
    them, or another class at a position): Lightning would pair them by position, or fail deep inside."""


class CheckpointMismatchError(CSLightningError, RuntimeError):
    """``ckpt_path`` holds another model's weights (other names, or other shapes): refused before anything is
    loaded. A RuntimeError, as torch's ``load_state_dict`` raises for the same mistake."""


class ClosedFormError(CSLightningError, TypeError):
    """A scheduler's ``_get_closed_form`` cannot be evaluated on a tensor of steps."""


class TooLargeError(CSLightningError, MemoryError):
    """A result would not fit in this machine's memory; the message says how to ask for less."""


class GraphBreakError(CSLightningError, RuntimeError):
    """The training step does not run as one graph; the message names file, line and fix."""


class ShardingError(CSLightningError, ValueError):
    """``csx_fsdp`` cannot shard the model as written; the message names the parameters and the fix."""


class NotConvertible(CSLightningError, ValueError):
    """A torch scheduler that has no closed-form equivalent: ``reason`` says why, ``where`` which
    one (outermost first, e.g. ``("schedulers[1] (StepLR)",)``); re-raise ``under`` a place to add one."""

    def __init__(self, reason: str, where: tuple[str, ...] = ()) -> None:
        self.reason, self.where = reason, tuple(where)
        super().__init__(": ".join((*self.where, reason)))

    def under(self, place: str) -> NotConvertible:
        return NotConvertible(self.reason, (place, *self.where))

    def __reduce__(self) -> tuple[type[NotConvertible], tuple[str, tuple[str, ...]]]:
        return type(self), (self.reason, self.where)
