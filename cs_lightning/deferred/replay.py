"""Replay a recorded op log exactly: the same aten calls, in the same order, as eager.

Two things make replay cheaper than eager construction without changing a single bit:

* Dead ops are skipped. An op is dead when every storage it writes is fully
  overwritten before anything reads it (the default ``reset_parameters`` init that a
  later ``apply(_init_weights)`` replaces; the init of a tensor a checkpoint provides).
* A dead op that draws random numbers still advances the generator by exactly as many
  numbers as eager drew, without allocating the tensor: on the CPU, where the count is
  known, by jumping the mt19937 state ahead (see ``mt19937.py``; cheap whatever the
  count), otherwise by drawing into a small scratch buffer, chunk by chunk.

Each storage is allocated lazily at its first live op and handed to ``on_ready`` right
after its last one, so a caller that casts and frees there holds one float32 tensor at a
time, never the whole model.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from cs_lightning.deferred import mt19937
from cs_lightning.deferred.arguments import flatten, unflatten
from cs_lightning.deferred.oplog import Const, Op, Recording, Ref, Storage
from cs_lightning.deferred.pages import advise_huge_pages
from cs_lightning.errors import DeferredInitError

aten = torch.ops.aten
# torch's own functions: recording wraps the public names (recorder._WHOLE_CALLS, _CALLS_AFTER_THE_BLOCK),
# and the log holds these.
TRUNC_NORMAL = torch.nn.init.trunc_normal_
ORTHOGONAL = torch.nn.init.orthogonal_

# Elements per scratch chunk: a multiple of 16, which keeps normal_'s draw count
# (it redraws a 16-element tail when the size is not a multiple of 16) unchanged.
_CHUNK = 1 << 18
# Skipped draws up to this many are drawn (~1.7 ns each); more are jumped over (~1 ms for a
# distance jumped before, 10-30 ms for a new one). From _JUMP_KNOWN_FROM on, a distance met
# before (in this process or, through the cache folder, an earlier one) is jumped.
_JUMP_FROM = 1 << 23
_JUMP_KNOWN_FROM = 1 << 20


def live_ops(ops: Sequence[Op], needed: set[int]) -> list[bool]:
    """Which ops contribute to the final values of the ``needed`` storages."""
    live = set(needed)
    flags = [False] * len(ops)
    for k in range(len(ops) - 1, -1, -1):
        op = ops[k]
        if op.writes & live:
            flags[k] = True
            live -= op.overwrites
            live |= op.reads
        else:
            live |= _inputs_when_dead(op)
    return flags


def _inputs_when_dead(op: Op) -> frozenset[int]:
    """The storages a dead op still reads: a random op other than a fill is run to draw its numbers, whose count
    may depend on its inputs (``poisson`` of rates, ``bernoulli`` of probabilities); not on what it writes."""
    return op.reads - op.writes if op.random and chunkable(op) is None else frozenset()


def _chunks(n: int) -> list[int]:
    """Split ``n`` draws into chunks consuming exactly what one call of size n does."""
    q, r = divmod(n, _CHUNK)
    if q == 0 or r == 0:
        return [n] if q == 0 else [_CHUNK] * q
    # the last chunk must keep n's size modulo 16 and be at least 16 long
    return [_CHUNK] * q + [r] if r >= 16 else [_CHUNK] * (q - 1) + [_CHUNK + r]


class Executor:
    """Real storages for a replay, on one device (None: where they were recorded)."""

    def __init__(self, storages: dict[int, Storage], device: torch.device | None) -> None:
        self.storages = storages
        self.device = device
        self.bases: dict[int, torch.Tensor] = {}
        self._consts: dict[int, torch.Tensor] = {}
        # Released storages, reused for the next one of the same size: freeing and
        # reallocating instead leaves glibc's heap holding the whole float32 model.
        self._spare: dict[tuple, list[torch.Tensor]] = defaultdict(list)

    def device_of(self, sid: int) -> torch.device:
        return self.device if self.device is not None else self.storages[sid].device

    def base(self, sid: int) -> torch.Tensor:
        """The whole storage as a flat tensor of the dtype it was created with."""
        if sid not in self.bases:
            s = self.storages[sid]
            try:  # one atomic pop: independent mode's threads share the spares
                self.bases[sid] = self._spare[(s.nbytes, s.dtype, self.device_of(sid))].pop()
            except IndexError:
                itemsize = torch.empty((), dtype=s.dtype, device="meta").element_size()
                fresh = torch.empty(s.nbytes // itemsize, dtype=s.dtype, device=self.device_of(sid))
                self.bases[sid] = advise_huge_pages(fresh)
        return self.bases[sid]

    def view(self, ref: Ref) -> torch.Tensor:
        base = self.base(ref.sid)
        if base.dtype != ref.dtype:
            base = base.view(ref.dtype)
        return base.as_strided(ref.size, ref.stride, ref.offset)

    def release(self, sid: int, reusable: bool = False) -> None:
        """Forget a storage; ``reusable`` when nothing outside the replay holds it."""
        base = self.bases.pop(sid, None)
        if reusable and base is not None:
            s = self.storages[sid]
            spare = self._spare[(s.nbytes, s.dtype, base.device)]
            if len(spare) < 2:
                spare.append(base)

    def drop_spares(self) -> None:
        self._spare.clear()

    def _const(self, c: Const) -> torch.Tensor:
        if c.value._version != c.version:
            raise DeferredInitError(
                f"a tensor of shape {tuple(c.value.shape)} created outside the recording "
                "and used by the constructor was modified in place after it was recorded; "
                "materialize would not see the value eager construction saw. Modify it "
                "after materialize, or pass a copy to the constructor."
            )
        key = id(c)
        if key not in self._consts:
            device = self.device if self.device is not None else c.value.device
            self._consts[key] = c.value.to(device)
        return self._consts[key]

    def _resolve(self, op: Op) -> tuple:
        flat = [self.view(x) if isinstance(x, Ref) else self._const(x) if isinstance(x, Const) else x for x in op.flat]
        args, kwargs = unflatten(flat, op.spec)
        if self.device is not None and kwargs.get("device") is not None:
            kwargs["device"] = self.device
        return args, kwargs

    def run(self, op: Op, generator: torch.Generator | None = None) -> None:
        """Execute a live op for real and adopt the storages it creates.

        With ``generator``, a random op draws from it instead of the global generator.
        """
        args, kwargs = self._resolve(op)
        if generator is not None and op.random:
            out = _draw_from(generator, op.func, args, kwargs)
        else:
            out = op.func(*args, **kwargs)
        if not op.creates:
            return
        outs = flatten(out)[0]
        for j, ref in op.creates:
            self._adopt(ref, outs[j])

    def _adopt(self, ref: Ref, out: torch.Tensor) -> None:
        sid = ref.sid
        s = self.storages[sid]
        n = s.nbytes // out.element_size()
        if (
            out.untyped_storage().nbytes() == s.nbytes
            and tuple(out.stride()) == ref.stride
            and out.storage_offset() == ref.offset
        ):
            # torch.empty in a constructor has written nothing yet, so the init that fills it gets huge pages (a
            # creation that fills its output, torch.ones, has its pages already: the advice then changes nothing)
            self.bases[sid] = advise_huge_pages(out.as_strided((n,), (1,), 0))
        else:  # the real kernel chose another layout than the meta one: copy into it
            self.bases[sid] = advise_huge_pages(torch.empty(n, dtype=s.dtype, device=out.device))
            self.view(ref).copy_(out)

    def advance(self, op: Op) -> None:
        """Draw what a dead random op would draw, without allocating its result."""
        fill = chunkable(op)
        if fill is not None and self.device_of(fill[1].sid).type == "cpu":
            func, target, args, kwargs = *fill, *self._scratch_args(op)
            scratch = torch.empty(min(target.numel, _CHUNK + 16), dtype=target.dtype)
            for size in _chunks(target.numel):
                func(scratch[:size], *args, **kwargs)
            return
        # Anything else: run it on throwaway storages (one tensor's worth, then freed).
        saved = dict(self.bases)
        try:
            self.run(op)
        finally:
            for sid in list(self.bases):
                if sid not in saved:
                    del self.bases[sid]

    def global_draws(self, op: Op) -> int | None:
        """How many outputs of the global CPU generator a dead op takes; None: unknown."""
        if any(isinstance(x, torch.Generator) for x in op.flat):
            return None  # draws from a generator of its own (given by keyword or, to a whole call, by position)
        return self.draws(op)

    def draws(self, op: Op) -> int | None:
        """How many outputs of the CPU generator it draws from an op takes; None: unknown."""
        fill = chunkable(op) or _orthogonal_draw(op)
        if fill is None or self.device_of(fill[1].sid).type != "cpu":
            return None
        func, target = fill
        words_per_number = {torch.float32: 1, torch.float64: 2}.get(target.dtype)
        if words_per_number is None or (func is aten.normal_.default and target.numel < 16):
            return None  # other paths (cached Box-Muller, other dtypes): draw them
        return words_per_number * numbers_drawn(func, target.numel)

    def _scratch_args(self, op: Op) -> tuple[tuple, dict]:
        """The op's arguments after the tensor it fills (none for randn and rand)."""
        if op.func in _FACTORIES:
            return (), {}
        flat = [self._const(x) if isinstance(x, Const) else x for x in op.flat]
        args, kwargs = unflatten(flat, op.spec)
        return args[1:], kwargs


def numbers_drawn(func: torch._ops.OpOverload, numel: int) -> int:
    """Numbers a CPU ``uniform_`` or ``normal_`` (of 16 elements or more) draws to fill ``numel``:
    one each, and ``normal_`` redraws a 16-number tail when ``numel`` is not a multiple of 16."""
    return numel + (16 if func is aten.normal_.default and numel % 16 else 0)


# Random ops whose draw count depends only on the number of elements (normal_ also on
# contiguity), with the in-place op that draws the same numbers into a scratch buffer.
_FACTORIES = {aten.randn.default: aten.normal_.default, aten.rand.default: aten.uniform_.default}


def chunkable(op: Op) -> tuple[torch._ops.OpOverload, Ref] | None:
    """The in-place fill that draws what ``op`` draws and the tensor it fills, when the draws can be made in
    chunks (a ``_FACTORIES`` op, or ``uniform_``/``normal_`` of a contiguous tensor); else None."""
    if op.func in _FACTORIES and len(op.creates) == 1:
        return _FACTORIES[op.func], op.creates[0][1]
    target = op.flat[0] if op.flat and isinstance(op.flat[0], Ref) else None
    if target is None or op.func not in (aten.normal_.default, aten.uniform_.default):
        return None
    if op.func is aten.normal_.default and not is_contiguous_ref(target):
        return None
    return op.func, target


def _orthogonal_draw(op: Op) -> tuple[torch._ops.OpOverload, Ref] | None:
    """A recorded ``nn.init.orthogonal_`` draws as ``normal_`` of a new contiguous tensor of its target's
    size and dtype does (then computes a QR decomposition of it): that fill, and the target."""
    return (aten.normal_.default, op.flat[0]) if op.func is ORTHOGONAL else None


def is_contiguous_ref(ref: Ref) -> bool:
    """Whether the recorded tensor ``ref`` is laid out row-major without gaps (sizes of 1 have any stride)."""
    expected, stride = [], 1
    for size in reversed(ref.size):
        expected.append(stride)
        stride *= size
    return all(s == e or n == 1 for s, e, n in zip(ref.stride, reversed(expected), ref.size))


_GLOBAL_RNG = threading.Lock()


def _draw_from(generator: torch.Generator, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run a random op drawing from ``generator`` instead of the global generator."""
    if not isinstance(func, torch._ops.OpOverload):  # a recorded init function
        signature = inspect.signature(func)
        if "generator" in signature.parameters:  # given as it was, by position or keyword: replaced
            bound = signature.bind(*args, **kwargs)
            bound.arguments["generator"] = generator
            return func(*bound.args, **bound.kwargs)
    elif "generator" in {a.name for a in func._schema.arguments}:
        return func(*args, **{**kwargs, "generator": generator})
    else:
        name = func._overloadname
        sibling = "generator" if name == "default" else f"{name}_generator"
        if sibling in func.overloadpacket.overloads():
            return getattr(func.overloadpacket, sibling)(*args, **kwargs, generator=generator)
    # No generator argument at all (randn_like, ...): seed the global generator from
    # ours for this one op, under a lock, and put the global state back afterwards.
    device = generator.device
    cuda = [device.index or 0] if device.type == "cuda" else []
    target = torch.cuda.default_generators[cuda[0]] if cuda else torch.default_generator
    with _GLOBAL_RNG, torch.random.fork_rng(devices=cuda):
        target.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        return func(*args, **kwargs)


def replay_exact(
    recording: Recording,
    *,
    targets: set[int],
    keep: set[int],
    device: torch.device | None,
    draw_skipped_tail: bool,
    on_ready: Callable[[int, Executor], None],
    workers: int = 1,
) -> None:
    """Replay the recording's pending ops on the global generator, eager's order.

    ``targets`` are storages the caller wants (``on_ready`` is called for each after its
    last live op); ``keep`` are storages other live tensors still hold, computed and kept
    in the recording for a later materialize. ``draw_skipped_tail`` also moves the generator past
    the numbers of the dead random ops after the last live one, so it ends where eager leaves
    it (``rng="eager"``); False leaves them undrawn (``rng="skip_unread"``). With ``workers > 1`` the
    random fills are generated on that many threads when the log allows it (see
    :func:`_parallel_plan`), with the very same numbers.
    """
    indices = recording.pending()
    ops = [recording.ops[k] for k in indices]
    flags = live_ops(ops, targets | keep)
    executor = recording.executor or Executor(recording.storages, device)
    recording.executor = executor
    last_use: dict[int, int] = dict.fromkeys(targets, -1)
    for k, op in enumerate(ops):
        if flags[k]:
            for sid in op.reads | op.writes:
                last_use[sid] = k
        else:
            for sid in _inputs_when_dead(op):
                last_use[sid] = k
    done_at: dict[int, list[int]] = defaultdict(list)
    for sid, k in last_use.items():
        done_at[k].append(sid)
    last_draw = max((k for k, op in enumerate(ops) if flags[k] and op.random), default=-1)

    def finish(k: int) -> None:
        for sid in done_at.pop(k, ()):
            if sid in targets:
                on_ready(sid, executor)
            elif sid not in keep:
                executor.release(sid, reusable=True)

    finish(-1)
    plan = _parallel_plan(ops, flags, executor, draw_skipped_tail, last_draw, workers)
    if plan is not None:
        base = torch.get_rng_state()
        if not _run_plan(plan, ops, executor):
            torch.set_rng_state(base)  # a truncated normal took a second round: eager's order, serially
            plan = None
    skipped = _SkippedDraws()
    for k, op in enumerate(ops):
        if plan is not None and k in plan.done:
            pass  # generated above, on the threads
        elif flags[k]:
            if op.random:
                skipped.settle()
            executor.run(op)
        elif op.random and (draw_skipped_tail or k < last_draw) and plan is None:
            words = executor.global_draws(op)
            if words is None:
                skipped.settle()
                executor.advance(op)
            else:
                skipped.add(words)
        finish(k)
    skipped.settle()
    recording.done.update(indices)
    if indices:  # (a later materialize of a replayed block moves nothing)
        recording.rng_after = torch.get_rng_state()
    executor.drop_spares()


@dataclass
class _Fill:
    """A live op that fills a float32 storage with a known count of the stream's numbers.

    ``func`` (``normal_`` or ``uniform_``) with ``args``/``kwargs`` reproduces it on any
    piece; ``bounds`` marks a truncated normal, speculated to take one round of ``normal_``.
    """

    func: torch._ops.OpOverload
    target: Ref
    args: tuple
    kwargs: dict
    words: int
    bounds: tuple[float, float] | None = None


@dataclass
class _Piece:
    """Elements ``[start, stop)`` of fill ``k``, whose first number is output ``offset`` of its stage."""

    k: int
    start: int
    stop: int
    offset: int


@dataclass
class _Stage:
    """Fills split over threads, then one op drawing an unknown count, in eager's order.

    ``words`` counts the outputs the stage takes (fills and dead ops' draws); ``barrier``
    (if any) then draws from the global generator itself: ``executor.run`` if live, else
    ``executor.advance``.
    """

    shares: list[list[_Piece]]
    words: int
    barrier: int | None = None
    live_barrier: bool = False


@dataclass
class _Plan:
    stages: list[_Stage]
    fills: dict[int, _Fill]
    done: set[int]  # live ops the plan runs: the fills and the live barriers


def _parallel_plan(
    ops: Sequence[Op], flags: list[bool], executor: Executor, draw_skipped_tail: bool, last_draw: int, workers: int
) -> _Plan | None:
    """Split the live random fills over ``workers`` threads, or None where order must be kept.

    Eager draws every random op's numbers from one mt19937 stream, in order; a fill
    (``normal_``/``uniform_``/``randn``/``rand``/``trunc_normal_`` of contiguous float32 on
    the CPU) takes a known count of outputs, so each op starts at a known offset, and a
    thread can enter the stream there by jumping (``mt19937.advance``) and run torch's own
    kernel on its piece. An op drawing an unknown count ends a stage: it runs after the
    stage's fills, on the global generator, and the next stage starts where it left it.
    Each random op must be the first live op on its storages (nothing to order against
    on the threads), and an op ending a stage must read nothing but what it writes and draw
    from the global generator (a fallback to the serial replay resets only that one), else
    the replay stays serial.
    """
    if workers < 2 or not mt19937.available():
        return None
    stages: list[_Stage] = []
    fills: dict[int, _Fill] = {}
    done: set[int] = set()
    stage: list[tuple[int, int]] = []  # (k, offset in the stage) of the current stage's fills
    offset, touched = 0, set[int]()
    for k, op in enumerate(ops):
        live = flags[k]
        if live and not op.random:
            touched |= op.reads | op.writes
            continue
        if not op.random or not (live or draw_skipped_tail or k < last_draw):
            continue
        if live and (op.reads | op.writes) & touched:
            return None
        if live:
            fill = _fill(op, executor)
            words = None if fill is None else fill.words
        else:
            fill, words = None, executor.global_draws(op)
        if words is None:  # an unknown count: ends the stage, in eager's place
            if not op.reads <= op.writes or any(isinstance(x, torch.Generator) for x in op.flat):
                return None  # it reads values made by ops that run later, or draws from its own generator
            stages.append(_Stage(_shares(stage, fills, workers), offset, k, live))
            if live:
                done.add(k)
                touched |= op.reads | op.writes
            stage, offset = [], 0
            continue
        if fill is not None:
            fills[k] = fill
            stage.append((k, offset))
            touched |= op.writes
        offset += words
    stages.append(_Stage(_shares(stage, fills, workers), offset))
    if sum(fill.words for fill in fills.values()) < workers * _CHUNK:
        return None
    return _Plan(stages, fills, done | set(fills))


def _fill(op: Op, executor: Executor) -> _Fill | None:
    """``op`` as a fill the threads can split, or None."""
    chunk = chunkable(op)
    if chunk is None:
        return truncated_normal(op)
    func, target = chunk
    words = executor.global_draws(op)
    if words is None or target.dtype != torch.float32 or not is_contiguous_ref(target):
        return None
    return _Fill(func, target, *executor._scratch_args(op), words)


def truncated_normal(op: Op) -> _Fill | None:
    """A recorded ``nn.init.trunc_normal_`` as the one round of ``normal_`` it almost always is.

    torch redraws the whole tensor while any value falls outside ``[a, b]`` (for bounds
    holding over 0.3 of the mass); with ``std=0.02`` and bounds at +-2 that is never. Where
    the odds of a second round are under 1e-3, the plan speculates on one round and checks
    it afterwards (see :func:`_run_plan`); elsewhere the call ends a stage.
    """
    if op.func is not TRUNC_NORMAL or not _one_round_is_normal():
        return None
    args, kwargs = unflatten(op.flat, op.spec)
    bound = inspect.signature(TRUNC_NORMAL).bind(*args, **kwargs)
    bound.apply_defaults()
    target, mean, std, a, b = (bound.arguments[name] for name in ("tensor", "mean", "std", "a", "b"))
    if (
        bound.arguments["generator"] is not None
        or target.dtype != torch.float32
        or target.numel < 16
        or not is_contiguous_ref(target)
        or std <= 0
    ):
        return None
    mass = _normal_mass(mean, std, a, b)
    if mass <= 0.3 or (1.0 - mass) * target.numel > 1e-3:  # another sampler, or a second round likely
        return None
    lo, hi = (torch.tensor(x, dtype=torch.float32).item() for x in (a, b))  # as torch compares
    return _Fill(
        aten.normal_.default, target, (mean, std), {}, numbers_drawn(aten.normal_.default, target.numel), (lo, hi)
    )


def _normal_mass(mean: float, std: float, a: float, b: float) -> float:
    cdf = lambda x: (1.0 + math.erf((x - mean) / std / math.sqrt(2.0))) / 2.0
    return cdf(b) - cdf(a)


@functools.cache
def _one_round_is_normal() -> bool:
    """Whether this torch's trunc_normal_ is one ``normal_`` when nothing is out of bounds
    (checked once, on private generators): if that ever changes, it replays serially."""
    generators = [torch.Generator().manual_seed(20240229) for _ in range(2)]
    truncated = TRUNC_NORMAL(torch.empty(1000), std=0.02, generator=generators[0])
    normal = torch.empty(1000).normal_(0.0, 0.02, generator=generators[1])
    return torch.equal(truncated, normal) and torch.equal(generators[0].get_state(), generators[1].get_state())


def _shares(stage: list[tuple[int, int]], fills: dict[int, _Fill], workers: int) -> list[list[_Piece]]:
    """Split a stage's fills over the threads by their numbers (one share if that is all
    it is worth); pieces of ``normal_`` split at multiples of 16, and the piece holding a
    ragged end keeps at least 16 elements."""
    total = sum(fills[k].words for k, _ in stage)
    workers = workers if total >= workers * _CHUNK else 1
    shares: list[list[_Piece]] = [[] for _ in range(workers)]
    done = 0  # outputs assigned so far
    for k, start in stage:
        numel, normal = fills[k].target.numel, fills[k].func is aten.normal_.default
        cut = 0
        while cut < numel:
            share = min(done * workers // max(total, 1), workers - 1)
            room = (share + 1) * total // workers - done  # outputs left in this thread's share
            stop = numel if share == workers - 1 else min(numel, cut + max(room, 1))
            if normal and stop < numel:  # cut is a multiple of 16 here
                stop = max(cut + 16, stop // 16 * 16)
                if numel - stop < 16:
                    stop = numel
            shares[share].append(_Piece(k, cut, stop, start + cut))
            done += stop - cut
            cut = stop
    return [share for share in shares if share]


def _run_plan(plan: _Plan, ops: Sequence[Op], executor: Executor) -> bool:
    """Run the stages; leave the global generator where eager leaves it. False when a
    truncated normal needed a second round: then nothing is final and the caller replays
    serially from the generator state it started with."""
    for fill in plan.fills.values():
        executor.base(fill.target.sid)  # allocated here, so no two threads race to
    with ThreadPoolExecutor(max_workers=max(len(stage.shares) for stage in plan.stages)) as pool:
        for stage in plan.stages:
            start, position = torch.get_rng_state(), 0
            if stage.shares:
                run = functools.partial(_run_share, start=start, fills=plan.fills, executor=executor)
                ends = list(pool.map(run, stage.shares))
                state, position = ends[-1]
                torch.set_rng_state(state)
            skip_outputs(torch.default_generator, stage.words - position)  # dead ops' draws after the last fill
            if stage.barrier is not None:
                barrier = ops[stage.barrier]
                executor.run(barrier) if stage.live_barrier else executor.advance(barrier)
    return all(_within(fill, executor) for fill in plan.fills.values() if fill.bounds is not None)


def _run_share(
    pieces: list[_Piece], start: torch.Tensor, fills: dict[int, _Fill], executor: Executor
) -> tuple[torch.Tensor, int]:
    """One thread's pieces, from generator state ``start``; its final state and position."""
    generator = torch.Generator()
    generator.set_state(start)
    at = 0
    with torch.no_grad():  # grad mode is per thread
        for piece in pieces:
            skip_outputs(generator, piece.offset - at)  # to this thread's start, or over dead ops' numbers
            fill = fills[piece.k]
            view = executor.view(fill.target).view(-1)[piece.start : piece.stop]
            fill.func(view, *fill.args, **{**fill.kwargs, "generator": generator})
            at = piece.offset + (piece.stop - piece.start)
            if piece.stop == fill.target.numel and fill.words > fill.target.numel:
                at += fill.words - fill.target.numel  # normal_'s ragged end drew 16 more
    return generator.get_state(), at


def _within(fill: _Fill, executor: Executor) -> bool:
    assert fill.bounds is not None  # called for truncated normals only
    lo, hi = fill.bounds
    values = executor.view(fill.target)
    return not bool(((values < lo) | (values > hi)).any())


class _SkippedDraws:
    """Outputs of the CPU generator that dead ops would have taken, owed until needed.

    Few are simply drawn; many are jumped over (see :func:`skip_outputs` for where the line lies).
    """

    def __init__(self) -> None:
        self.owed = 0

    def add(self, words: int) -> None:
        self.owed += words

    def settle(self) -> None:
        skip_outputs(torch.default_generator, self.owed)
        self.owed = 0


def skip_outputs(generator: torch.Generator, outputs: int, jump_from: int = _JUMP_FROM) -> None:
    """Advance a CPU generator by ``outputs`` 32-bit outputs: few are drawn, ``jump_from`` or more jumped over."""
    if not outputs:
        return
    jump = outputs >= jump_from or (
        outputs >= _JUMP_KNOWN_FROM and mt19937.worth_jumping(generator.get_state(), outputs)
    )
    if jump and mt19937.available():  # available() finds phi (once): only asked when a jump is due
        generator.set_state(mt19937.advance(generator.get_state(), outputs))
        return
    # int64 random_() takes two outputs per element (one random64) at under half the cost
    # per output of a float32 uniform_, which takes one.
    pairs, ones = divmod(outputs, 2) if _pairs_drawn_by_int64() else (0, outputs)
    scratch = torch.empty(min(pairs, _CHUNK), dtype=torch.int64)
    for begin in range(0, pairs, _CHUNK):
        scratch[: min(_CHUNK, pairs - begin)].random_(generator=generator)
    singles = torch.empty(min(ones, _CHUNK), dtype=torch.float32)
    for begin in range(0, ones, _CHUNK):
        singles[: min(_CHUNK, ones - begin)].uniform_(generator=generator)


@functools.cache
def _pairs_drawn_by_int64() -> bool:
    """Whether int64 random_() takes exactly two outputs per element on this torch build, for
    a short tensor and a scratch chunk's worth (checked once, on private generators); else
    skips draw one float32 at a time."""
    for size in (5, _CHUNK + 3):
        pairs, singles = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
        torch.empty(size, dtype=torch.int64).random_(generator=pairs)
        torch.empty(2 * size).uniform_(generator=singles)
        if not torch.equal(pairs.get_state(), singles.get_state()):
            return False
    return True
