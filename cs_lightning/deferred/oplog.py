"""The op log a recording makes and a replay reads: its entries and the recording that holds them.

The recorder (``recorder.py``) appends to a :class:`Recording`; the replays (``replay.py``,
``row_replay.py``, ``independent.py``) read it and note what they ran. Neither imports the
other for these types: they meet here.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from cs_lightning.errors import DeferredInitError

if TYPE_CHECKING:
    from cs_lightning.deferred.arguments import Structure
    from cs_lightning.deferred.replay import Executor


@dataclass(frozen=True)
class Ref:
    """A recorded tensor: a strided view of one tracked storage."""

    sid: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.size)


@dataclass(frozen=True)
class Const:
    """A tensor made outside the recording, entering the log as a value."""

    value: torch.Tensor
    version: int


@dataclass
class Storage:
    """One tracked storage: what a replay must allocate for it."""

    sid: int
    nbytes: int
    dtype: torch.dtype
    device: torch.device
    meta: torch.Tensor  # keeps the meta storage, and so its address, alive


@dataclass
class Op:
    """One logged aten call (or whole init function); tensors in ``flat`` are refs."""

    func: Callable[..., Any]  # an aten OpOverload, or an init function (record_call)
    flat: list[Any]
    spec: Structure  # of flat's values: see arguments.py
    reads: frozenset[int]
    writes: frozenset[int]
    overwrites: frozenset[int]
    creates: tuple[tuple[int, Ref], ...]  # (index among flat outputs, new storage's view)
    random: bool


class Recording:
    """The op log of one :func:`~cs_lightning.deferred.recording` block, the storages it tracks, the
    tensors recorded in it, and what replays have done with it so far."""

    _serials = itertools.count()
    _last: weakref.ref[Recording] | None = None

    def __init__(self) -> None:
        self.serial = next(Recording._serials)  # recording order
        self.ops: list[Op] = []
        self.storages: dict[int, Storage] = {}
        self.uninitialized: set[int] = set()
        self.done: set[int] = set()  # indices of ops an earlier replay ran
        self.materialized = False  # a materialize took tensors of it (a flush during recording does not count)
        self.executor: Executor | None = None  # the replay state, kept across materialize calls
        self.rng_state = torch.get_rng_state()  # what eager would have drawn from
        self.rng_after: torch.Tensor | None = None  # set when its replay is complete
        # Set when the global generator was jumped past the pending draws as the block ended
        # (see recorder.jump_past_draws): the state those draws start from, and the jumped-to one.
        self.replay_from: torch.Tensor | None = None
        self.jumped_to: torch.Tensor | None = None
        self.site = "unknown location"  # the user's line that opened the recording block
        self.overtaken = False  # a recording that follows it was materialized first (a warning said so)
        self.abandoned = False  # its run ended before materializing it (a refused checkpoint): none follows it
        # Recorded right after another recording whose draws are still deferred: eager
        # would have drawn from the state that one's replay leaves.
        self.follows: Recording | None = None
        previous = Recording._last() if Recording._last is not None else None
        if (
            previous is not None
            and not previous.abandoned
            and len(previous.done) < len(previous.ops)
            and any(op.random for op in previous.ops)
            and torch.equal(previous.rng_state, self.rng_state)
        ):
            self.follows = previous
        Recording._last = weakref.ref(self)
        self.alive: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()  # its deferred tensors still held
        self._sids: dict[int, int] = {}  # meta storage address -> sid
        self._metas: dict[int, torch.Tensor] = {}  # wrapper storage address -> meta

    @contextlib.contextmanager
    def eager_generator(self) -> Iterator[None]:
        """Replays in the block draw from the global generator as eager construction found it: as it is
        now, or, once the generator was jumped past the draws, from the saved state, putting back
        the present state afterwards (the draws made since the block are the user's)."""
        if self.replay_from is None:
            yield
            return
        now = torch.get_rng_state()
        torch.set_rng_state(self.replay_from)
        try:
            yield
        finally:
            torch.set_rng_state(now)

    def pending(self) -> list[int]:
        """Indices of the ops no replay has run yet, in recording order."""
        return [k for k in range(len(self.ops)) if k not in self.done]

    def meta(self, fake: torch.Tensor) -> torch.Tensor:
        """The meta tensor holding a recorded tensor's metadata."""
        # Keyed by the wrapper's own storage, which `t.data = other` also swaps (torch's method: a
        # DeferredTensor's own describes the tensor for its error, which would cost every op here).
        try:
            return self._metas[torch.Tensor.untyped_storage(fake)._cdata]
        except KeyError:  # its memory is real: `t.data = real_tensor` swapped it in
            raise DeferredInitError(
                f"a deferred tensor of shape {tuple(fake.shape)} was given real memory (`tensor.data = "
                "<a real tensor>`), which a recording cannot replay: the tensor would alias the real one after "
                "materialize. Copy the values in instead (`with torch.no_grad(): tensor.copy_(real)`), or set "
                "`.data` once the module is materialized."
            ) from None

    def ref(self, fake: torch.Tensor) -> Ref:
        """Which storage a recorded tensor views, and how."""
        m = self.meta(fake)
        return Ref(
            self._sids[m.untyped_storage()._cdata], tuple(m.size()), tuple(m.stride()), int(m.storage_offset()), m.dtype
        )
