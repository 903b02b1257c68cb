"""Remember on disk which training steps passed the trace check, like a compiler cache.

A CS-X compile is cached by the graph it compiles; the csx strategy's check that the step
traces as one graph is cached the same way. An entry is keyed by everything that can
change the verdict: the model's code (:func:`cs_lightning.trace.fingerprint`), the shapes
and dtypes of the step's inputs, the torch, Python and cs_lightning versions and the
options of the check. A warm entry skips the check whatever wrote the checkpoint being
resumed; changed code misses.

Entries are small JSON files in the ``trace/`` folder of :func:`cs_lightning.cache.cache_dir`,
written atomically, so concurrent writers (DDP ranks, two runs) never leave a torn entry. An unreadable
or foreign entry is ignored with a warning and rewritten; a cache that cannot be written costs the check, never the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from cs_lightning.cache import Entries, cache_dir, write_atomic

__all__ = ["TraceCache", "input_signature"]

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
