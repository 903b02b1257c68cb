"""YAML configuration files, and the ``{Name: {args}}`` blocks in them: one reader, one block parser.

Every command reads its YAML files through `read_yaml`: jsonargparse's loader, so ``3e-4``
is a float exactly as ``cs-lightning fit`` reads it, and a key given twice in one mapping
is refused, naming both lines (YAML loaders keep the last one silently). Every optimizer
and scheduler block goes through `parse_block`, which reads the three spellings::

    {AdamW: {lr: 3.0e-4}}                                        # Cerebras Model Zoo
    {class_path: torch.optim.AdamW, init_args: {lr: 3.0e-4}}     # Lightning / jsonargparse
    AdamW                                                        # a bare name, where allowed

and returns the name, the arguments and the key path of the arguments, so that every
error about an argument names the key the user wrote. `check_arguments` then holds the
arguments against the class's constructor.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from cs_lightning.errors import ConfigError, ConfigTypeError, KeyPath


def load_yaml(text: str) -> Any:
    """YAML text -> Python values, as ``cs-lightning fit`` reads them (``3e-4`` is a float)."""
    # imported here: cs_lightning.schedulers imports this module and must not need jsonargparse
    from jsonargparse import get_loader

    return get_loader("yaml")(text)


def yaml_problem(err: yaml.YAMLError, text: str) -> str:
    """What YAML could not read in ``text``, and where, in a few words (its own report spans several lines):
    at a line and column when the text has several lines, at a character when it is one (a value given
    on the command line)."""
    problem, mark = getattr(err, "problem", None) or err, getattr(err, "problem_mark", None)
    if mark is None:
        return str(problem)
    if len(text.splitlines()) > 1:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return f"{problem} at character {mark.index + 1}"  # from the text's start: right also past a last newline


def colon_hint(text: str) -> str:
    """What to say of ``a:1`` in a value written inline: one word to YAML in a block, and a syntax error inside
    ``[...]`` or ``{...}`` to libyaml; "" when the text has none."""
    return " (YAML reads a:1 as one word: write a: 1)" if re.search(r"\w:[^\s/]", text) else ""


def load_inline(key: KeyPath | str, text: str) -> Any:
    """A value written on the command line, read as YAML as a ``--config`` file's values are; a `ConfigError` at
    ``key`` when it is not YAML."""
    try:
        return load_yaml(text)
    except yaml.YAMLError as err:
        problem = yaml_problem(err, text)
        raise ConfigError(key, f"{text!r} is not YAML ({problem}); fix: correct its syntax{colon_hint(text)}") from None


def read_yaml(path: Path, key: KeyPath | str, same_value_ok: bool = False) -> tuple[Any, list[str]]:
    """The parsed file at `path`, and notes on keys repeated with an equal scalar value.

    A key repeated with a different value (something would be lost) raises `ConfigError` at
    `key`; with `same_value_ok`, one repeated with an equal scalar value is only noted
    (`convert` reads others' files, which their tools accepted). So do a missing file, bytes
    that are not UTF-8, and YAML syntax errors, each with its position.
    """
    if not path.is_file():
        raise ConfigError(key, f"{str(path)!r} is not a file; fix: check the path")
    try:
        text = path.read_text(encoding="utf-8")
        data = load_yaml(text)
    except UnicodeDecodeError as err:
        raise ConfigError(
            key,
            f"{str(path)!r} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
            f"{err.start}); fix: save the file as UTF-8",
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(
            key, f"{str(path)!r} is not valid YAML ({yaml_problem(err, text)}); fix: correct the YAML syntax there"
        ) from None
    notes: list[str] = []
    refused: list[str] = []
    for first, second, name, same in _duplicate_keys(text):
        where = f"key {name!r} twice, at lines {first} and {second}"
        (notes if same and same_value_ok else refused).append(where)
    if refused:
        raise ConfigError(key, f"{str(path)!r} gives {refused[0]}; fix: keep one of them")
    return data, [f"{path} gives {where}, with the same value" for where in notes]


def _duplicate_keys(text: str) -> list[tuple[int, int, str, bool]]:
    """(first line, second line, key, same scalar value) of each key repeated in one mapping, in file order."""
    pending = [yaml.compose(text, Loader=yaml.SafeLoader)]
    visited: set[int] = set()
    found = []
    while pending:
        node = pending.pop()
        if node is None or id(node) in visited:  # an alias shares its anchor's node
            continue
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, tuple[int, Any]] = {}
            for name, value in node.value:
                if isinstance(name, yaml.ScalarNode) and name.value != "<<":  # << merges, not a key
                    line = name.start_mark.line + 1
                    if name.value in seen:
                        first, earlier = seen[name.value]
                        same = (
                            isinstance(value, yaml.ScalarNode)
                            and isinstance(earlier, yaml.ScalarNode)
                            and (value.tag, value.value) == (earlier.tag, earlier.value)
                        )
                        found.append((first, line, name.value, same))
                    seen[name.value] = line, value
                pending += [name, value]
        elif isinstance(node, yaml.SequenceNode):
            pending += node.value
    return sorted(found, key=lambda item: (item[1], item[0]))


class Block(NamedTuple):
    """One parsed ``{Name: {args}}`` block."""

    name: str  # as written: a class name, or the dotted class_path
    args: dict[str, Any]  # a copy: callers may add to it
    path: KeyPath  # key path of the arguments: (..., Name), (..., "init_args"), or the block's own for a bare name


def parse_block(spec: Any, path: KeyPath, kind: str, bare_name_ok: bool = False) -> Block:
    """Read an optimizer or scheduler block (`kind` names which, in messages) found at key path `path`.

    Raises `ConfigError` naming the key path and the fix when it is none of the spellings.
    """
    if isinstance(spec, str) and bare_name_ok:
        return Block(spec, {}, path)
    if not isinstance(spec, Mapping):
        raise ConfigError(
            path,
            f"expected a mapping such as {{Name: {{argument: value}}}}, got {spec!r}; "
            f"fix: write the {kind} as {{Name: {{args}}}} or class_path/init_args",
        )
    if "class_path" in spec:
        return _class_path_block(spec, path)
    if set(spec) == {"init_args"}:  # e.g. --optimizer.lr 0.001 with no optimizer given before
        raise ConfigError(
            path,
            f"init_args with no class_path, and no {kind} given before them to add to; "
            f"fix: name the class, class_path: package.module.Name, or write {{Name: {{args}}}}",
        )
    if kind == "optimizer" and isinstance(spec.get("optimizer_type"), str):  # pasted from a legacy Model Zoo config
        raise ConfigError(
            path,
            f"{{optimizer_type: {spec['optimizer_type']}, ...}} is the legacy Model Zoo spelling, which cs-lightning "
            f"reads once converted; fix: write {{{spec['optimizer_type']}: {{lr: ..., ...}}}}, or cs-lightning "
            "convert the Model Zoo config it came from",
        )
    if len(spec) != 1:
        several = " (use a list for several)" if kind == "scheduler" else ""
        raise ConfigError(
            path,
            f"expected exactly one {kind} name, got keys {sorted(map(str, spec))}; "
            f"fix: write {{Name: {{args}}}}, one per mapping{several}",
        )
    ((name, args),) = spec.items()
    args_path = (*path, str(name))
    return Block(str(name), _arguments(args, args_path, f"{name}: {{argument: value, ...}}"), args_path)


def _class_path_block(spec: Mapping[str, Any], path: KeyPath) -> Block:
    extra = sorted(map(str, set(spec) - {"class_path", "init_args"}))
    if extra:
        raise ConfigError(
            (*path, extra[0]), "unexpected key next to class_path; fix: keep only class_path and init_args"
        )
    if not isinstance(spec["class_path"], str):
        raise ConfigError(
            (*path, "class_path"),
            f"expected a dotted class path, got {spec['class_path']!r}; fix: write class_path: package.module.Name",
        )
    args_path = (*path, "init_args")
    args = _arguments(spec.get("init_args"), args_path, "init_args: {argument: value, ...}")
    return Block(spec["class_path"], args, args_path)


def _arguments(args: Any, path: KeyPath, shape: str) -> dict[str, Any]:
    """The arguments of a block as a new dict (none written: no arguments)."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise ConfigError(path, f"expected a mapping of arguments, got {args!r}; fix: write {shape}")
    return dict(args)


def keyword_names(init: Callable[..., Any]) -> tuple[list[str], bool]:
    """The names ``init`` (a function or a class) takes by keyword, in its signature's order, and whether
    it takes any other (``**kwargs``)."""
    parameters = inspect.signature(init).parameters.values()
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = [p.name for p in parameters if p.kind in by_keyword and p.name != "self"]
    return names, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def check_arguments(
    cls: type,
    args: Mapping[str, Any],
    path: KeyPath,
    ours: Collection[str] = (),
    filled: Collection[str] = (),
    note: str = "",
) -> None:
    """Every argument in ``args`` (a block's, at key path ``path``) is one ``cls``'s constructor takes, and
    every one it needs is given.

    ``ours``: the arguments the caller passes itself (an optimizer's parameters, a scheduler's optimizer),
    which a block may not give. ``filled``: the ones the caller works out when the block leaves them out.
    ``note`` ends the fix of an unknown argument (the optimizer's pointer to ``cs-lightning convert``).
    An unknown argument is a `ConfigError` at its own key; missing ones a `ConfigTypeError` at ``path``.
    """
    named, takes_any = keyword_names(cls)  # takes_any: it takes every name
    takes = [name for name in named if name not in ours]
    for arg in args:
        # a name with a colon is YAML's reading of `lr:0.1`, whatever **kwargs would take
        if arg in ours or (arg not in takes and (not takes_any or ":" in arg)):
            fix = _spelt(cls, arg, takes, ours, note)
            raise ConfigError((*path, arg), f"{cls.__name__} has no argument {arg!r}; fix: {fix}")
    missing = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.name in takes and p.name not in args and p.name not in filled and p.default is p.empty
    ]
    if missing:
        who = "" if path and path[-1] == cls.__name__ else f"{cls.__name__} "  # the key names it: said once
        raise ConfigTypeError(
            path, f"{who}needs {', '.join(missing)}; fix: add " + ", ".join(f"{m}: <value>" for m in missing)
        )


def refused_at(path: KeyPath, error: ValueError | TypeError, given: str = "") -> ConfigError:
    """The refusal ``error`` of a constructor given the values of the block at ``path``, as one line that
    ends in a fix. A TypeError stays one (`ConfigTypeError`): a wrong kind of value, not a wrong value.

    ``given`` starts the message when the constructor's own words do not name the values (torch's
    optimizers: ``Invalid learning rate: -1``). A message that carries its own fix keeps it.
    """
    message = given + str(error)
    if "fix:" not in message:
        message = f"{message.rstrip('.')}; fix: correct the value"
    return (ConfigTypeError if isinstance(error, TypeError) else ConfigError)(path, message)


# Lightning's seed_everything seeds numpy too, which takes a uint32 (and raises beyond it)
SEED_MAX = 2**32 - 1


def check_whole_number(key: KeyPath | str, value: Any, minimum: int, maximum: int) -> None:
    """Refuse, at ``key``, a value that is not a whole number from ``minimum`` to ``maximum`` (YAML's
    true and false are not numbers, though Python's bools are ints)."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ConfigError(
            key, f"expected a whole number from {minimum} to {maximum}, got {value!r}; fix: give one in that range"
        )


def _spelt(cls: type, arg: str, takes: list[str], ours: Collection[str], note: str) -> str:
    """How to correct the unknown argument ``arg``; ``note`` ends the fix unless it is a typo of YAML's."""
    name, colon, value = arg.partition(":")
    if colon and name in takes:  # {lr:0.1}: YAML reads one key with no value
        return f"write {name}: {value} (YAML reads {arg} as one word)"
    if arg in ours:
        return "remove it: cs-lightning passes it itself" + note
    close = difflib.get_close_matches(arg, takes, n=1)
    return (f"did you mean {close[0]}?" if close else f"{cls.__name__} takes {', '.join(takes)}") + note
