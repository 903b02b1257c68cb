"""Parser and constructor errors turned into the one line `cs-lightning` prints: key path, problem, fix."""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import itertools
import re
import sys
import traceback
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.strategies import StrategyRegistry
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from cs_lightning.cli.block_arguments import SCHEDULERS_INSTEAD
from cs_lightning.config_blocks import colon_hint, load_inline, refused_at
from cs_lightning.errors import ConfigError, KeyPath, TrainerArgumentError, did_you_mean, format_key_path
from cs_lightning.param_groups import ENTRY_EXAMPLE
from cs_lightning.strategies import CSX_OPTION_NAMES, CSXOptions, CSXSystemMixin
from cs_lightning.user_code import import_dotted, imported_or_none, is_own_file, raised

# A union's report: its frame, and the bare "Expected a <class 'str'>" of each member that is not the one meant
_NOISE = re.compile(r"^(Does not validate against|Subtypes:|Errors:|Expected a <class '[\w.]+'>$|Given value)")


def _flatten(message: str) -> str:
    """jsonargparse's nested report -> its informative lines, joined on one line."""
    lines = [line.strip().lstrip("- ").strip() for line in message.splitlines() if line.strip()]
    informative = [line for line in lines if not _NOISE.match(line)]
    # when every member of a union said only "Expected a <class ...>", the frame is all there is to say
    return " ".join(informative or lines)


def parser_error(message: str, own_commands: Iterable[str]) -> ConfigError:
    """An argparse/jsonargparse error message -> a `ConfigError` at the key it names, with a fix
    (`own_commands`: those `cs-lightning` runs besides Lightning's, for the hint on a wrong one).
    An unknown key is `unknown_key`'s: naming the closest key takes the parser."""
    required = re.search(r"arguments are required: (?:\w+\.)?(\S+)", message)
    if required and not message.startswith("Parser key"):  # a block of the config; a class's own is below
        return ConfigError(
            _dotted(required.group(1)), f"missing; fix: add a {required.group(1)}: block (class_path: ...)"
        )
    if "subcommand" in message:
        given = re.search(r"invalid choice: '([^']*)'", message)
        problem = f"unknown command {given.group(1)!r}" if given else "no command given"
        # Lightning's message lists its own commands only: name every one, and how to start
        hint = did_you_mean(given.group(1), [*LightningCLI.subcommands(), *own_commands]) if given else ""
        return ConfigError(
            (),
            f"{problem}; {hint}fix: cs-lightning {'|'.join(LightningCLI.subcommands())} --config run.yaml, or "
            f"cs-lightning {'|'.join(own_commands)} (each takes --help)",
        )
    keyed = re.match(r'Parser key "([^"]+)":\s*(.*)', message, flags=re.DOTALL)
    if not keyed:
        return ConfigError((), f"{_flatten(message)}; fix: see cs-lightning --help")
    key, detail = _dotted(keyed.group(1)), _flatten(keyed.group(2))
    if key == ("config",):
        return ConfigError(key, f"{detail}; fix: check the path given to --config")
    nested = re.search(r"NestedArg\(key='([^']+)', val='([^']*)'\)", keyed.group(2))
    named = re.search(r"Expected a dot import path string: (\S+)", keyed.group(2))
    if nested and named:
        return _option_of_a_name(key, named.group(1), *nested.groups())
    registered = _registered_class_path(key, named.group(1)) if named else None
    if named and registered:  # class_path: csx_fsdp
        # a name may stand for its class and arguments too (ddp_spawn: DDPStrategy, start_method: spawn)
        preset = StrategyRegistry[named.group(1)]["init_params"]
        also = f", with init_args {preset} beside yours" if preset else ""
        return ConfigError(
            (*key, "class_path"),
            f"{named.group(1)!r} is the strategy's name, and class_path takes its class's import path; "
            f"fix: class_path: {registered}{also}",
        )
    beside = _beside_class_path(keyed.group(2))
    if beside:  # jsonargparse blames the class (or its base class) for it
        return ConfigError(
            (*key, beside),
            f"{beside!r} is beside class_path:, and a class's arguments are read under init_args: only; "
            f"fix: move it to {'.'.join(map(str, key))}.init_args.{beside}",
        )
    class_problem = re.search(r"Problem with given class_path '([^']+)':\s*(.*)", detail)
    if not class_problem:
        report = keyed.group(2)
        return (
            _choice_error(key, report)
            or _flow_error(key, report)  # first: a list written inline is the union's list member mistyped
            or _type_error(key, report)
            or _as_reported(key, report)
        )
    class_path, problem = class_problem.groups()
    return _class_path_error(key, class_path, problem, keyed.group(2))


def _class_path_error(key: KeyPath, class_path: str, problem: str, report: str) -> ConfigError:
    """jsonargparse's "Problem with given class_path" at ``key`` (``problem``, within its whole ``report``): an
    init_args value of the wrong type, a required argument missing, an unknown one, or a class that does not load."""
    init_arg = re.match(r'Parser key "([^"]+)":', problem)
    if init_arg:  # the class loaded; one of its init_args has a value of the wrong type
        at = (*key, "init_args", *_dotted(init_arg.group(1)))
        return _init_arg_error(at, report, init_arg.group(0), _refused_csx_option(at, class_path, problem))
    needed = re.search(r"arguments are required: (\S+)", problem)
    if needed:  # the class loaded; an argument without a default was not given
        name, dotted = needed.group(1), ".".join(map(str, key))
        return ConfigError(
            (*key, "init_args", name), f"{class_path} requires {name}; fix: give it as {dotted}.init_args.{name}"
        )
    option = re.search(r"Option '([^']+)' is not accepted", problem)
    if option:
        name = option.group(1)
        why = _decided_by(class_path).get(name)
        if why:
            return ConfigError((*key, "init_args", name), f"{class_path} sets {name} itself ({why}); fix: remove it")
        hint = did_you_mean(name, _arguments_of(class_path))
        return ConfigError(
            (*key, "init_args", name),
            f"{class_path} has no such argument; {hint}fix: remove it or correct its spelling",
        )
    return ConfigError(
        (*key, "class_path"),
        f"cannot load {class_path!r} ({problem}); "
        "fix: check the dotted path, and list the module or .py file under imports:",
    )


# jsonargparse's reports of a key no parser level takes, with the key as written
_UNKNOWN_KEY = (
    re.compile(r"does not accept option '(?P<key>[^']+)'"),  # "Subcommand 'fit' ...", "Group 'trainer' ..."
    re.compile(r"^Option '(?P<key>[^']+)' is not accepted"),  # the same mistake, under --print_config
    re.compile(r"[Uu]nrecognized arguments: (?P<key>[^\s=]+)"),  # on the command line
)
# Where Lightning's configs put a learning-rate scheduler; cs-lightning has a list of closed-form ones
_LIGHTNING_SCHEDULER_KEYS = ("lr_scheduler", "lr_schedulers", "scheduler")


def unknown_key(message: str, parser: ArgumentParser, command: str | None) -> ConfigError | None:
    """A report of a key `parser` does not take -> a `ConfigError` at the outermost such key, with
    the closest name at its level (None for any other report; `command`: the subcommand run).

    jsonargparse names the innermost key of an unknown block (`lr_scheduler.init_args.step_size`),
    and a key under a group relative to it under --print_config (`Group 'trainer' ... 'max_step'`).
    """
    found = next(filter(None, (pattern.search(message) for pattern in _UNKNOWN_KEY)), None)
    if found is None:
        return None
    if "nrecognized arguments" in message and _names_a_config_file(found["key"]):
        return ConfigError(
            found["key"],
            f"a config file is given after --config; fix: cs-lightning {command or 'fit'} --config {found['key']}",
        )
    group = re.match(r"Group '([^']+)'", message)
    dashes = "--" if found["key"].startswith("--") else ""  # as given: a command-line option or a YAML key
    parts = [*(group.group(1).split(".") if group else []), *found["key"].removeprefix("--").split(".")]
    depth, names = _first_unknown(parts, _config_keys(parser))
    return unknown_key_error(parts, depth, names, command, dashes)


def _names_a_config_file(word: str) -> bool:
    """Whether a command-line word that is no option is the path of a config file (given without --config)."""
    return not word.startswith("-") and word.endswith((".yaml", ".yml", ".json"))


def unknown_key_error(
    parts: list[str], depth: int, names: list[str], command: str | None, dashes: str = ""
) -> ConfigError:
    """The dotted key `parts`, unknown at `depth` where `names` are taken, named with the closest of them."""
    key = dashes + ".".join(parts[: depth + 1])
    if depth == 0 and parts[0] in _LIGHTNING_SCHEDULER_KEYS:
        return ConfigError(key, f"unknown key: {SCHEDULERS_INSTEAD}")
    close = difflib.get_close_matches(parts[depth], names, n=1)
    hint = f"did you mean {dashes + '.'.join([*parts[:depth], close[0]])!r}? " if close else ""
    help_command = " ".join(filter(None, ("cs-lightning", command, "--help")))
    return ConfigError(key, f"unknown key; {hint}fix: remove it or correct its spelling (see {help_command})")


def _first_unknown(parts: list[str], known: list[str]) -> tuple[int, list[str]]:
    """The index of the first of the dotted key's `parts` that no `known` key has at its level, and
    the names at that level; the last index and none when the key is unknown inside a value (a
    class's init_args), where jsonargparse's key is the one to name."""
    for depth, part in enumerate(parts):
        names = _names_under(parts[:depth], known)
        if not names:
            break
        if part not in names:
            return depth, names
    return len(parts) - 1, []


def _names_under(prefix: list[str], known: list[str]) -> list[str]:
    """The names one level below the dotted `prefix` among the `known` keys."""
    start = "".join(f"{part}." for part in prefix)
    return sorted({key[len(start) :].split(".")[0] for key in known if key.startswith(start)})


def _config_keys(parser: ArgumentParser) -> list[str]:
    """The keys, dotted, that `parser` takes in a config file: its options but help and the config files."""
    return [
        action.dest
        for action in parser._actions
        if action.dest not in ("help", "config", "print_config") and not action.dest.endswith(".help")
    ]


def _beside_class_path(report: str) -> str | None:
    """The first key written next to class_path: instead of under init_args:, read from the value the
    report shows (a Python literal; the last one shown is the reported key's, after its nested reports), or None."""
    given = re.findall(r"^\s*Given value: (\{.*\})$", report, flags=re.MULTILINE)
    try:
        value = ast.literal_eval(given[-1]) if given else None
    except (ValueError, SyntaxError):  # a value holding objects: no literal
        return None
    if not isinstance(value, dict) or "class_path" not in value:
        return None
    return next((name for name in value if name not in ("class_path", "init_args", "dict_kwargs", "__path__")), None)


def _init_arg_error(key: KeyPath, report: str, header: str, csx_option: ConfigError | None) -> ConfigError:
    """A class's init_arg refused by its type: the report nested under `header` (jsonargparse indents
    it) said at the init_arg's key, not the class path's: a csx strategy's option in the words of its
    own check (``csx_option``, the same as in Python, naming the choices), any other plain type in
    YAML's words, the rest as reported."""
    lines = report.splitlines()
    at = next(i for i, line in enumerate(lines) if header in line)
    depth = len(lines[at]) - len(lines[at].lstrip())
    nested = "\n".join(itertools.takewhile(lambda line: len(line) - len(line.lstrip()) > depth, lines[at + 1 :]))
    return csx_option or _type_error(key, nested) or _as_reported(key, nested)


def _as_reported(key: KeyPath, report: str) -> ConfigError:
    """A refusal that none of the above says in words: jsonargparse's report on one line, with the value
    given when the report's informative lines do not show it."""
    detail = _flatten(report)
    given = re.search(r"Given value: (.*)", report)
    if given is not None and given.group(1).strip() not in detail:
        detail += f" (got {given.group(1).strip()!r})"
    return ConfigError(key, f"{detail}; fix: correct this value")


def _option_of_a_name(key: KeyPath, name: str, option: str, value: str) -> ConfigError:
    """`--trainer.strategy.trace_check false` while the strategy is given by name (`csx`): options
    are set on a class, so say which one to give."""
    dotted = ".".join(map(str, key))
    registered = _registered_class(key, name)
    class_path = _registered_class_path(key, name) or "<class path>"
    meant = _closest_option(registered, option)
    spelt = "" if meant == option else f" (and its option is {meant})"
    refused = _refused_option_value(registered, meant, value)
    return ConfigError(
        key,
        f"{name!r} is given by name, which takes no options, so --{dotted}.{option} has nothing to set{spelt}; "
        f"fix: give the class too: --{dotted} {class_path} --{dotted}.{meant} "
        + (f"<value> ({refused})" if refused else value),
    )


def _refused_option_value(registered: object, option: str, value: str) -> str | None:
    """Why a csx strategy would refuse ``option`` set to ``value`` (YAML text), so the fix suggests no value
    that fails next; None when it takes it, or when the option is not one of the csx strategies' own."""
    if not (isinstance(registered, type) and issubclass(registered, CSXSystemMixin) and option in CSX_OPTION_NAMES):
        return None
    try:
        given = yaml.safe_load(value)
    except yaml.YAMLError:  # not YAML: the value is the user's to correct, as they wrote it
        return None
    try:
        with warnings.catch_warnings():  # the option alone (compile_backend without compile): only refusals count
            warnings.simplefilter("ignore")
            CSXOptions(**{option: given})
    except (ValueError, TypeError) as err:
        return str(err)
    return None


def _registered_class(key: KeyPath, name: str) -> object:
    """The class registered under strategy name ``name`` when ``key`` is a strategy's, else None."""
    return StrategyRegistry[name]["strategy"] if key[-1:] == ("strategy",) and name in StrategyRegistry else None


def _registered_class_path(key: KeyPath, name: str) -> str | None:
    """The import path of ``_registered_class``, by its package's public name when the package exports it."""
    registered = _registered_class(key, name)
    if not isinstance(registered, type):
        return None
    package = registered.__module__.split(".")[0]
    public = getattr(sys.modules.get(package), registered.__name__, None) is registered
    return f"{package if public else registered.__module__}.{registered.__name__}"


def _closest_option(strategy: object, option: str) -> str:
    """``option``, or the closest of a csx strategy's options when it has none of that name (a typo)."""
    if not (isinstance(strategy, type) and issubclass(strategy, CSXSystemMixin)):
        return option
    known = sorted(set(CSX_OPTION_NAMES) | (strategy._lightning_arguments() or set()))
    close = difflib.get_close_matches(option, known, n=1)
    return close[0] if option not in known and close else option


def _refused_csx_option(key: KeyPath, class_path: str, report: str) -> ConfigError | None:
    """A csx strategy's option that jsonargparse refused by its type (`compile_backend: 3`), in the words of the
    strategy's own check, which name the choices; None for any other class or argument."""
    given = re.search(r"(?:but got|Got value:) (.*)$", report)
    if given is None:
        return None
    try:
        value = yaml.safe_load(given.group(1))  # jsonargparse shows the value as Python writes it
    except yaml.YAMLError:
        return None
    return csx_option_error(class_path, key, value)


def csx_option_error(class_path: str, key: KeyPath, value: Any) -> ConfigError | None:
    """The error the strategy ``class_path`` raises, when it is a csx one, for ``value`` of the CS-X option
    that ``key`` ends with, at ``key``; None if it takes the value, or for any other class or argument."""
    strategy, name = import_dotted(class_path), key[-1]
    if not (isinstance(strategy, type) and issubclass(strategy, CSXSystemMixin)) or name not in CSX_OPTION_NAMES:
        return None
    try:
        CSXOptions(**{str(name): value})
    except (ValueError, TypeError) as error:
        return refused_at(key, error)
    return None


def _arguments_of(class_path: str) -> list[str]:
    """The arguments jsonargparse accepts for a class (what it checked the config against), or none."""
    # not config_blocks.keyword_names: jsonargparse follows **kwargs into the parent class, as it did when it checked
    try:
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(import_dotted(class_path), "of", fail_untyped=False)
    except Exception:  # noqa: BLE001 - only a hint in an error line: without it the line stands
        return []
    return [action.dest.removeprefix("of.") for action in parser._actions if action.dest.startswith("of.")]


def _decided_by(class_path: str) -> Mapping[str, str]:
    """The arguments of its parent class that a class sets itself, with how (``decided_arguments``: csx_fsdp's
    data_parallel_size...): correctly spelt, they are not in its signature, so jsonargparse does not take them."""
    decided = getattr(imported_or_none(class_path), "decided_arguments", None)  # without it the line stands
    return decided if isinstance(decided, Mapping) else {}


_TYPE_NAMES = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list",
    "dict": "a mapping",
}


# The blocks cs-lightning adds: what each takes, and an example, for a value of another kind
# (schedulers: CosineDecayLR; optimizer: [{AdamW: ...}]). Their types hold a str for the command line's sake.
_BLOCK_SHAPES: dict[KeyPath, tuple[str, str]] = {
    ("optimizer",): ("a mapping {Name: {args}} (or class_path/init_args)", "{AdamW: {lr: 0.001}}"),
    ("schedulers",): (
        "a list of {Name: {args}} mappings",
        "[{CosineDecayLR: {initial_learning_rate: 0.001, end_learning_rate: 0.0, total_iters: 100}}]",
    ),
    ("param_groups",): ("a list of {tag, params, adjust_learning_rate} mappings", f"[{ENTRY_EXAMPLE}]"),
}


def _type_error(key: KeyPath, report: str) -> ConfigError | None:
    """jsonargparse's "Expected a <class 'int'>" for a value of plain type, or of a union of plain types (its
    report then holds nothing but those), said in words; None for any other type."""
    subtypes = re.search(r"Subtypes: \[(.*)\]", report)
    plain = "|".join([*_TYPE_NAMES, "NoneType"])
    if subtypes and re.sub(rf"<class '(?:{plain})'>|[,\s]", "", subtypes.group(1)):
        return None  # a class (a strategy name or a class_path) or a generic (list[int]) among them: not plain
    expected = set(re.findall(r"Expected a <class '(\w+)'>", report)) - {"NoneType"}
    if {"int", "float"} <= expected:
        expected.remove("int")  # either one: a number
    given = re.search(r"(?:Got value|Given value): (.*)", report)
    if not expected or not expected <= _TYPE_NAMES.keys() or given is None:
        return None
    names = [name for name in _TYPE_NAMES if name in expected]
    # in a list of choices, bool's "true or false" would read as two of them
    wanted = " or ".join(
        _TYPE_NAMES[name] if len(names) == 1 else _TYPE_NAMES[name].replace(" or ", "/") for name in names
    )
    value = given.group(1).strip()
    kind = re.search(r"Given value type: <class '(\w+)'>", report)
    shown = repr(value)
    if kind is not None and kind.group(1) in ("NoneType", "list", "dict"):  # a value YAML read: say its kind
        shown = "null" if kind.group(1) == "NoneType" else f"{_TYPE_NAMES[kind.group(1)]}, {value}"
    fix = f"write {wanted}"
    with contextlib.suppress(ValueError, OverflowError):
        if "int" in names and float(value).is_integer():  # 1.0e9 in YAML is a float
            fix += f", e.g. {int(float(value))}"
    if key in _BLOCK_SHAPES:
        wanted, example = _BLOCK_SHAPES[key]
        fix = f"write e.g. {example}"
    return ConfigError(key, f"expected {wanted}, got {shown}; fix: {fix}")


def _flow_error(key: KeyPath, report: str) -> ConfigError | None:
    """A list or mapping written inline (`--schedulers '[...]'`) that is not YAML, or that YAML reads otherwise
    than meant (a:1 is one word); None for any other report, a value of a kind the key does not take among them."""
    given = re.search(r"Given value: ([\[{].*)", report)
    typed = "Given value type: <class 'str'>" in report  # else a value YAML already read (a list in a file)
    if given is None or not typed or not re.search(r"Expected a <class '(list|dict)'>", report):
        return None
    text = given.group(1).strip()
    try:
        load_inline(key, text)
    except ConfigError as err:
        return err
    hint = colon_hint(text)
    if hint:
        return ConfigError(key, f"{text!r} does not read as the values meant; fix: correct its syntax{hint}")
    return None


def _choice_error(key: KeyPath, report: str) -> ConfigError | None:
    """A value none of a Literal's (or a union of Literals') choices (`precision: bitsandbytes`), with the
    choices in YAML's words; None when the type is anything else."""
    expected = re.search(r"Subtypes: \[(.*)\]", report) or re.search(r"Expected a (typing\.Literal\[.*\])", report)
    given = re.search(r"Given value: (.*)", report)
    if expected is None or given is None:
        return None
    types = expected.group(1)
    literals = re.findall(r"typing\.Literal\[([^\]]*)\]", types)
    if not literals or re.sub(r"typing\.Literal\[[^\]]*\]|<class '(?:bool|NoneType)'>|[,\s]", "", types):
        return None  # another type among them: not a choice among values
    try:  # as YAML reads them: 16 and '16' are one choice written out
        choices = dict.fromkeys(str(value) for inner in literals for value in ast.literal_eval(f"({inner},)"))
    except (ValueError, SyntaxError):  # a choice Python cannot read back (an enum member): said as reported
        return None
    flags = "true, false, " if "<class 'bool'>" in types else ""  # deterministic: true, false or warn
    listed = flags + ", ".join(choices) + (", null" if "NoneType" in types else "")
    return ConfigError(key, f"got {given.group(1).strip()!r}, which is none of its choices; fix: write one of {listed}")


def _dotted(key: str) -> KeyPath:
    """A key as jsonargparse names it (`trainer.max_steps`: it has no list indices) as a key path."""
    return tuple(key.split("."))


# The keys given as a class_path whose constructor's refusal is said at their init_args.
_BUILT_KEYS = ("model", "data", "trainer.strategy")


def instantiation_error(config: Namespace, err: Exception) -> ConfigError:
    """A model/data/strategy constructor failed: say which key, from the class_path in the report."""
    text = _flatten(str(err))
    for key in _BUILT_KEYS:
        value = config.get(key)  # a strategy may be a name instead
        class_path = value.get("class_path") if isinstance(value, Namespace) else None
        if class_path and class_path in str(err):
            return _build_error(_dotted(key), class_path, value.get("init_args"), err, text.split(" Given value")[0])
    trainer = config.get("trainer")
    listed = _listed_build_error(trainer, err)
    if listed is not None:
        return listed
    unavailable = _unavailable_accelerator(trainer, text)
    if unavailable is not None:
        return unavailable
    if isinstance(err, TrainerArgumentError):  # the csx strategies' own refusal: it names its argument and fix
        return ConfigError(("trainer", err.argument), text)
    # Lightning names the Trainer argument it refuses, in backquotes (`gradient_clip_algorithm` bogus is
    # invalid) or bare (invalid value -1.0 for limit_train_batches)
    quoted, bare = re.findall(r"`(?:Trainer\()?(\w+)[`=]", text), re.findall(r"\b[a-z]+_\w+", text)
    named = [name for name in quoted + bare if isinstance(trainer, Namespace) and name in trainer]
    # Lightning's MisconfigurationException says no more than the message does; torch's TypeError and the like do
    said = text.rstrip(".") if isinstance(err, MisconfigurationException) else f"{type(err).__name__}: {text}"
    if named:
        return ConfigError(("trainer", named[0]), f"{said}; fix: correct trainer.{named[0]}")
    return ConfigError("trainer", f"{said}; fix: correct the trainer: block")


# The Trainer arguments that take a list of classes (or one), each given as a class_path.
_LISTED_KEYS = ("callbacks", "logger", "plugins")


def _listed_build_error(trainer: Any, err: Exception) -> ConfigError | None:
    """One of the classes in ``trainer.callbacks`` (or logger, plugins) raised as it was built: said at its
    entry, in its own words (jsonargparse reports the whole list, the constructor's refusal in the midst of
    what the other members of the list's type expect). None when no entry's class raised ``err``'s cause."""
    cause = err.__cause__
    if cause is None or not isinstance(trainer, Namespace):
        return None
    # the objects whose methods raised it (the entry's __init__, or a check of its own that it calls), with the
    # arguments their __init__ was called with (none for another method)
    raisers = [
        (frame.f_locals["self"], frame.f_locals if frame.f_code.co_name == "__init__" else {})
        for frame, _ in traceback.walk_tb(cause.__traceback__)
        if "self" in frame.f_locals
    ]
    for name in _LISTED_KEYS:
        entries = trainer.get(name)
        listed = entries if isinstance(entries, list) else [entries]
        found = [index for index, entry in enumerate(listed) if _of_a_class_that_raised(entry, raisers)]
        if len(found) > 1:  # entries of one class: the one given the arguments it was called with
            found = [index for index in found if _given_as_called(listed[index], raisers)] or found
        if found:
            entry = listed[found[0]]
            # when which entry raised cannot be told, the list is said
            key = ("trainer", name, found[0]) if isinstance(entries, list) and len(found) == 1 else ("trainer", name)
            return _build_error(key, entry.class_path, entry.get("init_args"), err, str(cause))
    return None


def _of_a_class_that_raised(entry: Any, raisers: list[tuple[object, dict[str, Any]]]) -> bool:
    cls = imported_or_none(entry.get("class_path")) if isinstance(entry, Namespace) else None
    return cls is not None and any(type(obj) is cls for obj, _ in raisers)


def _given_as_called(entry: Namespace, raisers: list[tuple[object, dict[str, Any]]]) -> bool:
    """Whether the __init__ that raised was called with the init_args ``entry`` gives (its plain values)."""
    given = vars(entry.get("init_args") or Namespace())
    plain = {key: value for key, value in given.items() if isinstance(value, (str, int, float, bool, type(None)))}
    return any(
        arguments and all(arguments.get(key, value) == value for key, value in plain.items())
        for _, arguments in raisers
    )


def _unavailable_accelerator(trainer: Any, text: str) -> ConfigError | None:
    """`accelerator: gpu` (or cuda, mps) on a machine without one: Lightning's words name neither the key (for
    gpu) nor a fix. None for any other refusal."""
    if not isinstance(trainer, Namespace) or not re.search(
        r"No supported gpu backend found|can not run on your system since the accelerator is not available", text
    ):
        return None
    names = sorted(
        name
        for name in AcceleratorRegistry.available_accelerators()
        if AcceleratorRegistry[name]["accelerator"].is_available()
    )
    given = trainer.get("accelerator")
    said = repr(given) if isinstance(given, str) else "the accelerator given"
    return ConfigError(
        ("trainer", "accelerator"),
        f"{said} is not available on this machine; fix: write one of {', '.join(names)}, or leave it out (auto)",
    )


def _build_error(key: KeyPath, class_path: str, init_args: Any, err: Exception, refusal: str) -> ConfigError:
    """The constructor of ``class_path`` at ``key`` refused or failed. The user's class raised (jsonargparse's
    report holds only its message, its cause the rest): its type and line are said, as for a module under
    imports:; a library refused, in its words (``refusal``). init_args are blamed only when some were given."""
    name, cause = class_path.rsplit(".", 1)[-1], err.__cause__
    given = bool(init_args and vars(init_args))
    frames = traceback.extract_tb(cause.__traceback__) if cause is not None else []
    # the user's class raised, not jsonargparse nor a library refusing a value in words of its own
    if cause is not None and any(is_own_file(frame.filename) for frame in frames):
        what = raised(cause)
    else:
        what = refusal.removesuffix(".")
    fix = f"correct {format_key_path(key)}.init_args" if given else f"correct {name}, which raised it"
    return ConfigError((*key, "init_args") if given else key, f"{name} failed to build: {what}; fix: {fix}")


# The Trainer arguments Lightning turns into an object that may need a package, by the folder of
# Lightning's code that builds it (lightning/fabric/plugins/precision/transformer_engine.py: precision).
_BUILT_IN = {"precision": "precision", "accelerators": "accelerator", "strategies": "strategy"}


def missing_package(err: ModuleNotFoundError, trainer: Mapping[str, Any]) -> ConfigError:
    """Lightning's refusal, while making the Trainer, of a value that needs a package not installed
    (``precision: transformer-engine``, ``accelerator: tpu``): the argument, its value, what to install.
    Raised elsewhere, it is not a value's fault: re-raised as it is."""
    folders = Path(traceback.extract_tb(err.__traceback__)[-1].filename).parts
    key = next((key for folder, key in _BUILT_IN.items() if folder in folders), None)
    if key is None:
        raise err
    required = re.search(r"Requirement '([^']+)' not met", str(err))  # Lightning's RequirementCache says so
    package = required.group(1) if required else str(err)
    install = f"pip install -U {package!r}, or " if required else ""
    return ConfigError(
        ("trainer", key),
        f"{trainer.get(key)!r} needs {package}, which is not installed; fix: {install}choose another trainer.{key}",
    )


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so errors stay one line."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(self.prog.removeprefix("cs-lightning "), f"{message}; fix: see {self.prog} --help")
