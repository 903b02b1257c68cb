"""`cs-lightning cache info|clear`: what cs_lightning keeps on disk."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from cs_lightning.cache import cache_dir, cache_variable
from cs_lightning.cli.error_lines import OneLineParser
from cs_lightning.cli.output_file import file_in_the_way
from cs_lightning.errors import ConfigError


def cache_command(argv: Sequence[str]) -> None:
    """`cs-lightning cache info` and `cs-lightning cache clear`: what cs_lightning keeps on disk
    (the trace check's verdicts, deferred init's generator jump tables)."""
    from cs_lightning.deferred import mt19937
    from cs_lightning.trace_cache import TraceCache

    parser = OneLineParser(
        prog="cs-lightning cache",
        description="Show or clear cs_lightning's cache (CS_LIGHTNING_CACHE_DIR): trace-check verdicts, jump tables.",
    )
    parser.add_argument("action", choices=["info", "clear"])
    opts = parser.parse_args(list(argv))
    cache, tables = TraceCache(), mt19937.stored()
    for folder in (cache_dir(), cache.folder, tables.folder):  # the root first: a file there blocks all three
        _check_cache_folder(folder, cache_dir())
    if opts.action == "clear":
        entries, files = _cleared(cache.clear), _cleared(tables.clear)
        print(f"removed {entries} entr{'y' if entries == 1 else 'ies'} from {cache.folder}")
        print(f"removed {files} jump table{'s' * (files != 1)} from {tables.folder}")
    else:
        print(cache.info())
        count = len(tables.files())
        print(f"jump tables {tables.folder}: {count} file{'s' * (count != 1)}, {tables.size()} bytes")


def _cleared(clear: Callable[[], int]) -> int:
    """Run ``clear``; a file it cannot remove (a read-only or another user's cache) is one line, not a traceback."""
    try:
        return clear()
    except OSError as error:
        raise ConfigError(
            cache_variable() or "cache",
            f"cannot remove {str(error.filename or cache_dir())!r}: {error.strerror}; fix: clear the cache as a"
            " user who may write it, or set CS_LIGHTNING_CACHE_DIR to a folder of your own",
        ) from None


def _check_cache_folder(folder: Path, root: Path) -> None:
    """Refuse a cache folder (``root``, or one of its subfolders) that is, or lies under, a file: reading it
    would find nothing and say 0 entries, and clearing it would remove nothing, both silently."""
    where = file_in_the_way(folder)
    if where is None:
        return
    variable = cache_variable()
    if folder != root:
        raise ConfigError(
            variable or "cache",
            f"{str(folder)!r}, a folder of the cache {str(root)!r}, {where}; fix: move that file away, or set "
            "CS_LIGHTNING_CACHE_DIR to another folder",
        )
    fix = {
        "CS_LIGHTNING_CACHE_DIR": "set it to a folder (made when first written), or unset it",
        "XDG_CACHE_HOME": "set it, or CS_LIGHTNING_CACHE_DIR, to a folder",
        None: "set CS_LIGHTNING_CACHE_DIR to a folder (made when first written)",
    }[variable]
    raise ConfigError(variable or "cache", f"{str(folder)!r} cannot be the cache folder: it {where}; fix: {fix}")
