"""Where cs_lightning keeps what it learned in earlier runs, and how it writes there.

``$CS_LIGHTNING_CACHE_DIR``, else ``$XDG_CACHE_HOME/cs_lightning``, else
``~/.cache/cs_lightning``. Files are written to a temporary name and renamed into place,
so concurrent writers (DDP ranks, two runs) never leave a torn file; every reader
checks what it reads, so a damaged or foreign file costs a recomputation, never a
wrong result.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

__all__ = ["Entries", "cache_dir", "cache_variable", "write_atomic"]


def cache_dir() -> Path:
    """The cache folder: ``CS_LIGHTNING_CACHE_DIR``, else under the XDG cache folder."""
    variable = cache_variable()
    if variable == "CS_LIGHTNING_CACHE_DIR":
        return Path(os.environ[variable]).expanduser()
    base = Path(os.environ[variable]).expanduser() if variable else Path.home() / ".cache"
    return base / "cs_lightning"


def cache_variable() -> str | None:
    """The environment variable that places the cache folder, or None for the default."""
    return next((name for name in ("CS_LIGHTNING_CACHE_DIR", "XDG_CACHE_HOME") if os.environ.get(name)), None)


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename; the file's
    permissions are ``mode``, by default 0644.

    Raises OSError when the folder cannot be made or written; nothing is left behind then.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(descriptor, "wb") as file:
            if hasattr(os, "fchmod"):  # mkstemp's 0600 would hide a shared cache from other users
                with contextlib.suppress(OSError):  # a file system without modes writes all the same
                    os.fchmod(file.fileno(), 0o644 if mode is None else mode)
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class Entries:
    """The files one part of cs_lightning keeps in its own subfolder of the cache folder.

    Args:
        folder: the subfolder.
        pattern: the entries' file names (a glob); temporary files of writes in progress are not entries.
    """

    def __init__(self, folder: Path, pattern: str) -> None:
        self.folder = folder
        self.pattern = pattern

    def files(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(path for path in self.folder.glob(self.pattern) if not path.name.startswith(".tmp-"))

    def size(self) -> int:
        """Bytes the entries hold (one removed meanwhile by another process counts 0)."""
        total = 0
        for path in self.files():
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
        return total

    def clear(self) -> int:
        """Delete every entry, and temporary files an interrupted write left over an hour ago
        (younger ones are writes in progress); return how many entries went."""
        entries = self.files()
        for path in entries:
            if path.is_dir() and not path.is_symlink():  # made by hand where an entry goes: it blocks the writes
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        for leftover in self.folder.glob(".tmp-*") if self.folder.is_dir() else ():
            with contextlib.suppress(FileNotFoundError):
                if time.time() - leftover.stat().st_mtime > 3600:
                    leftover.unlink(missing_ok=True)
        return len(entries)
