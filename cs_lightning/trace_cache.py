"""Remember on disk which training steps passed the trace check, like a compiler cache.

A CS-X compile is cached by the graph it compiles; the csx strategy's check that the step
traces as one graph is cached the same way. An entry is keyed by everything that can
change the verdict: the model's code (:func:`fingerprint`), the shapes and dtypes of the
step's inputs, the torch, Python and cs_lightning versions and the options of the check.
A warm entry skips the check whatever wrote the checkpoint being resumed; changed code misses.

Entries are small JSON files in the ``trace/`` folder of :func:`cs_lightning.cache.cache_dir`,
written atomically, so concurrent writers (DDP ranks, two runs) never leave a torn entry. An unreadable
or foreign entry is ignored with a warning and rewritten; a cache that cannot be written costs the check, never the run.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import json
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from cs_lightning.cache import Entries, cache_dir, write_atomic
from cs_lightning.user_code import is_own_file

__all__ = ["TraceCache", "fingerprint", "input_signature"]

_FORMAT = 1
_FOLDER = "trace"


def input_signature(inputs: Any) -> list[Any]:
    """What the traced graph depends on in a step's inputs: tensor shapes, dtypes, devices.

    Other leaves count by type only (a batch index changes every step, never the graph).
    """
    leaves, spec = tree_flatten(inputs)
    described: list[Any] = [str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            described.append([list(leaf.shape), str(leaf.dtype), leaf.device.type, leaf.requires_grad])
        else:
            described.append(type(leaf).__qualname__)
    return described


def fingerprint(module: nn.Module) -> str | None:
    """Identify the code a model runs and how it is configured, as a hash.

    It covers the source files of the model's module classes and their bases, every
    module of the user's own code loaded now (helpers a forward calls), and each
    submodule's plain settings (``self.clip = True``, ``hparams``): any of them can
    decide whether the step captures as one graph. A check that passed for one
    fingerprint need not run again for the same inputs (as a CS-X compile cache skips a
    graph it compiled before): see :class:`TraceCache`. None when some class has
    no source file (defined in ``python -c`` or a notebook): such code is always checked.
    """
    classes = {cls for m in module.modules() for cls in type(m).__mro__ if cls is not object}
    files = _user_files()
    for cls in classes:
        found = _source_files(cls)
        if found is None:
            return None
        files |= found
    digest = hashlib.sha256(torch.__version__.encode())
    for name in sorted(files):
        digest.update(name.encode())
        with open(name, "rb") as source:
            digest.update(source.read())
    digest.update(repr(_settings(module)).encode())
    digest.update(repr(_globals_read(classes)).encode())
    return digest.hexdigest()


def _user_files() -> set[str]:
    """Source files of the loaded modules that are the user's own (not torch, cs_lightning,
    the standard library or an installed package)."""
    files = set()
    for loaded in list(sys.modules.values()):
        file = getattr(loaded, "__file__", None)
        if (  # string tests first: of the thousands of modules loaded only the user's are stat-ed (~20 ms for all)
            isinstance(file, str) and file.endswith(".py") and is_own_file(file) and os.path.isfile(file)
        ):
            files.add(file)
    return files


def _settings(module: nn.Module) -> list[tuple[str, str, str]]:
    """Per submodule: its path, class and public attributes described (a LightningModule's
    hparams too): any of them may pick the code path its forward takes."""
    settings = []
    for path, sub in module.named_modules():
        values = {name: value for name, value in vars(sub).items() if not name.startswith("_")}
        hparams = getattr(sub, "hparams", None)
        if isinstance(hparams, Mapping) and "hparams" not in values:  # Lightning keeps them in _hparams
            values["hparams"] = hparams
        settings.append((path, type(sub).__qualname__, _describe(values)))
    return settings


def _globals_read(classes: Iterable[type]) -> list[tuple[str, str, str]]:
    """The module globals of plain values that the classes' methods name: a step may branch on
    them as on a setting (``if DEBUG:``, with ``DEBUG`` read from the environment or ``sys.argv``),
    and the source file that holds the name does not hold its value."""
    read = set()
    for cls in classes:
        module = sys.modules.get(cls.__module__)
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not is_own_file(file):
            continue  # torch's and Lightning's globals are constants
        namespace = vars(module)
        for code in _method_code(cls):
            for name in _names(code):
                value = namespace.get(name)
                if isinstance(value, _SCALARS):
                    read.add((cls.__module__, name, repr(value)))
    return sorted(read)


def _names(code: CodeType) -> Iterator[str]:
    """The global (and attribute) names a function's code uses, with those of its nested functions."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _names(constant)


_SCALARS = (bool, int, float, complex, str, bytes, type(None), enum.Enum, torch.dtype, torch.device)


def _describe(value: Any, depth: int = 0) -> str:
    """A stable text for a setting: values of plain data, names of functions and classes,
    shapes of tensors, and the public attributes of other objects, a few levels deep."""
    if isinstance(value, _SCALARS):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}{value.dtype}"
    if isinstance(value, nn.Module):
        return "module"  # described on its own, as a submodule
    if isinstance(value, type) or inspect.isroutine(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    if depth >= 4:
        return type(value).__qualname__
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) and len(value) > 256:
        return f"{type(value).__qualname__}(len {len(value)})"  # a vocabulary, a table: data, not settings
    if isinstance(value, Mapping):
        items = sorted((str(k), _describe(v, depth + 1)) for k, v in value.items())
        return f"{type(value).__qualname__}{items}"
    if isinstance(value, (list, tuple, set, frozenset)):
        described = [_describe(v, depth + 1) for v in value]
        return f"{type(value).__qualname__}{sorted(described) if isinstance(value, (set, frozenset)) else described}"
    public = {k: v for k, v in getattr(value, "__dict__", {}).items() if not k.startswith("_")}
    return f"{type(value).__qualname__}{_describe(public, depth + 1) if public else ''}"


def _source_files(cls: type) -> set[str] | None:
    """The files a class's code comes from: its module's, and those its methods were compiled
    from, which differ for a class that ``exec`` built inside a script's namespace (its module
    is the script, its methods come from ``<string>``). None when one is not a file."""
    try:
        module_file = inspect.getsourcefile(cls)
    except (OSError, TypeError):  # built at run time, or a builtin
        return None
    if module_file is None:
        return None
    files = {module_file, *(code.co_filename for code in _method_code(cls))}
    return files if all(os.path.isfile(name) for name in files) else None


def _method_code(cls: type) -> Iterator[CodeType]:
    """The code of the functions a class defines (methods, static and class methods, properties),
    through decorators that keep ``__wrapped__``; not those ``@dataclass`` generates (from
    ``<string>``: the class's fields, in its own file, decide them)."""
    generated = _DATACLASS_METHODS if dataclasses.is_dataclass(cls) else frozenset()
    for name, value in vars(cls).items():
        if name in generated:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        for function in (value.fget, value.fset, value.fdel) if isinstance(value, property) else (value,):
            if inspect.isfunction(function):
                code = getattr(inspect.unwrap(function), "__code__", None)
                if isinstance(code, CodeType):
                    yield code


_DATACLASS_METHODS = frozenset(
    [
        "__init__",
        "__repr__",
        "__eq__",
        "__hash__",
        "__setattr__",
        "__delattr__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__getstate__",
        "__setstate__",
        "__replace__",
    ]
)


class TraceCache:
    """Trace-check verdicts on disk, one file per key.

    Args:
        root: the cache folder (its ``trace/`` subfolder holds the entries); default :func:`cache_dir`.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir()
        self.folder = self.root / _FOLDER
        self._entries = Entries(self.folder, "*.json")

    @staticmethod
    def key(code: str, inputs: Any, options: Mapping[str, Any]) -> str:
        """The entry key of model code ``code`` run on ``inputs`` under the check's ``options``."""
        from cs_lightning import __version__

        described = {
            "format": _FORMAT,
            "code": code,
            "inputs": input_signature(inputs),
            "options": {name: repr(value) for name, value in sorted(options.items())},
            "torch": torch.__version__,
            "python": list(sys.version_info[:2]),
            "cs_lightning": __version__,
        }
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def hit(self, key: str) -> bool:
        """Whether code with this key passed the check before; a damaged entry warns and misses."""
        path = self._path(key)
        try:
            entry = json.loads(path.read_bytes())
        except (FileNotFoundError, NotADirectoryError):  # no entry (or no cache folder) yet
            return False
        except (OSError, ValueError) as error:  # unreadable, truncated, not JSON
            self._warn_unusable(path, f"it cannot be read ({type(error).__name__})")
            return False
        if not isinstance(entry, dict) or entry.get("format") != _FORMAT or entry.get("key") != key:
            self._warn_unusable(path, "it is not an entry for this key")
            return False
        return True

    def store(self, key: str, about: Mapping[str, Any]) -> None:
        """Record that ``key`` passed, atomically; a cache that cannot be written only warns."""
        try:
            write_atomic(self._path(key), json.dumps({"format": _FORMAT, "key": key, **about}).encode())
        except OSError as error:
            warnings.warn(
                f"cs_lightning trace cache: cannot write to {self.folder} ({error}); the trace"
                " check runs again next time. Set CS_LIGHTNING_CACHE_DIR to a writable folder.",
                stacklevel=2,
            )

    def entries(self) -> list[Path]:
        """The entry files (not the temporary files of writes in progress)."""
        return self._entries.files()

    def info(self) -> str:
        """One line: where the cache is, how many entries and bytes it holds."""
        count = len(self.entries())
        return f"trace cache {self.folder}: {count} entr{'y' if count == 1 else 'ies'}, {self._entries.size()} bytes"

    def clear(self) -> int:
        """Delete every entry, and temporary files an interrupted write left over an hour ago;
        return how many entries went."""
        return self._entries.clear()

    def _warn_unusable(self, path: Path, why: str) -> None:
        warnings.warn(
            f"cs_lightning trace cache: ignoring {path}: {why}; the trace check runs again and rewrites it.",
            stacklevel=3,
        )
