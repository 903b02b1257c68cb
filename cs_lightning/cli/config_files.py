"""The YAML files of a run, and the modules their `imports:` key names."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser

from cs_lightning.cli.block_arguments import BLOCK_KEYS, add_block_arguments
from cs_lightning.config_blocks import load_yaml, read_yaml
from cs_lightning.convert import model_zoo_layout
from cs_lightning.errors import ConfigError, KeyPath
from cs_lightning.user_code import raised


def read_config_file(path: str | Path, key: KeyPath | str = "config") -> dict[str, Any]:
    """One YAML config file as a dict of top-level keys (`config_blocks.read_yaml` reads it)."""
    path = Path(path)
    data, _ = read_yaml(path, key)
    if not isinstance(data, dict):
        what = "nothing" if data is None else type(data).__name__
        raise ConfigError(
            key,
            f"{str(path)!r} holds {what}, not a mapping of keys; "
            "fix: write top-level keys such as model:, trainer:, optimizer:",
        )
    layout = model_zoo_layout(data)
    if layout is not None:  # else each of its keys would be refused on its own, none saying why
        raise ConfigError(
            key,
            f"{str(path)!r} is a Cerebras Model Zoo config ({layout}), which cs-lightning reads once converted; "
            f"fix: cs-lightning convert {path} --out run.yaml, then give run.yaml",
        )
    return data


def _import_entry(entry: str, base: Path, key: KeyPath) -> str:
    """Import a dotted module, or a `.py` file relative to `base` under its file stem.

    Returns the entry as it can be imported from anywhere: the module name, or the file's
    absolute path (the config Lightning saves with the run then works from any directory).
    """
    fix = f"fix: give a dotted module name or a .py path relative to {base}"
    if not entry.strip():  # importlib would say "Empty module name", as if the module were at fault
        raise ConfigError(key, f"the entry is empty ({entry!r}); {fix}, or remove the entry")
    if not entry.endswith(".py"):
        _run_user_module(lambda: importlib.import_module(entry), entry, key, fix)
        return entry
    path = (base / entry).resolve()
    if not path.is_file():
        raise ConfigError(key, f"cannot import {entry!r}: no file {str(path)!r}; {fix}")
    loaded = sys.modules.get(path.stem)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path:
            return str(path)
        raise ConfigError(
            key,
            f"{entry!r} would be imported as module {path.stem!r}, which is already "
            f"{getattr(loaded, '__file__', None) or 'a built-in module'}; fix: rename the file",
        )
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:  # a file without the .py loader: not one to run
        raise ConfigError(key, f"cannot import {entry!r}: Python has no loader for it; {fix}")
    module, loader = importlib.util.module_from_spec(spec), spec.loader
    sys.modules[path.stem] = module
    try:
        _run_user_module(lambda: loader.exec_module(module), entry, key, fix)
    except BaseException:
        del sys.modules[path.stem]
        raise
    return str(path)


def _run_user_module(run: Callable[[], object], entry: str, key: KeyPath, fix: str) -> None:
    """Run the import of the user's module; its failure becomes one line saying where."""
    try:
        run()
    except (ImportError, SyntaxError) as err:
        raise ConfigError(key, f"cannot import {entry!r}: {err}; {fix}") from None
    except Exception as err:  # noqa: BLE001 - the user's module failed while running: say where, as one line
        raise ConfigError(key, f"importing {entry!r} raised {raised(err)}; fix: correct that module") from None


def _option_values(argv: Sequence[str], *names: str) -> list[str]:
    """The values given to any of the options `names` in `argv` (`--opt v` or `--opt=v`), in order."""
    values = []
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.split("=", 1)[0] in names and "=" in arg:
            values.append(arg.split("=", 1)[1])
    return values


def _entries(value: Any) -> list[str]:
    """An `imports:` value as its entries: it takes one string, or a list of them."""
    entries = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(entries, list):
        raise _not_an_entry(("imports",), value)
    for i, entry in enumerate(entries):
        if not isinstance(entry, str):
            raise _not_an_entry(("imports", i), entry)
    return entries


def _not_an_entry(key: KeyPath, value: Any) -> ConfigError:
    return ConfigError(
        key,
        f"got {value!r}, and imports: takes dotted module names or .py paths, as one string or a list of "
        "strings; fix: write e.g. imports: [my_package.models, model.py]",
    )


# A config file as read once: its path (`imports:` entries are relative to its folder) and its keys.
ConfigFile = tuple[Path, dict[str, Any]]


def given_config_files(argv: Sequence[str]) -> list[ConfigFile]:
    """The `--config` files of a `fit`-like command line, each read once; a missing one is left to the
    parser, which reports it with its own key."""
    paths = map(Path, _option_values(argv, "--config", "-c"))
    return [(path, read_config_file(path)) for path in paths if path.is_file()]


def run_imports(files: Sequence[ConfigFile], argv: Sequence[str] = ()) -> dict[str, str]:
    """Import every `imports:` entry, before parsing resolves names; map each entry to its import.

    Entries come from each config file of `files` (paths relative to that file) and from
    `--imports` in `argv`, the command line (relative to the working directory).
    """
    done = {}
    for path, data in files:
        for i, entry in enumerate(_entries(data.get("imports"))):
            done[entry] = _import_entry(entry, path.parent, ("imports", i))
    for value in _option_values(argv, "--imports", "--imports+"):
        for i, entry in enumerate(_entries(load_yaml(value))):
            done[entry] = _import_entry(entry, Path.cwd(), ("imports", i))
    return done


def merged_config(files: Sequence[ConfigFile]) -> dict[str, Any]:
    """Config files merged as repeated --config merges them in `fit`: the optimizer:, schedulers: and
    param_groups: blocks by fit's own parser actions (an optimizer block merges into one for the same
    optimizer, a later schedulers: or param_groups: replaces the earlier whole), the other keys mapping by
    mapping, later values winning (as fit's trainer: keys do)."""

    def merge(base: dict, extra: Mapping) -> dict:
        for key, value in extra.items():
            base[key] = (
                merge(dict(base.get(key) or {}), value)
                if isinstance(value, Mapping) and isinstance(base.get(key), Mapping)
                else value
            )
        return base

    parser = ArgumentParser(exit_on_error=False)
    add_block_arguments(parser)
    blocks = parser.get_defaults()
    merged: dict[str, Any] = {}
    for _, data in files:
        merge(merged, {key: value for key, value in data.items() if key not in BLOCK_KEYS})
        blocks = parser.parse_object({key: data[key] for key in BLOCK_KEYS if key in data}, blocks)
    merged.update((key, blocks[key]) for key in BLOCK_KEYS if any(key in data for _, data in files))
    return merged
