"""Whose code a file holds: torch's, cs_lightning's, the standard library's, or the user's; and the
user's code named by dotted import path.

Errors point at the user's line: deferred init names the constructor that made a tensor, the
trace check the line that read one. Deferred init walks the stack to the innermost frame whose
file passes `is_own_file`, and falls back to the innermost passing `is_user_file` (a user's code
installed as a package); the trace check charges a call to the innermost frame past its own
plumbing and counts it as the user's when its file passes `is_user_file` and, for an installed
package's file (`is_library_file`), when the model's modules come from that package.
This module imports the standard library and torch only: the deferred-init recorder and the
schedulers import it, and they must work without lightning.
"""

from __future__ import annotations

import importlib
import os
import sysconfig
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch


def _prefixes(folder: Path) -> set[str]:
    """``folder`` as Python was started (frames' file names) and resolved (links in the path),
    each ending in a separator, so that ``torch`` is no prefix of ``torchvision``."""
    return {str(folder) + os.sep, str(folder.resolve()) + os.sep}


_NOT_THE_USERS = tuple(
    sorted(
        {
            *_prefixes(Path(torch.__file__).parent),
            *_prefixes(Path(__file__).parent),  # all of cs_lightning
            *_prefixes(Path(sysconfig.get_paths()["stdlib"])),
            "<frozen ",  # the standard library's frozen modules (importlib, runpy...)
        }
    )
)


def is_user_file(file: str) -> bool:
    """Whether ``file`` (a frame's ``co_filename`` or a module's ``__file__``) is outside torch,
    cs_lightning and the standard library. Installed libraries pass: a caller that wants only the
    user's own files tells them apart itself."""
    return not file.startswith(_NOT_THE_USERS)


# Where installed packages live: a path through one of these folders is a library's.
_LIBRARIES = tuple(os.sep + folder + os.sep for folder in ("site-packages", "dist-packages"))


def is_library_file(file: str) -> bool:
    """Whether ``file`` belongs to an installed package (under site-packages or dist-packages)."""
    return any(folder in file for folder in _LIBRARIES)


# Libraries that keep books on the host for the user (logging, metrics): the trace check passes their reads,
# even when they are submodules of the model.
BOOKKEEPING = frozenset({"torch", "lightning", "pytorch_lightning", "lightning_fabric", "torchmetrics", "cs_lightning"})


def model_packages(classes: Iterable[type]) -> set[str]:
    """The top-level packages the model's module classes come from, wherever they are installed
    (`timm`, `transformers`, the user's own package): their code is what runs on the system."""
    return {cls.__module__.partition(".")[0] for cls in classes} - BOOKKEEPING


def is_own_file(file: str) -> bool:
    """Whether ``file`` is the user's own code: neither torch, cs_lightning, the standard library nor
    an installed package (Lightning's ``seed_everything`` is not the line a user can change)."""
    return is_user_file(file) and not is_library_file(file)


def users_line(tb: TracebackType | None) -> str:
    """`` (at file.py:N, in function)`` for the innermost frame of the user's own code in ``tb``,
    the line a traceback would have shown them; failing that (all of the user's code is installed
    as a package), the innermost frame outside torch, cs_lightning and the standard library; else "".
    The file is relative to the working directory, as the user names it."""
    frames = traceback.extract_tb(tb)
    own = [frame for frame in frames if is_own_file(frame.filename)]
    found = own or [frame for frame in frames if is_user_file(frame.filename)]
    if not found:
        return ""
    frame = found[-1]
    return f" (at {os.path.relpath(frame.filename)}:{frame.lineno}, in {frame.name})"


def raised(err: BaseException) -> str:
    """``KeyError: 'width' (at model.py:8, in __init__)``: what the user's code raised, and where."""
    return f"{type(err).__name__}: {err}{users_line(err.__traceback__)}"


def import_dotted(path: str) -> Any:
    """The object at the dotted import path ``path`` (``package.module.Name``).

    Raises `ImportError` whatever is wrong: a path of the wrong shape, a module that is missing or fails
    as it is imported, a missing name. Its message says which; the caller adds where the path was
    written and the fix.
    """
    shape = _shape_problem(path)
    if shape:
        raise ImportError(f"{path!r} is not a dotted import path such as 'package.module.Name': {shape}")
    module_name, _, name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # a user's module may raise anything as it runs
        outer = _outer_class(module_name, error)
        if outer is not None and hasattr(outer, name):
            return getattr(outer, name)
        reason = str(error) if isinstance(error, ImportError) else f"{type(error).__name__}: {error}"
        raise ImportError(f"{module_name!r} cannot be imported ({reason})") from error
    if not hasattr(module, name):
        raise ImportError(f"module {module_name!r} has no {name!r}")
    return getattr(module, name)


def imported_or_none(class_path: str) -> Any:
    """The object a dotted path names, or None when it cannot be imported: for what only adds to an error
    line (a reason, a registered name) or names a class that may be gone (a checkpoint's)."""
    try:
        return import_dotted(class_path)
    except ImportError:
        return None


def _outer_class(path: str, error: Exception) -> Any:
    """What ``path`` names when it is no module because it is an attribute of one (``module.Outer``, whose
    nested class a class path may name, as jsonargparse writes it); None otherwise."""
    if not isinstance(error, ModuleNotFoundError) or error.name != path or "." not in path:
        return None
    try:
        return import_dotted(path)
    except ImportError:
        return None


def _shape_problem(path: object) -> str:
    """What keeps ``path`` from being ``package.module.Name``, or "" when nothing does. Checked before
    importing: importlib reads ``.Name`` as a relative import and fails with a bare "Empty module name"."""
    if not isinstance(path, str):  # a class path read from a file (a checkpoint's) may be anything
        return "it is not a string"
    module_name, dot, name = path.rpartition(".")
    if not dot:
        return "it has no dot"
    if not module_name:
        return "its module part, before the last dot, is empty"
    if not all(part.isidentifier() for part in module_name.split(".")):
        return f"its module part {module_name!r} is not a dotted Python name"
    if not name:
        return "nothing follows its last dot"
    if not name.isidentifier():
        return f"{name!r}, after the last dot, is not a Python name"
    return ""
