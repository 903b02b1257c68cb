"""Evaluating closed forms on many steps at once: the steps, their pieces, and ``values()``.

A closed form runs once on a 1-D tensor of steps instead of once per step. This module
holds everything about *which* steps it runs on and where the results go; the schedules
hold only their formulas. It keeps no state between calls and changes no torch setting
(thread count, default dtype): every tensor it makes has its dtype given explicitly.

Closed forms return fresh tensors (or a constant that broadcasts), or a ``Pending`` value:
one with its last operations still to run (``Affine``: a multiply-add). ``values()`` writes each chunk's value into
the tensor it returns itself, by that multiply (torch's ``out=``) or else by a copy. No
closed form ever sees that tensor, so nothing a closed form computes can alias it or
another chunk's steps.

Bitwise agreement of ``values()`` and ``step()``: torch's CPU kernels compute the last few
elements of a tensor (and of each thread's share of it) with scalar code, whose sin, cos,
pow may differ from the vectorized code by one ulp. So every evaluation has a length that
is a multiple of ``_LANES`` times the thread count: each thread's share is then whole
vector lanes, every step takes the vectorized path, whichever call evaluates it.
``values()`` runs on one thread (see ``_one_thread``), which is also faster.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import functools
import itertools
import math
import os
import reprlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from numbers import Integral
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from cs_lightning.errors import TooLargeError, UsageError, UsageTypeError
from cs_lightning.schedulers import _checks

if TYPE_CHECKING:
    from cs_lightning.schedulers.base import Scheduler

# Elements of the widest vector lanes (and more), see above.
_LANES = 64
# Steps per closed-form call inside values(): the intermediates of one chunk stay in the
# cache from one pass to the next, and the allocator reuses their memory (measured 2**16
# to 2**19 on 10**7 steps: 2**17, 512 KB of float32, is fastest here).
_CHUNK = 1 << 17
# Length of the row Counting adds to each row start (long enough that the broadcast add
# runs at the speed of a plain one).
_ROW = 256
# A values() result this small is allocated without reading /proc/meminfo first (a read
# costs about as much as evaluating 50,000 steps).
_SURELY_FITS = 64 << 20
# Largest magnitude up to which every integer is exact in a float dtype.
EXACT = {torch.float32: 2**24, torch.float64: 2**53}


class Pending:
    """A closed form's value with its last operations still to run, by whoever keeps it:
    ``values()`` runs them straight into the tensor it returns (``into``, with torch's
    ``out=`` or by filling it: no copy afterwards), anyone else into a tensor of the value's
    own (``tensor()``). Both run the same operations, so the values agree bit for bit. The
    tensor written into is never handed to a closed form, so nothing it made can alias it."""

    __slots__ = ()

    def tensor(self) -> Tensor:
        """The value as a tensor of its own."""
        raise NotImplementedError

    def into(self, out: Tensor) -> None:
        """Write the value at the first ``len(out)`` steps into ``out`` (1-D)."""
        raise NotImplementedError

    def head(self, count: int) -> Pending:
        """The value at the first ``count`` steps."""
        raise NotImplementedError


class Affine(Pending):
    r"""A closed form's value :math:`b \, s + c` with its last two operations still to run:
    ``mul`` by :math:`s`, then ``add`` of :math:`c` unless it is 0.

    ``base`` (:math:`b`) is one value per step; nothing writes to it once the value is made
    (``tensor()`` and ``into`` read it), so asking twice, or for a ``head`` and the whole, is safe.
    """

    __slots__ = ("base", "scale", "shift")

    def __init__(self, base: Tensor, scale: float, shift: float = 0.0) -> None:
        self.base, self.scale, self.shift = base, scale, shift

    def tensor(self) -> Tensor:
        return _shift(torch.mul(self.base, self.scale), self.shift)

    def into(self, out: Tensor) -> None:
        base = self.base if len(self.base) == len(out) else self.base[: len(out)]
        _shift(torch.mul(base, self.scale, out=out), self.shift)

    def head(self, count: int) -> Affine:
        return self if count == len(self.base) else Affine(self.base[:count], self.scale, self.shift)


class _Periods(Pending):
    """Consecutive unit ``steps`` holding ``levels[j]`` through period ``first + j`` (periods of
    ``size`` steps): each level is written once per period's run of steps (see ``per_period``)."""

    __slots__ = ("first", "levels", "size", "steps")

    def __init__(self, steps: range, size: int, first: int, levels: Tensor) -> None:
        self.steps, self.size, self.first, self.levels = steps, size, first, levels

    def tensor(self) -> Tensor:
        out = torch.empty(len(self.steps), dtype=self.levels.dtype)
        self.into(out)
        return out

    def into(self, out: Tensor) -> None:
        # One pass: the first and last period may be cut short, the ones between are whole.
        r, size, levels = self.steps[: len(out)], self.size, self.levels
        last = (r.stop - 1) // size - self.first
        head = min(r.stop, (self.first + 1) * size) - r.start
        out[:head] = levels[0]
        if last > 0:
            whole = (last - 1) * size
            out[head : head + whole].view(-1, size).copy_(levels[1:last, None].expand(-1, size))
            out[head + whole :] = levels[last]

    def head(self, count: int) -> _Periods:
        return _Periods(self.steps[:count], self.size, self.first, self.levels)


Value = Tensor | Pending


def as_tensor(value: Value) -> Tensor:
    """``value`` as a tensor (a pending value's operations run now)."""
    return value.tensor() if isinstance(value, Pending) else value


def _shift(values: Tensor, offset: float) -> Tensor:
    """``values + offset`` in place; adding 0 changes no value, so it is skipped."""
    return values if offset == 0 else values.add_(offset)


def _write(value: Value, out: Tensor) -> None:
    """Write ``value`` (one per step, at ``len(out)`` steps or more) into ``out`` (1-D)."""
    if isinstance(value, Pending):
        value.into(out)
    else:
        out.copy_(value[: len(out)])


class Counting:
    """Float steps counted for a ``values()`` call: a chunk's steps are a column of row starts
    plus a row 0, 1, ..., ``_ROW - 1``, added with broadcasting. One pass over the chunk (and
    a smaller one over its row starts), where a float ``arange`` costs three (it computes each
    element in double); only the short row is made once per call and shared by its chunks."""

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: dict[torch.dtype, Tensor] = {}

    def floats(self, steps: range, dtype: torch.dtype) -> Tensor:
        """``steps`` (exact in ``dtype``) as a fresh float tensor."""
        if steps.step != 1:
            return torch.arange(steps.start, steps.stop, steps.step, dtype=dtype)
        row = self._rows.get(dtype)
        if row is None:
            row = self._rows[dtype] = torch.arange(_ROW, dtype=dtype)
        starts = torch.arange(steps.start, steps.stop, _ROW, dtype=dtype)
        floats = torch.add(starts.unsqueeze(1), row).view(-1)
        return floats if len(floats) == len(steps) else floats[: len(steps)]


class Steps:
    """The steps a closed form is evaluated at: a range, or any tensor of int steps.

    Stepping and ``values()`` evaluate ranges: float steps then are counted in that dtype
    (no int64 tensor in between), and pieces of the range stay ranges. Each form of the
    steps is made once per evaluation and shared by the closed forms nested in it, so they
    must not modify it in place.
    """

    __slots__ = ("_counting", "_floats", "_ints", "range")

    def __init__(self, steps: range | Tensor, counting: Counting | None = None) -> None:
        self.range = steps if isinstance(steps, range) else None
        self._ints = None if isinstance(steps, range) else steps
        self._floats: dict[torch.dtype, Tensor] = {}
        self._counting = counting

    @property
    def shape(self) -> torch.Size:
        return torch.Size([len(self.range)]) if self.range is not None else self.ints().shape

    def ints(self) -> Tensor:
        """The steps as an int64 tensor (``last_epoch``)."""
        if self._ints is None:
            assert self.range is not None  # one of the two is always set
            self._ints = torch.arange(self.range.start, self.range.stop, self.range.step, dtype=torch.int64)
        return self._ints

    def floats(self, dtype: torch.dtype) -> Tensor:
        """The steps converted to ``dtype``, as ``last_epoch.to(dtype)`` gives them."""
        floats = self._floats.get(dtype)
        if floats is None:
            floats = self._floats[dtype] = self._converted(dtype)
        return floats

    def own_floats(self, dtype: torch.dtype) -> Tensor:
        """``floats(dtype)`` as a tensor of the caller's own, which it may change in place: a
        closed form's first operation then makes no second tensor (counted anew unless the
        shared one exists; one pass either way)."""
        floats = self._floats.get(dtype)
        return floats.clone() if floats is not None else self._converted(dtype)

    def _converted(self, dtype: torch.dtype) -> Tensor:
        r = self.range
        if r is not None and max(abs(r.start), abs(r.stop)) <= EXACT[dtype]:
            return (self._counting or Counting()).floats(r, dtype)
        return self.ints().to(dtype)

    def ascending(self) -> range | None:
        """The steps as an increasing range, or None when they are not one."""
        r = self.range
        return r if r is not None and r.step > 0 else None

    def shifted(self, offset: int) -> Steps:
        """These steps plus ``offset``, in the same form (a child of a sequence counts from its stage)."""
        r = self.range
        if r is not None:
            return Steps(range(r.start + offset, r.stop + offset, r.step), self._counting)
        return Steps(self.ints() + offset)

    def part(self, steps: range | Tensor) -> Steps:
        """Other steps of the same evaluation (a piece of these), lengthened to whole lanes."""
        return Steps(_whole_lanes(steps), self._counting)


def bounds(steps: range, edges: Sequence[int]) -> list[int]:
    """Where the stages between ``edges`` (increasing steps) begin among increasing ``steps``,
    and where the last one ends: ``[0, ..., len(steps)]``."""
    return [0, *(bisect.bisect_left(steps, edge) for edge in edges), len(steps)]


def lanes() -> int:
    """The length every evaluation is a multiple of (see the module docstring). The thread
    count is read, never set: a call running while another thread changes it may lose the
    bitwise agreement, never a value's float32 precision."""
    return _LANES * max(1, torch.get_num_threads())


def padded(steps: range) -> range:
    """An increasing range extended by later steps to whole lanes (see ``lanes``); the first
    ``len(steps)`` values are computed as before."""
    multiple = lanes()
    size = -(-len(steps) // multiple) * multiple
    return range(steps.start, steps.start + size * steps.step, steps.step)


def _whole_lanes(steps: range | Tensor) -> range | Tensor:
    """``steps`` lengthened to whole lanes: an increasing range by later steps, anything else
    by step 0 (the extra values are dropped)."""
    if isinstance(steps, range) and steps.step > 0:
        return padded(steps)
    if isinstance(steps, range):
        steps = torch.arange(steps.start, steps.stop, steps.step, dtype=torch.int64)
    return torch.cat([steps, steps.new_zeros(-len(steps) % lanes())])


# -- schedules made of pieces -------------------------------------------------------------

Piece = Callable[[int, Steps], Value]


def piecewise(steps: Steps, edges: Sequence[int], piece: Piece, dtype: torch.dtype) -> Value:
    r"""``piece(j, s)`` at the steps :math:`m_{j-1} \le k < m_j` (``edges`` = :math:`m`,
    increasing, :math:`m_{-1} = 0`): each piece is evaluated on its own steps only.

    ``piece(j, s)`` returns its values at the steps ``s`` (one per step, or a constant). Over
    increasing ranges each piece gets a range; other steps are grouped by piece and the
    values put back in their order. Each piece's steps are lengthened to whole lanes and the
    extra values dropped.
    """
    r = steps.ascending()
    if r is not None:
        ends = bounds(r, edges)
        inside = [index for index, (begin, end) in enumerate(itertools.pairwise(ends)) if end > begin]
        if len(inside) == 1:  # all in one piece (most chunks of a long evaluation): no copy
            return _piece(piece, inside[0], steps, r)
        out = torch.empty(len(r), dtype=dtype)
        for index, (begin, end) in enumerate(itertools.pairwise(ends)):
            if end > begin:
                _write(_piece(piece, index, steps, r[begin:end]), out[begin:end])
        return out
    k = steps.ints()
    flat = k.reshape(-1)
    which = torch.searchsorted(torch.tensor(edges, dtype=flat.dtype), flat, right=True)
    out = torch.empty(flat.shape, dtype=dtype)
    for index in torch.unique(which).tolist():
        where = (which == index).nonzero().squeeze(1)
        out.index_copy_(0, where, as_tensor(_piece(piece, index, steps, flat.index_select(0, where))))
    return out.reshape(k.shape)


def _piece(piece: Piece, index: int, steps: Steps, chosen: range | Tensor) -> Value:
    whole = steps.part(chosen)
    value = piece(index, whole)
    if isinstance(value, Pending):
        return value.head(len(chosen))
    return value.expand(whole.shape)[: len(chosen)]


def stairs(steps: Steps, edges: Sequence[int], levels: Tensor) -> Tensor:
    r"""``levels[j]`` at the steps :math:`m_{j-1} \le k < m_j` (``edges`` = :math:`m`,
    increasing; one level more than edges)."""
    r = steps.ascending()
    if r is None:
        k = steps.ints()
        index = torch.searchsorted(torch.tensor(edges, dtype=k.dtype), k.reshape(-1), right=True)
        return levels.index_select(0, index).reshape(k.shape)
    ends = bounds(r, edges)
    return torch.cat([level.expand(end - begin) for level, begin, end in zip(levels, ends, ends[1:]) if end > begin])


def per_period(steps: Steps, size: int, dtype: torch.dtype, levels: Callable[[Tensor], Tensor]) -> Value:
    r"""``levels(p)`` at :math:`p = \lfloor k / \text{size} \rfloor` for each step :math:`k`
    (``p`` a float tensor), computing each period's level once over consecutive steps.

    Below ``EXACT`` the float :math:`\lfloor k / S \rfloor` is the integer ``k // S``, so
    both ways give the same periods; past it each step's period is computed as floats.
    """
    r = steps.ascending()
    if r is None or r.step != 1 or r.stop > EXACT[dtype]:
        return levels(torch.div(steps.floats(dtype), size).floor_())
    first, last = r.start // size, (r.stop - 1) // size
    periods = padded(range(first, last + 1))
    values = levels(torch.arange(periods.start, periods.stop, dtype=dtype)).expand(len(periods))
    return _Periods(r, size, first, values)


# -- values() -----------------------------------------------------------------------------


def values(scheduler: Scheduler, steps: int | Iterable[int] | Tensor) -> Tensor:
    """``scheduler``'s values at ``steps``, ``(len(steps), param groups)``; see ``Scheduler.values``."""
    owner = type(scheduler).__name__
    chosen = _as_steps(owner, steps)
    groups = len(scheduler.optimizer.param_groups)
    out = _result(owner, len(chosen), groups, scheduler._dtype)
    if len(scheduler._targets) != groups:
        out.fill_(math.nan)
    with _one_thread():
        _fill(scheduler, chosen, out)
    return out


def _fill(scheduler: Scheduler, steps: range | Tensor, out: Tensor) -> None:
    """Evaluate a chunk of ``steps`` at a time, writing each into its rows of ``out``."""
    count = len(steps)
    multiple = lanes()
    chunk = max(_CHUNK // multiple, 1) * multiple
    counting = Counting()
    for begin in range(0, count, chunk):
        part = out[begin : begin + chunk]
        value = scheduler._value_at(Steps(_whole_lanes(steps[begin : begin + chunk]), counting))
        store(scheduler, value, part, scheduler._targets)


def store(scheduler: Scheduler, value: Value, out: Tensor, columns: Sequence[int]) -> None:
    """Write ``scheduler``'s ``value`` (its closed form's, at ``len(out)`` steps or more) into
    ``columns`` of ``out`` (steps, groups), one per targeted group, each times its group's
    scale. Stepping and ``values()`` both write their values this way."""
    first, *others = columns
    if scheduler._unscaled:
        _write(value, out[:, first])
        for column in others:
            out[:, column].copy_(out[:, first])
        return
    curve = as_tensor(value)[: len(out)]
    for column, scale in zip(columns, scheduler._scales.to(curve.dtype)):
        torch.mul(curve, scale, out=out[:, column])


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Meanwhile, torch ops called from this thread run on this thread only.

    torch splits cos, floor, ... among its threads from 2048 elements on, and on a busy
    machine every split waits for each thread to get a core: values() of 10**7 steps took
    10 to 20 times as long on 2 threads as on one, under a load average of 6. (One thread
    also keeps every element on the vectorized path, see the module docstring.)
    ``torch.set_num_threads`` would change the count for every thread of the process;
    OpenMP's own count (``omp_set_num_threads``) belongs to the thread that sets it, so
    only this thread's is set, and restored after, also on error. Without OpenMP, torch's
    threads run the evaluation.
    """
    set_threads = _omp_set_num_threads()
    if set_threads is None:
        yield
        return
    threads = torch.get_num_threads()  # this thread's count (torch sets it up first if need be)
    set_threads(1)
    try:
        yield
    finally:
        set_threads(threads)


@functools.cache
def _omp_set_num_threads() -> Callable[[int], object] | None:
    """OpenMP's per-thread ``omp_set_num_threads`` of the runtime torch loaded, or None
    (a symbol looked up once: it does not change while the process runs)."""
    try:
        function = ctypes.CDLL(None).omp_set_num_threads
    except (AttributeError, OSError, TypeError):  # no such symbol; no process handle (Windows)
        return None
    function.argtypes, function.restype = [ctypes.c_int], None
    return function


def _result(owner: str, count: int, groups: int, dtype: torch.dtype) -> Tensor:
    """The tensor ``values()`` fills, or a TooLargeError saying it does not fit: checked before
    allocating, as Linux would promise the memory and kill the process filling it; and if the
    allocator refuses."""
    size = count * groups * dtype.itemsize
    available = _available_memory() if size > _SURELY_FITS else None
    if available is None or size <= available:
        try:
            return torch.empty(count, groups, dtype=dtype)
        except RuntimeError as error:
            if "can't allocate memory" not in str(error):
                raise
    raise TooLargeError(
        f"{owner}.values: {count} steps x {groups} param group{'s' * (groups != 1)} of {dtype} need "
        f"{size / 1e9:.1f} GB, more than the {(available or 0) / 1e9:.1f} GB of memory available; fix: ask "
        "for the steps you need (a range with a stride, e.g. range(0, n, 1000), or a tensor of steps)"
    )


def _available_memory() -> int | None:
    """Bytes of memory this process could still get (Linux's MemAvailable, else the free
    pages), or None where the system does not say."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _as_steps(owner: str, steps: int | Iterable[int] | Tensor) -> range | Tensor:
    """Validated steps: a range (made into tensors a chunk at a time) or a 1-D int64 tensor."""
    if isinstance(steps, Integral) and not isinstance(steps, bool):  # numpy's integers too
        steps = range(_checks.integer(owner, "steps", steps, 0))
    chosen: range | Tensor
    if isinstance(steps, range):
        chosen, lowest = steps, min(steps[0], steps[-1]) if steps else 0
    else:
        chosen = _step_tensor(owner, steps).to(torch.int64)
        lowest = int(chosen.min()) if chosen.numel() else 0
    if lowest < 0:
        raise UsageError(f"{owner}.values: got a negative step ({lowest}); steps start at 0")
    return chosen


def _step_tensor(owner: str, steps: object) -> Tensor:
    """``steps`` as a 1-D integer tensor, or a TypeError naming it (floats and bools are not steps)."""
    try:
        tensor = torch.as_tensor(steps if isinstance(steps, Tensor) else list(steps))  # type: ignore[call-overload]
    except (TypeError, ValueError, RuntimeError):
        tensor = None
    integers = tensor is not None and (
        tensor.numel() == 0 or not (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool)
    )
    if tensor is None or not integers or tensor.ndim != 1:
        raise UsageTypeError(
            f"{owner}.values: got steps={reprlib.repr(steps)}; pass an int n (for range(n)), a range "
            "or a 1-D sequence of int steps"
        )
    if tensor.is_meta:  # it has a shape but no values to compute with
        raise UsageTypeError(
            f"{owner}.values: got steps on the meta device, which hold no values; give a CPU tensor, a range "
            "or a list of int steps"
        )
    return tensor
