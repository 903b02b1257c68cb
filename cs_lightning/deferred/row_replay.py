"""Replay a recorded op log for one rank's rows of each sharded tensor, exactly as eager.

A sharded rank holds rows ``[start, stop)`` of each parameter (FSDP2's ``Shard(0)``), that
is elements ``[lo, hi)`` of its contiguous storage. Eager construction draws every random
op's numbers from one mt19937 stream in order; the ops that fill a whole float32 storage
take a known count of numbers, so this rank knows where each op starts in the stream, enters
it at its own rows (``mt19937`` jump, see :func:`replay.skip_outputs`) and runs torch's own kernel on
them alone. Measured on torch 2.13's CPU kernels:

* ``uniform_`` takes one 32-bit word per float32 element, in order: rows ``[lo, hi)`` are
  words ``[lo, hi)``.
* ``normal_`` (contiguous float32, >= 16 elements) draws n words and transforms aligned
  chunks of 16 (Box-Muller, element j with j + 8); when n % 16 != 0 it recomputes the last
  16 elements from 16 further words. Aligned 16-chunks are generated in place; a chunk cut
  by ``lo`` or ``hi``, and the recomputed tail, go through a 16-element buffer.
* ``nn.init.trunc_normal_`` is one round of ``normal_`` unless an element falls out of
  bounds anywhere: each rank checks its rows and the ranks agree (one all-reduce); if any
  rank saw one, the call is generated whole, from its place in the stream.

Any other op on a sharded storage (``orthogonal_``, ops mixing rows or storages, draws of
unknown count or non-float32 dtype) makes that storage *whole*: it is computed in full, in
eager's place in the stream, and the caller keeps its rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from cs_lightning.deferred.arguments import unflatten
from cs_lightning.deferred.oplog import Const, Op, Recording, Ref, Storage
from cs_lightning.deferred.pages import advise_huge_pages
from cs_lightning.deferred.replay import (
    TRUNC_NORMAL,
    Executor,
    chunkable,
    is_contiguous_ref,
    live_ops,
    numbers_drawn,
    skip_outputs,
    truncated_normal,
)

aten = torch.ops.aten

# Ops that change each element from its own old value and scalars only: they act on rows alone.
_ELEMENTWISE = {
    aten.fill_.Scalar,
    aten.fill_.Tensor,
    aten.zero_.default,
    aten.mul_.Scalar,
    aten.mul_.Tensor,
    aten.div_.Scalar,
    aten.div_.Tensor,
    aten.add_.Scalar,
    aten.add_.Tensor,
    aten.sub_.Scalar,
    aten.sub_.Tensor,
    aten.clamp_.default,
    aten.clamp_min_.default,
    aten.clamp_max_.default,
    aten.neg_.default,
    aten.abs_.default,
    aten.sqrt_.default,
    aten.erfinv_.default,
    aten.exp_.default,
    aten.tanh_.default,
}
# Factories of a storage whose values need no stream: (what the rows get).
_EMPTY = {aten.empty.memory_format, aten.empty_strided.default}
_CONSTANT = {aten.zeros.default: 0.0, aten.ones.default: 1.0}
# Skips of this many outputs or more are jumped: a rank skips the other ranks' rows of each tensor, the same
# few distances layer after layer, so a jump costs ~0.9 ms (its polynomial cached), drawing 1M outputs ~1.6 ms.
# (Jumping from 0.5M on, about where the two cost the same, measured no faster: a new distance costs squarings.)
_ROWS_JUMP_FROM = 1 << 20


# How a row op acts: "fill" draws its rows from the stream, "trunc" is a truncated normal (one speculated round),
# "set" writes constants (nothing, for ``empty``), "apply" is an elementwise op on the rows alone.
_RowKind = Literal["fill", "trunc", "set", "apply"]


@dataclass
class _RowOp:
    """How a live op acts on a sharded storage's rows."""

    kind: _RowKind
    func: Any = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    words: int = 0
    numel: int = 0
    bounds: tuple[float, float] | None = None


def replay_rows(
    recording: Recording,
    *,
    ranges: dict[int, tuple[int, int]],
    every_rank: dict[int, list[tuple[int, int]]],
    whole: set[int],
    keep: set[int],
    on_rows: Callable[[int, torch.Tensor], None],
    on_whole: Callable[[int, Executor], None],
    agree: Callable[[bool], bool],
    draw_skipped_tail: bool,
    into: Callable[[int], torch.Tensor | None] = lambda sid: None,
) -> dict[int, str]:
    """Replay the recording's pending ops on the global CPU generator, this rank's rows only.

    ``ranges[sid]`` is the element range ``[lo, hi)`` this rank keeps of a sharded storage, ``every_rank[sid]``
    each rank's (this one's among them): an op is replayed by rows only where it can be on every rank, so that all
    ranks decide alike, and make the same collective calls (``agree``);
    ``whole`` are storages wanted in full (buffers). ``on_rows(sid, flat)`` gets a sharded
    storage's rows after its last live op; ``on_whole(sid, executor)`` a storage computed in
    full (a buffer, or a sharded one that could not be sliced: take its rows there). ``agree(ok)``
    is True when ``ok`` on every rank. ``into(sid)`` may give the flat tensor to make a sharded
    storage's rows in (its final place: no copy), else they are made in a tensor of their own. Returns the
    sharded storages generated whole, with why.
    ``draw_skipped_tail`` is :func:`~cs_lightning.deferred.replay.replay_exact`'s: with it, the global
    generator ends where eager construction leaves it.
    """
    indices = recording.pending()
    ops = [recording.ops[k] for k in indices]
    flags = live_ops(ops, set(ranges) | whole | keep)
    row_ops, demoted = _classify(ops, flags, every_rank, recording.storages)
    ranges = {sid: span for sid, span in ranges.items() if sid not in demoted}
    whole = whole | set(demoted)
    # A constructor that read a random value flushed the log (Recorder.flush): the values made then are in
    # the recording's executor, and this replay continues from them.
    executor = recording.executor or Executor(recording.storages, torch.device("cpu"))
    recording.executor = executor
    local: dict[int, torch.Tensor] = {}
    last_use = _last_uses(ops, flags, set(ranges) | whole)
    stream = _Stream()
    last_draw = max((k for k, op in enumerate(ops) if flags[k] and op.random), default=-1)

    def rows(sid: int) -> torch.Tensor:
        """This rank's rows of a sharded storage; the first call starts them from what its pending ops find."""
        if sid not in local:
            local[sid] = _start_rows(executor, sid, ranges[sid], into(sid))
            executor.release(sid)
        return local[sid]

    def finish(k: int) -> None:
        """Hand over the storages whose last live op is ``k``; -1: those with no pending op (made by a
        flush, or never written, as eager's empty memory)."""
        for sid in last_use.pop(k, ()):
            if sid in ranges:
                on_rows(sid, rows(sid))
                del local[sid]
            else:
                on_whole(sid, executor)
                if sid not in keep:
                    executor.release(sid)

    finish(-1)
    for k, op in enumerate(ops):
        if k in row_ops:
            sid = next(iter(op.writes))
            _run_rows(row_ops[k], op, rows(sid), ranges[sid], stream, agree, recording.storages[sid])
        elif flags[k]:
            if op.random:
                stream.seek_op()
            executor.run(op)
            if op.random:
                stream.restart()
        elif op.random and (draw_skipped_tail or k < last_draw):
            words = executor.global_draws(op)
            if words is None:
                stream.seek_op()
                executor.advance(op)
                stream.restart()
            else:
                stream.at += words
        finish(k)
    if draw_skipped_tail:
        stream.seek_op()
    recording.done.update(indices)
    if indices:  # (a later materialize of a replayed block moves nothing)
        recording.rng_after = torch.get_rng_state()
    return demoted


def _start_rows(executor: Executor, sid: int, span: tuple[int, int], given: torch.Tensor | None) -> torch.Tensor:
    """Rows ``span`` of a sharded storage as its pending ops find them (in ``given`` if there is one): what a
    flush made of it, else uninitialized, as eager's ``empty`` (a fill or factory then writes every row)."""
    lo, hi = span
    rows = given if given is not None else advise_huge_pages(torch.empty(hi - lo, dtype=executor.storages[sid].dtype))
    if sid in executor.bases:
        rows.copy_(executor.bases[sid][lo:hi])
    return rows


class _Stream:
    """Where the global generator is (``pos``) and where eager's stream is (``at``), in words
    since the last op that ran on the global generator."""

    def __init__(self) -> None:
        self.pos = 0
        self.at = 0

    def seek(self, word: int) -> None:
        """Move the global generator forward to word ``at + word``."""
        target = self.at + word
        if target < self.pos:
            raise AssertionError(f"row replay went back in the stream: {self.pos} -> {target}")
        skip_outputs(torch.default_generator, target - self.pos, _ROWS_JUMP_FROM)
        self.pos = target

    def seek_op(self) -> None:
        self.seek(0)

    def restart(self) -> None:
        """An op drew from the global generator itself: count from where it left it."""
        self.pos = self.at = 0


def _last_uses(ops: Sequence[Op], flags: list[bool], wanted: set[int]) -> dict[int, list[int]]:
    last: dict[int, int] = dict.fromkeys(wanted, -1)
    for k, op in enumerate(ops):
        if flags[k]:
            for sid in (op.reads | op.writes) & wanted:
                last[sid] = k
    by_op: dict[int, list[int]] = defaultdict(list)
    for sid, k in last.items():
        by_op[k].append(sid)
    return by_op


def _classify(
    ops: Sequence[Op], flags: list[bool], every_rank: dict[int, list[tuple[int, int]]], storages: dict[int, Storage]
) -> tuple[dict[int, _RowOp], dict[int, str]]:
    """Each live op on a sharded storage as a row op; the storages with an op that is not one on some rank
    (with that op's name): the same on every rank."""
    row_ops: dict[int, _RowOp] = {}
    demoted: dict[int, str] = {}
    for k, op in enumerate(ops):
        if not flags[k]:
            continue
        for sid in (op.reads | op.writes) & every_rank.keys():
            alone = op.reads | op.writes == {sid}
            row = _row_op(op, storages[sid], every_rank[sid]) if alone else None
            if row is None:
                demoted.setdefault(sid, _op_name(op))
            else:
                row_ops[k] = row
    return {k: row for k, row in row_ops.items() if not ops[k].writes & demoted.keys()}, demoted


def _op_name(op: Op) -> str:
    return getattr(op.func, "__name__", str(op.func))


def _covers(ref: Ref, storage: Storage) -> bool:
    itemsize = torch.empty((), dtype=ref.dtype, device="meta").element_size()
    return (
        ref.offset == 0
        and ref.dtype == storage.dtype
        and is_contiguous_ref(ref)
        and ref.numel * itemsize == storage.nbytes
    )


def _row_op(op: Op, storage: Storage, spans: list[tuple[int, int]]) -> _RowOp | None:
    """``op`` (whose only tensor is ``storage``) as an action on the rows of each of ``spans``, or None."""
    if any(isinstance(x, torch.Generator) for x in op.flat):
        return None
    if any(isinstance(x, Const) and x.value.numel() != 1 for x in op.flat):
        return None
    if op.func is TRUNC_NORMAL:
        fill = truncated_normal(op)
        if fill is None or not _covers(fill.target, storage):
            return None
        return _RowOp("trunc", fill.func, fill.args, {}, fill.words, fill.target.numel, fill.bounds)
    created = op.creates[0][1] if len(op.creates) == 1 else None
    if created is not None and not _covers(created, storage):
        return None
    if op.func in _EMPTY:
        return _RowOp("set")
    if op.func in _CONSTANT:
        return _RowOp("set", aten.fill_.Scalar, (_CONSTANT[op.func],))
    if op.func is aten.full.default:
        return _RowOp("set", aten.fill_.Scalar, (unflatten(op.flat, op.spec)[0][1],))
    chunk = chunkable(op)
    if chunk is not None:
        func, target = chunk
        if (
            target.dtype != torch.float32
            or not _covers(target, storage)
            or (func is aten.normal_.default and target.numel < 16)
        ):
            return None
        args, kwargs = _args_after_target(op)
        words = numbers_drawn(func, target.numel)
        return _RowOp("fill", func, args, kwargs, words, target.numel)
    if (
        op.func in _ELEMENTWISE
        and isinstance(op.flat[0], Ref)
        and not op.random
        and len({x for x in op.flat if isinstance(x, Ref)}) == 1
        and all(_local_part(op.flat[0], *span) is not False for span in spans)
    ):
        return _RowOp("apply", op.func)
    return None


def _args_after_target(op: Op) -> tuple[tuple, dict]:
    if op.creates and not (op.flat and isinstance(op.flat[0], Ref)):  # randn/rand: the defaults
        return (), {}
    args, kwargs = unflatten(op.flat, op.spec)
    return tuple(args[1:]), {key: v for key, v in kwargs.items() if key != "generator"}


def _run_rows(
    row: _RowOp,
    op: Op,
    out: torch.Tensor,
    span: tuple[int, int],
    stream: _Stream,
    agree: Callable[[bool], bool],
    storage: Storage,
) -> None:
    lo, hi = span
    if row.kind == "set":
        if row.func is not None:
            row.func(out, *row.args)
    elif row.kind == "apply":
        _apply(op, out, lo, hi)
    elif row.kind == "trunc":
        _trunc_rows(row, op, out, lo, hi, stream, agree, storage)
    elif lo == hi:  # no rows here: only the stream moves
        stream.at += row.words
    elif row.func is aten.uniform_.default:
        stream.seek(lo)
        out.uniform_(*row.args, **row.kwargs)
        stream.pos = stream.at + hi
        stream.at += row.words
    else:
        _normal_rows(out, lo, hi, row.numel, row.args, row.kwargs, stream)
        stream.at += row.words


def _normal_rows(out: torch.Tensor, lo: int, hi: int, n: int, args: tuple, kwargs: dict, stream: _Stream) -> None:
    """Elements ``[lo, hi)`` of a ``normal_`` over ``n`` elements starting at the stream's op."""
    ragged = n % 16 != 0
    body = n - 16 if ragged else n  # elements made by their own chunk; the last 16 of a ragged n by the tail
    buffer = torch.empty(16, dtype=out.dtype)
    stop = min(hi, body)
    cut = lo // 16 * 16 if lo < stop else stop  # rows all in the tail: no chunk of the body
    while cut < stop:
        stream.seek(cut)
        aligned_end = stop // 16 * 16
        if cut >= lo and aligned_end - cut >= 16:  # whole chunks, straight into place
            out[cut - lo : aligned_end - lo].normal_(*args, **kwargs)
            cut = aligned_end
        else:  # a chunk cut by the range
            buffer.normal_(*args, **kwargs)
            a, b = max(lo, cut), min(stop, cut + 16)
            out[a - lo : b - lo].copy_(buffer[a - cut : b - cut])
            cut += 16
        stream.pos = stream.at + cut
    if ragged and hi > body:
        stream.seek(n)
        buffer.normal_(*args, **kwargs)
        a = max(lo, body)
        out[a - lo : hi - lo].copy_(buffer[a - body : hi - body])
        stream.pos = stream.at + n + 16


def _trunc_rows(
    row: _RowOp,
    op: Op,
    out: torch.Tensor,
    lo: int,
    hi: int,
    stream: _Stream,
    agree: Callable[[bool], bool],
    storage: Storage,
) -> None:
    """One speculated round of ``normal_`` on the rows; the whole call if any rank's rows fell out."""
    state, pos = torch.get_rng_state(), stream.pos
    if lo < hi:
        _normal_rows(out, lo, hi, row.numel, row.args, {}, stream)
    assert row.bounds is not None, "a trunc row op carries its bounds"
    low, high = row.bounds
    if agree(not bool(((out < low) | (out > high)).any())):
        stream.at += row.words
        return
    # Another round somewhere: the whole call, from its place in the stream (rare: memory of one tensor).
    torch.set_rng_state(state)
    stream.pos = pos
    stream.seek_op()
    full = torch.empty(storage.nbytes // out.element_size(), dtype=out.dtype)
    target = op.flat[0]
    view = full.as_strided(target.size, target.stride, target.offset)
    args, kwargs = unflatten([view if isinstance(x, Ref) else x for x in op.flat], op.spec)
    op.func(*args, **kwargs)
    out.copy_(full[lo:hi])
    stream.restart()


def _apply(op: Op, out: torch.Tensor, lo: int, hi: int) -> None:
    """A deterministic elementwise op on this rank's part of the view it writes."""
    part = _local_part(op.flat[0], lo, hi)
    if not isinstance(part, tuple):  # no element here (a view that cannot be cut is never an "apply" op)
        return
    view = out.as_strided(*part)
    args, kwargs = unflatten(
        [view if isinstance(x, Ref) else x.value if isinstance(x, Const) else x for x in op.flat], op.spec
    )
    op.func(*args, **kwargs)


def _local_part(ref: Ref, lo: int, hi: int) -> tuple[tuple, tuple, int] | bool | None:
    """(size, stride, offset) in ``[lo, hi)``'s coordinates of the elements of view ``ref`` lying
    there; None when none does; False when the view's rows cannot be cut there as one view
    (a dim-0 slice whose elements straddle ``lo`` or ``hi``)."""
    size, stride, offset = (ref.size or (1,)), (ref.stride or (1,)), ref.offset
    if ref.numel == 0:
        return None
    if any(s < 0 for s in stride) or (size[0] > 1 and stride[0] == 0):
        return False
    span = sum((n - 1) * s for n, s in zip(size[1:], stride[1:]))  # extent of one dim-0 slice
    step = stride[0] if size[0] > 1 else 1
    inside = (max(0, -(-(lo - offset) // step)), min(size[0], (hi - 1 - span - offset) // step + 1))
    touching = (max(0, -(-(lo - span - offset) // step)), min(size[0], (hi - 1 - offset) // step + 1))
    count = max(0, inside[1] - inside[0])
    if count != max(0, touching[1] - touching[0]):
        return False
    if count == 0:
        return None
    local_size = (count, *size[1:]) if ref.size else ()
    local_stride = stride if ref.size else ()
    return local_size, local_stride, offset + inside[0] * step - lo
