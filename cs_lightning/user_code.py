"""Whose code a file holds: torch's, cs_lightning's, the standard library's, or the user's.

Errors point at the user's line: deferred init names the constructor that made a tensor, the
trace check the line that read one. Both walk the stack to the first frame whose file passes
`is_user_file`. This module imports the standard library and torch only: the deferred-init
recorder imports it, and it must work without lightning.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

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


def is_own_file(file: str) -> bool:
    """Whether ``file`` is the user's own code: neither torch, cs_lightning, the standard library nor
    an installed package (Lightning's ``seed_everything`` is not the line a user can change)."""
    return is_user_file(file) and not is_library_file(file)
