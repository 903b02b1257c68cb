"""The file a command writes (`convert -o run.yaml`, `schedule --out lr.png`): checked before any
work, written whole or not at all; and the folders a run writes into, checked before it starts."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cs_lightning.cache import write_atomic
from cs_lightning.errors import ConfigError


def check_output_path(out: Path, inputs: Sequence[Path], force: bool, *, inputs_are: str, example: str) -> None:
    """Refuse, at ``--out``, a path that is one of `inputs` (`inputs_are`: what the command calls one),
    a folder, in no folder, or (without `force`) an existing file. `example`: a file name to suggest
    inside a folder given instead of a file."""
    if out.exists() and any(os.path.samefile(out, given) for given in inputs):  # also through a link
        raise ConfigError(
            "--out", f"{str(out)!r} is {inputs_are}; writing over it would destroy it; fix: give another output path"
        )
    if out.is_dir():
        raise ConfigError("--out", f"{str(out)!r} is a folder; fix: give a file path such as {str(out / example)!r}")
    if not out.parent.is_dir():  # write_atomic would make it; a typo should not make folders
        in_the_way = file_in_the_way(out.parent)
        problem = f"{str(out.parent)!r} {in_the_way}" if in_the_way else f"no folder {str(out.parent)!r}"
        raise ConfigError("--out", f"cannot write {str(out)!r}: {problem}; fix: give a path in an existing folder")
    target = Path(os.path.realpath(out))  # what write_output writes: a link's file
    if target.is_symlink():  # realpath stops on a loop of links
        raise ConfigError("--out", f"{str(out)!r} is a symbolic link that loops; fix: give a file path")
    if not target.parent.is_dir():
        raise ConfigError(
            "--out", f"{str(out)!r} links to {str(target)!r}, in no folder; fix: give a path in an existing folder"
        )
    if out.exists() and not out.is_file():  # renaming a file over it would replace the device itself
        raise ConfigError(
            "--out", f"{str(out)!r} is not a regular file (a device, a pipe or a socket); fix: give a file path"
        )
    if out.exists() and not force:
        raise ConfigError(
            "--out", f"{str(out)!r} already exists; fix: give another path, or pass --force to overwrite it"
        )


def write_output(out: Path, data: bytes) -> None:
    """Write through a temporary file renamed into place: a failure leaves `out` as it was. A symbolic
    link is written through (the file it names is replaced, the link stays), and a file written over
    keeps its permissions."""
    target = Path(os.path.realpath(out))
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else None
        write_atomic(target, data, mode=mode)
    except OSError as err:
        raise ConfigError("--out", f"cannot write {str(out)!r} ({err.strerror}); fix: give a writable path") from None


def _first_existing(path: Path) -> Path | None:
    """``path`` or its nearest ancestor that exists (a relative path ends at the working folder)."""
    return next((path for path in (path, *path.parents) if path.exists()), None)


def file_in_the_way(folder: Path) -> str | None:
    """Why ``folder`` cannot be a folder because it is, or lies under, a file; None otherwise."""
    existing = _first_existing(folder)
    if existing is None or existing.is_dir():
        return None
    return "is a file" if existing == folder else f"lies under the file {str(existing)!r}"


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be made (when missing) and written into, or None; nothing is left behind.

    The first existing folder on its path is tried by making a folder in it and removing it at once:
    os.access answers yes to root even where the filesystem refuses (sysfs).
    """
    existing = _first_existing(folder)
    if existing is None or not existing.is_dir():
        return file_in_the_way(folder)
    try:
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".cs-lightning-probe-"))
    except OSError as err:
        where = "cannot be written" if existing == folder else f"cannot be made in {str(existing)!r}"
        return f"{where} ({err.strerror})"
    return None
