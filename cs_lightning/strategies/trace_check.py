"""The trace check of a csx strategy's training step, remembered across runs.

The step runs as a CS-X traces it (``trace.lazy_trace``): the check is the step itself, and a host read or a
value-dependent shape in the user's code is refused before the update it precedes. A step whose code and input
shapes passed before, in this run or an earlier one (``cs_lightning.trace_cache``), runs unchecked.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial

from lightning import __version__ as lightning_version
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.types import STEP_OUTPUT

from cs_lightning import trace
from cs_lightning.time_to_first_loss import skipped
from cs_lightning.trace_cache import TraceCache, Uncached, fingerprint, imported_code

# What the trace check's verdict depends on besides code and inputs (part of its cache key).
_CHECK_OPTIONS = {"check": "lazy trace", "host_reads": "refused", "shapes": "static"}


def checked_step(
    module: LightningModule,
    step: Callable[[], STEP_OUTPUT],
    args: tuple,
    *,
    precision: str,
    vouches: bool,
    on_traced: Callable[[float], None],
) -> tuple[STEP_OUTPUT, bool, Callable[[], None] | None]:
    """Run ``step``, ``module``'s training step on ``args``, checked; returns its output, whether that is a
    verdict (False: the step skipped its batch, so the next one is to be checked), and what remembers a pass
    (or None), to call once the step's update is done. ``vouches``: a pass is remembered for every rank
    (rank 0's); ``on_traced`` gets the seconds the checked step took.

    The update comes after every rank's step has passed (DDP's gradients are all-reduced in the backward,
    which a rank that was refused never joins), so a read only another rank makes is never vouched for."""
    cache = TraceCache()
    options = {**_CHECK_OPTIONS, "precision": precision, "lightning": lightning_version}
    try:  # read at the step it vouches for, and only when checking
        key: str | None = cache.key(fingerprint(module), args, options)
    except Uncached as why:
        _tell_uncached(type(module).__qualname__, str(why))
        key = None
    if key is not None and cache.hit(key):
        return step(), True, None
    loaded = set(sys.modules)
    started = time.perf_counter()
    with trace.lazy_trace(module):
        output = step()
    on_traced(time.perf_counter() - started)
    if skipped(module, output):
        # a skipped step returns early (a warmup `return None`), before most of what a real step runs:
        # no verdict, so nothing is remembered and the next step is checked, before its update
        return output, False, None
    if key is None or not vouches:
        return output, True, None
    # rank 0 vouches for all: a read only rank 0 makes (self.print) fails there, after the others passed
    about = {"model": type(module).__qualname__, "imported": imported_code(module, loaded)}
    return output, True, partial(cache.store, key, about)


_told: set[tuple[str, str]] = set()


def _tell_uncached(model: str, why: str) -> None:
    """Say once per process why a model's check is not remembered: a user waits for it at every fit."""
    if (model, why) not in _told:
        _told.add((model, why))
        rank_zero_info(f"cs_lightning trace cache: the check of {model} is not remembered, it runs at every fit: {why}")
