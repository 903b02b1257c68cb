"""The file a command writes (`convert -o run.yaml`, `schedule --out lr.png`): checked before any
work, written whole or not at all."""

from __future__ import annotations

import os
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
        raise ConfigError(
            "--out", f"cannot write {str(out)!r}: no folder {str(out.parent)!r}; fix: give a path in an existing folder"
        )
    if out.exists() and not force:
        raise ConfigError(
            "--out", f"{str(out)!r} already exists; fix: give another path, or pass --force to overwrite it"
        )


def write_output(out: Path, data: bytes) -> None:
    """Write through a temporary file renamed into place: a failure leaves `out` as it was."""
    try:
        write_atomic(out, data)
    except OSError as err:
        raise ConfigError("--out", f"cannot write {str(out)!r} ({err.strerror}); fix: give a writable path") from None
