"""Argument checks shared by the schedulers: each raises with the argument's name and value.

A schedule is validated once, in its constructor, so a bad argument is reported where it
was written instead of surfacing later as a nan, an inf or a silently constant value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

from cs_lightning.errors import UsageError, UsageTypeError
from cs_lightning.user_code import import_dotted


def _where(owner: str, name: str, value: Any) -> str:
    return f"{owner}: got {name}={value!r}"


def _number_as_text(value: Any, whole: bool) -> str:
    """The fix for a number given as text (``whole``: an int is asked for), or "". YAML 1.1 (PyYAML's
    ``safe_load``) reads an exponent without a dot and a sign (``1e-3``, ``1.0e3``) as a string."""
    try:
        number = float(value) if isinstance(value, str) else None
    except ValueError:
        return ""
    if number is None or not math.isfinite(number) or (whole and not number.is_integer()):
        return ""
    if whole:
        return f", not text; fix: write {int(number)}"
    if "e" in value.lower():  # the same number as YAML reads it: a dot and a signed exponent
        return f", not text; fix: write {number!r} or {number:.1e} (YAML reads {value} as text)"
    return f", not text; fix: write {number!r}, without quotes"


def number(owner: str, name: str, value: Any) -> float:
    """A finite real number (bool excluded: `True` as a learning rate is a typo)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise UsageTypeError(
            f"{_where(owner, name, value)}; {name} must be a number{_number_as_text(value, whole=False)}"
        )
    if not math.isfinite(value):
        raise UsageError(f"{_where(owner, name, value)}; {name} must be finite")
    return float(value)


def positive(owner: str, name: str, value: Any) -> float:
    """A finite number > 0."""
    if number(owner, name, value) <= 0:
        raise UsageError(f"{_where(owner, name, value)}; {name} must be > 0; fix: give a number above 0")
    return float(value)


def non_negative(owner: str, name: str, value: Any) -> float:
    """A finite number >= 0."""
    if number(owner, name, value) < 0:
        raise UsageError(f"{_where(owner, name, value)}; {name} must be >= 0; fix: give 0 or more")
    return float(value)


# Steps are counted in int64 tensors, as torch counts them: a length or milestone past this
# would overflow as the schedule is evaluated.
_MOST_STEPS = 2**63 - 1


def integer(owner: str, name: str, value: Any, minimum: int) -> int:
    """An int from minimum to int64's largest. A whole-number float (1000.0) is that int: YAML
    reads ``1e3`` and ``1.0e3`` as floats; a fractional one is refused, since lengths count steps."""
    given = value
    if isinstance(value, Real) and not isinstance(value, (bool, Integral)):
        steps = float(value)
        if not steps.is_integer():
            example = max(minimum, math.floor(steps)) if math.isfinite(steps) else minimum
            raise UsageTypeError(
                f"{_where(owner, name, value)}; {name} must be an int; fix: write an integer, e.g. {example}"
            )
        value = int(steps)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise UsageTypeError(f"{_where(owner, name, value)}; {name} must be an int{_number_as_text(value, whole=True)}")
    count = int(value)
    if count < minimum:
        raise UsageError(f"{_where(owner, name, value)}; {name} must be >= {minimum}")
    if count > _MOST_STEPS:
        raise UsageError(f"{_where(owner, name, given)}; {name} counts steps in int64; fix: give at most {_MOST_STEPS}")
    return count


def flag(owner: str, name: str, value: Any) -> bool:
    """A bool."""
    if not isinstance(value, bool):
        raise UsageTypeError(f"{_where(owner, name, value)}; {name} must be True or False")
    return value


def choice(owner: str, name: str, value: Any, allowed: Sequence[str]) -> str:
    """One of a few strings."""
    if value not in allowed:
        raise UsageError(f"{_where(owner, name, value)}; {name} must be one of {list(allowed)}")
    return value


def milestones(owner: str, name: str, value: Any, minimum: int = 0) -> list[int]:
    """A list of strictly increasing ints >= minimum (a numpy array is fine too). A milestone
    at 0 takes effect from the first step (a stage of no steps before it)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise UsageTypeError(f"{_where(owner, name, value)}; {name} must be a list of ints")
    steps = [integer(owner, f"{name}[{i}]", m, minimum) for i, m in enumerate(value)]
    for i in range(1, len(steps)):
        if steps[i] <= steps[i - 1]:
            raise UsageError(
                f"{_where(owner, name, list(value))}; {name} must be strictly increasing "
                f"({name}[{i}]={steps[i]} after {steps[i - 1]})"
            )
    return steps


def numbers(owner: str, name: str, value: Any) -> list[float]:
    """A non-empty list of finite numbers (a numpy array is fine too, as for milestones)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise UsageTypeError(f"{_where(owner, name, value)}; {name} must be a non-empty list of numbers")
    return [number(owner, f"{name}[{i}]", v) for i, v in enumerate(value)]


def function(owner: str, name: str, value: Any) -> Any:
    """A callable (a function of the step tensor), or the dotted import path of one
    (``module.function``: the form YAML can give)."""
    found = _imported(owner, name, value) if isinstance(value, str) else value
    if not callable(found):
        raise UsageTypeError(f"{_where(owner, name, value)}; {name} must be a function of the step tensor")
    return found


def _imported(owner: str, name: str, path: str) -> Any:
    try:
        return import_dotted(path)
    except ImportError as error:
        fix = "fix: give module.function, its module importable or its file listed under imports:"
        raise UsageError(f"{_where(owner, name, path)}; {error}; {fix}") from None
