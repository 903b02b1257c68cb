"""Parser and constructor errors turned into the one line `cs-lightning` prints: key path, problem, fix."""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from lightning.pytorch.cli import LightningCLI

from cs_lightning.errors import ConfigError, KeyPath

_NOISE = re.compile(r"^(Does not validate against|Subtypes:|Errors:|Expected a <class 'NoneType'>|Given value)")


def _flatten(message: str) -> str:
    """jsonargparse's nested report -> its informative lines, joined on one line."""
    lines = [line.strip().lstrip("- ").strip() for line in message.splitlines()]
    return " ".join(line for line in lines if line and not _NOISE.match(line))


def _parser_error(message: str, own_commands: Iterable[str]) -> ConfigError:
    """An argparse/jsonargparse error message -> a `ConfigError` at the key it names, with a fix
    (`own_commands`: those `cs-lightning` runs besides Lightning's, for the hint on a wrong one)."""
    unknown = re.search(r"does not accept option '([^']+)'", message) or re.search(
        r"[Uu]nrecognized arguments: (\S+)", message
    )
    if unknown:
        return ConfigError(
            _dotted(unknown.group(1)),
            "unknown key; fix: remove it or correct its spelling (see cs-lightning fit --help)",
        )
    required = re.search(r"arguments are required: (?:\w+\.)?(\S+)", message)
    if required:
        return ConfigError(
            _dotted(required.group(1)), f"missing; fix: add a {required.group(1)}: block (class_path: ...)"
        )
    if "subcommand" in message:
        given = re.search(r"invalid choice: '([^']*)'", message)
        problem = f"unknown command {given.group(1)!r}" if given else "no command given"
        # Lightning's message lists its own commands only: name every one, and how to start
        lightning = "|".join(LightningCLI.subcommands())
        return ConfigError(
            (),
            f"{problem}; fix: cs-lightning {lightning} --config run.yaml, or cs-lightning "
            f"{'|'.join(own_commands)} (each takes --help)",
        )
    keyed = re.match(r'Parser key "([^"]+)":\s*(.*)', message, flags=re.DOTALL)
    if not keyed:
        return ConfigError((), f"{_flatten(message)}; fix: see cs-lightning --help")
    key, detail = _dotted(keyed.group(1)), _flatten(keyed.group(2))
    if key == ("config",):
        return ConfigError(key, f"{detail}; fix: check the path given to --config")
    class_problem = re.match(r"Problem with given class_path '([^']+)':\s*(.*)", detail)
    if not class_problem:
        return _type_error(key, keyed.group(2)) or ConfigError(key, f"{detail}; fix: correct this value")
    class_path, problem = class_problem.groups()
    option = re.search(r"Option '([^']+)' is not accepted", problem)
    if option:
        return ConfigError(
            (*key, "init_args", option.group(1)),
            f"{class_path} has no such argument; fix: remove it or correct its spelling",
        )
    return ConfigError(
        (*key, "class_path"),
        f"cannot load {class_path!r} ({problem}); "
        "fix: check the dotted path, and list the module or .py file under imports:",
    )


_TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _type_error(key: KeyPath, report: str) -> ConfigError | None:
    """jsonargparse's "Expected a <class 'int'>" for a plain-typed value, said in words, or None."""
    expected = set(re.findall(r"Expected a <class '(\w+)'>", report)) - {"NoneType"}
    if expected == {"int", "float"}:
        expected = {"float"}  # either one: a number
    given = re.search(r"(?:Got value|Given value): (.*)", report)
    if len(expected) != 1 or not expected <= _TYPE_NAMES.keys() or given is None:
        return None
    (name,) = expected
    wanted, value = _TYPE_NAMES[name], given.group(1).strip()
    fix = f"write {wanted}"
    with contextlib.suppress(ValueError, OverflowError):
        if name == "int" and float(value).is_integer():  # 1.0e9 in YAML is a float
            fix += f", e.g. {int(float(value))}"
    return ConfigError(key, f"expected {wanted}, got {value!r}; fix: {fix}")


def _dotted(key: str) -> KeyPath:
    """A key as jsonargparse names it (`trainer.max_steps`: it has no list indices) as a key path."""
    return tuple(key.split("."))


def _instantiation_error(config: Mapping[str, Any], err: Exception) -> ConfigError:
    """A model/data constructor failed: say which key, from the class_path in the report."""
    text = _flatten(str(err))
    for key in ("model", "data"):
        class_path = config.get(f"{key}.class_path") if config.get(key) else None  # jsonargparse Namespace
        if class_path and class_path in str(err):
            return ConfigError(
                (key, "init_args"),
                f"{class_path.rsplit('.', 1)[-1]} failed to build: {text.split(' Given value')[0]}; "
                f"fix: correct {key}.init_args",
            )
    return ConfigError("trainer", f"{type(err).__name__}: {text}; fix: correct the trainer: block")


class _OneLineParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so errors stay one line."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(self.prog.removeprefix("cs-lightning "), f"{message}; fix: see {self.prog} --help")
