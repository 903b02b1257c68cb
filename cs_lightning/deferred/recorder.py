"""Record a model's construction as a dispatch-level op log, allocating nothing.

While :func:`recording` is active, every new tensor is a :class:`DeferredTensor`: a
wrapper that reports the device it was asked for (so libraries that skip their init on
``device.type == "meta"`` still run it) and keeps its shape, strides and dtype in a meta
tensor. Every aten op that creates or writes a tracked storage is appended to the
recording's log, in order, so that replaying the log later redraws the same random numbers
in the same order as eager construction did.

Identity is tracked per storage, not per tensor object: views alias one storage, and an
op writing through a view writes that storage. Meta storages of everything recorded are
kept alive for the whole recording, because freed storage addresses are reused.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from cs_lightning.deferred.arguments import Structure, flatten, unflatten
from cs_lightning.deferred.oplog import Const, Op, Recording, Ref, Storage
from cs_lightning.deferred.replay import (
    Executor,
    chunkable,
    live_ops,
    replay_exact,
    skip_outputs,
    truncated_normal,
)
from cs_lightning.errors import DeferredInitError, DeferredInitUsageError, DeferredInitWarning
from cs_lightning.user_code import is_own_file, is_user_file

aten = torch.ops.aten
T = TypeVar("T")

# Ops that write every element of their first argument without reading it.
_OVERWRITING = {
    aten.normal_,
    aten.uniform_,
    aten.fill_,
    aten.zero_,
    aten.copy_,
    aten.random_,
    aten.bernoulli_,
    aten.exponential_,
    aten.geometric_,
    aten.log_normal_,
    aten.cauchy_,
}
# In-place fills of every element: recording skips their meta kernels (slow Python references,
# and those of geometric_, log_normal_ and cauchy_ refuse a generator=), as no metadata changes.
_FILLS = {
    aten.normal_.default,
    aten.uniform_.default,
    aten.random_.default,
    aten.exponential_.default,
    aten.geometric_.default,
    aten.log_normal_.default,
    aten.cauchy_.default,
    aten.fill_.Scalar,
    aten.zero_.default,
}
# Factories whose result holds whatever memory happened to contain.
_UNINITIALIZED = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided}
_LIFT = {aten.lift_fresh.default, aten.lift_fresh_copy.default}
# Non-tensor results that depend on metadata only (`t.data = ...` asks the first one).
_METADATA_QUERIES = {aten._has_compatible_shallow_copy_type.default, aten.is_same_size.default}
# Constants up to this size are copied when recorded, larger ones are referenced.
_CONST_COPY_BYTES = 1 << 20


class _StandInAddresses:
    """Distinct, non-overlapping stand-in addresses for recorded storages (see
    ``DeferredTensor.data_ptr``), never reused in the process; from 16 TiB up, below where x86-64
    Linux puts a process's heap and mappings."""

    def __init__(self) -> None:
        self._next = 1 << 44
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> int:
        with self._lock:
            address = self._next
            self._next += (nbytes // 4096 + 2) * 4096  # a page apart
            return address


_ADDRESSES = _StandInAddresses()


class DeferredTensor(torch.Tensor):
    """A tensor recorded by :func:`recording`: real device and metadata, no data."""

    # torch's own recipe for wrapper subclasses; its stub types the slot as a plain 4-argument function
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]
    _cs_recording: Recorder

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device) -> DeferredTensor:
        return torch.Tensor._make_wrapper_subclass(
            cls,
            meta.size(),
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            device=device,
            layout=meta.layout,
            requires_grad=False,
        )

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: torch._ops.OpOverload, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        # Reached only outside a recording: views and value reads still work.
        recorder = next(x._cs_recording for x in flatten((args, kwargs))[0] if isinstance(x, DeferredTensor))
        return recorder.dispatch(func, args, kwargs or {})

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        kind = "Parameter" if getattr(self, "_is_param", False) else "Tensor"
        return f"Deferred{kind}(size={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"

    def __format__(self, format_spec: str) -> str:
        """As torch formats a tensor: a one-element tensor as its number (``f"{w.norm():.3f}"``), any
        other as its repr, and only with no format spec."""
        if self.dim() == 0:
            return format(self.item(), format_spec)
        return object.__format__(self, format_spec)

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        if id(self) in memo:
            return memo[id(self)]
        copy = self.detach().clone().requires_grad_(self.requires_grad)
        if getattr(self, "_is_param", False):
            copy._is_param = True
        memo[id(self)] = copy
        return copy

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise DeferredInitError(self._cs_recording.not_materialized("saving or pickling"))

    def tolist(self) -> Any:
        return self._cs_recording.concrete(self, "tolist()").tolist()

    def numpy(self, *, force: bool = False) -> Any:
        value, own = self._cs_recording.read(self, "numpy()", writable=True)
        return _writable_if(own, value.numpy(force=force))

    def __array__(self, dtype: Any = None) -> Any:
        value, own = self._cs_recording.read(self, "numpy.asarray()", writable=True)
        return _writable_if(own, value.__array__(dtype))

    def data_ptr(self) -> int:
        """A stand-in address, the same for tensors viewing the same memory (offset included) and
        distinct otherwise, so identity checks (``a.data_ptr() == b.data_ptr()`` for tying) answer
        as in eager; nothing lives there."""
        return self._cs_recording.stand_in_address(self)

    def untyped_storage(self) -> torch.UntypedStorage:
        """torch's storage object, whose ``data_ptr()`` says which tensor has no memory yet, and why."""
        storage = super().untyped_storage()
        if storage._cdata not in self._cs_recording._metas:  # real memory (set by `.data = tensor`): its own
            return storage
        if type(storage) is not _DeferredStorage:  # torch keeps one Python object per storage: set once
            storage.__class__ = _DeferredStorage
            # what the tensor is, not the tensor: a view asked for its storage is often gone when it is read (and
            # a reference to the tensor from its storage would keep both alive)
            storage._cs_about = f"{self!r}, recorded at {self._cs_recording.site}"  # type: ignore[attr-defined]
        return storage


class _DeferredStorage(torch.UntypedStorage):
    """The storage of a deferred tensor: sizes and no memory."""

    _cs_about: str

    def data_ptr(self) -> int:
        raise DeferredInitError(
            f"untyped_storage().data_ptr() of {self._cs_about}, at {user_site()}: a deferred tensor has no memory, "
            "so no data pointer, until it is materialized. Call cs_lightning.deferred.materialize(module) on "
            "the module holding it first (a Lightning strategy='csx' run does as fit starts); to tell whether two "
            "deferred tensors share memory (tied weights), compare their tensor.data_ptr(), stand-in addresses."
        )


def _writable_if(own: bool, array: Any) -> Any:
    """An array of a recorded tensor's value: read-only when it holds a copy (read after the recording
    block), where a write would be lost (numpy refuses it at the user's line instead)."""
    if not own:
        array.flags.writeable = False
    return array


@functools.cache
def _returns_tensor(func: torch._ops.OpOverload) -> bool:
    return any("Tensor" in str(r.type) for r in func._schema.returns)


@functools.cache
def _mutable_args(func: torch._ops.OpOverload) -> tuple[tuple[int, str, bool], ...]:
    """(position, name, keyword-only) of the arguments the schema marks as written."""
    return tuple(
        (i, a.name, a.kwarg_only)
        for i, a in enumerate(func._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )


def _written_args(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[Any]:
    """The tensors an op writes in place, read from its schema's alias annotations."""
    written: list[Any] = []
    for i, name, kwarg_only in _mutable_args(func):
        value = args[i] if i < len(args) and not kwarg_only else kwargs.get(name)
        written.extend(value if isinstance(value, (list, tuple)) else [value])
    return [w for w in written if isinstance(w, torch.Tensor)]


def _check_fill_arguments(func: torch._ops.OpOverload, flat: list, spec: Structure) -> None:
    """Raise now, at the constructor's line, what eager raises for a fill's arguments (``normal_``
    with ``std < 0``), rather than at materialize: the same fill of an empty tensor checks them
    and draws nothing."""
    empty = torch.empty(0, dtype=flat[0].dtype, device=flat[0].device)
    args, kwargs = unflatten([empty, *flat[1:]], spec)
    func(*args, **kwargs)


def _covers_storage(meta: torch.Tensor) -> bool:
    """Whether writing every element of ``meta`` writes every byte of its storage."""
    expected = 1  # dense: the strides, sorted, are the running products of the sizes
    for stride, size in sorted((st, sz) for sz, st in zip(meta.size(), meta.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return meta.storage_offset() == 0 and meta.numel() * meta.element_size() == meta.untyped_storage().nbytes()


def _mixes_recordings(func: Any) -> str:
    return (
        f"{func} mixes deferred tensors of two recordings, in {constructor_site()}; materialize the module "
        "recorded first (cs_lightning.deferred.materialize(module)), or build both in one recording: in "
        "Lightning, both in configure_model or both under one trainer.init_module()."
    )


def constructor_site() -> str:
    """Where in the user's constructors we are: ``A.__init__ > B.__init__ (file:line)``.

    Lightning's ``configure_model`` counts as a constructor: it runs under recording too. The
    line is the user's own (see :func:`user_site`), not that of a library they called.
    """
    chain: list[str] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        name = frame.f_code.co_name
        if name in ("__init__", "configure_model") and isinstance(owner, torch.nn.Module):
            chain.append(f"{type(owner).__qualname__}.{name}")
        frame = frame.f_back
    path = " > ".join(reversed(chain)) or "<no module constructor>"
    return f"{path} ({user_site()})"


def _user_frame() -> tuple[FrameType, int] | None:
    """The innermost frame of the user's own code, and how many frames out from the caller's
    caller it is; failing that (all of the user's code is installed as a package), the
    innermost frame outside torch, cs_lightning and the standard library."""
    fallback = None
    frame: FrameType | None = sys._getframe(2)
    depth = 1
    while frame is not None:
        file = frame.f_code.co_filename
        if is_own_file(file):
            return frame, depth
        if fallback is None and is_user_file(file):
            fallback = frame, depth
        frame, depth = frame.f_back, depth + 1
    return fallback


def user_site() -> str:
    """``file:line`` of the user's line that led here (see :func:`_user_frame`)."""
    found = _user_frame()
    return "unknown location" if found is None else f"{found[0].f_code.co_filename}:{found[0].f_lineno}"


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by the caller point at the user's line."""
    found = _user_frame()
    return 1 if found is None else found[1]


class Recorder(Recording):
    """The :class:`Recording` of one :func:`recording` block while it is made: the dispatch target
    that appends each op to its own log (and still takes in-place init after the block)."""

    def __init__(self) -> None:
        super().__init__()
        self.active = True  # False once its block has exited (in-place init is still recorded)
        self._last_write: dict[int, int] = {}  # storage -> index of the last op writing it
        self._concrete: dict[int, tuple[int, torch.Tensor]] = {}  # values read by constructors, cached
        self._addresses: dict[int, int] = {}  # storage -> its stand-in address
        self.site = user_site()

    def _wrap(self, meta: torch.Tensor, device: torch.device) -> DeferredTensor:
        fake = DeferredTensor(meta, device)
        fake._cs_recording = self
        self._metas[torch.Tensor.untyped_storage(fake)._cdata] = meta  # see Recording.meta
        self.alive.add(fake)
        return fake

    def _new_storage(self, meta: torch.Tensor, device: torch.device) -> int:
        sid = len(self.storages)
        self._sids[meta.untyped_storage()._cdata] = sid
        self.storages[sid] = Storage(sid, meta.untyped_storage().nbytes(), meta.dtype, device, meta)
        self._addresses[sid] = _ADDRESSES.take(self.storages[sid].nbytes)
        return sid

    def not_materialized(self, what: Any) -> str:
        """Why ``what`` (an op, a read, pickling) on one of this recording's tensors is refused."""
        at = f"at {user_site()}"
        if self.active:  # pickling, while the constructor runs
            return (
                f"{what} on a deferred tensor {at}, while it is recorded: its values do not exist yet. "
                "Call cs_lightning.deferred.materialize(module) on the module holding it first."
            )
        if not self.materialized:
            return (
                f"{what} on a deferred tensor {at}, outside recording(): the module holding it is "
                "not materialized yet. Call cs_lightning.deferred.materialize(module) first "
                "(with state_dict=... to load a checkpoint into it)."
            )
        return (
            f"{what} on a deferred tensor {at}, recorded at {self.site} and not materialized. If the module "
            "holding it was materialized (fit does it), the tensor is held where materialize does not look "
            "(a tuple, a nested container, a closure): register it as a buffer (register_buffer(name, tensor, "
            "persistent=False)) or keep it as a plain attribute or in a list or dict attribute; otherwise "
            "call cs_lightning.deferred.materialize(module) first."
        )

    def stand_in_address(self, fake: DeferredTensor) -> int:
        ref = self.ref(fake)
        return self._addresses[ref.sid] + ref.offset * ref.dtype.itemsize

    # -- dispatch ------------------------------------------------------------------
    def dispatch(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
        flat, spec = flatten((args, kwargs))
        fakes = [i for i, x in enumerate(flat) if isinstance(x, DeferredTensor)]
        reals = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor) and not isinstance(x, DeferredTensor)]
        is_random = torch.Tag.nondeterministic_seeded in func.tags
        if any(flat[i]._cs_recording is not self for i in fakes):
            raise DeferredInitError(_mixes_recordings(func))
        if func in _LIFT:
            return self._record_constant(flat[0])
        if not fakes and reals:
            if not is_random:
                return func(*args, **kwargs)  # values made outside: eager, as eager
            if _written_args(func, args, kwargs):
                raise DeferredInitError(
                    f"{func} draws random numbers into a tensor created outside the "
                    f"recording, in {constructor_site()}; the draw would happen out of "
                    "order. Create that tensor inside the constructor (a lazy module such as "
                    "nn.LazyLinear makes its weights outside it, in its first forward: give the "
                    "input size instead, as in nn.Linear(in_features, out_features))."
                )
        if func in _METADATA_QUERIES:
            margs, mkwargs = unflatten([self.meta(x) if i in fakes else x for i, x in enumerate(flat)], spec)
            return func(*margs, **mkwargs)
        if not _returns_tensor(func) and not _written_args(func, args, kwargs):
            return self._concrete_call(func, flat, spec, fakes)  # .item(), bool(), ...
        return self._record(func, flat, spec, fakes, reals, is_random)

    def _record(
        self,
        func: torch._ops.OpOverload,
        flat: list,
        spec: Structure,
        fakes: list[int],
        reals: list[int],
        is_random: bool,
    ) -> Any:
        metas = list(flat)
        for i in fakes:
            metas[i] = self.meta(flat[i])
        for i in reals:
            metas[i] = torch.empty_strided(flat[i].size(), flat[i].stride(), dtype=flat[i].dtype, device="meta")
        margs, mkwargs = unflatten(metas, spec)
        device = self._result_device(flat, mkwargs)
        if "device" in mkwargs:
            mkwargs["device"] = torch.device("meta")
        fill = func in _FILLS and fakes == [0] and not reals
        if fill:
            _check_fill_arguments(func, flat, spec)
        try:
            mout = metas[0] if fill else func(*margs, **mkwargs)
        except NotImplementedError as err:  # no meta kernel (data-dependent shape)
            return self._run_for_real(func, flat, spec, fakes, margs, mkwargs, is_random, err)
        written = _written_args(func, margs, mkwargs)
        if not self.active and not self._is_view(mout):
            # After the block, in-place init (model.apply(init_fn)) is still recorded;
            # anything that makes a new tensor (a forward pass) needs real weights.
            raise DeferredInitError(self.not_materialized(func))
        by_meta = {id(m): i for i, m in enumerate(metas) if isinstance(m, torch.Tensor)}
        if any(id(w) in by_meta and by_meta[id(w)] in reals for w in written):
            raise DeferredInitError(
                f"{func} writes a recorded value into a tensor created outside the "
                f"recording, in {constructor_site()}; create that tensor inside it."
            )
        out_flat, out_spec = flatten(mout)
        if not fakes and not reals and all(isinstance(m, torch.Tensor) and m.numel() == 0 for m in out_flat):
            # Nothing to allocate or draw: real, so that UninitializedParameter and other
            # placeholders built on torch.empty(0) keep working.
            args, kwargs = unflatten(flat, spec)
            return func(*args, **kwargs)
        result, creates = [], []
        for j, m in enumerate(out_flat):
            if not isinstance(m, torch.Tensor):
                result.append(m)
            elif id(m) in by_meta:  # in place: hand back the caller's object
                result.append(self._same_object(flat[by_meta[id(m)]], m))
            elif m.untyped_storage()._cdata in self._sids:  # a view of a tracked storage
                result.append(self._wrap(m, device))
            else:
                self._new_storage(m, device)
                fake = self._wrap(m, device)
                creates.append((j, self.ref(fake)))
                result.append(fake)
        if written or creates:
            self._log(func, flat, spec, fakes, reals, metas, written, creates, mout, device, is_random)
        return unflatten(result, out_spec)

    def _run_for_real(
        self,
        func: torch._ops.OpOverload,
        flat: list,
        spec: Structure,
        fakes: list[int],
        margs: tuple,
        mkwargs: dict,
        is_random: bool,
        err: NotImplementedError,
    ) -> Any:
        """An op without a meta kernel: compute it on real values; results enter as values."""
        if not self.active:
            raise DeferredInitError(self.not_materialized(func)) from err
        if _written_args(func, margs, mkwargs):
            raise DeferredInitError(
                f"{func} has no meta kernel and writes in place, so it cannot be recorded; "
                f"in {constructor_site()}. Build this module eagerly. ({err})"
            ) from err
        if is_random:  # its draws must come after everything recorded so far
            self.flush(
                f"{func} draws random numbers and has no meta kernel",
                "It cannot be recorded, and eager drew its numbers after everything recorded so far",
                "To keep the whole model deferred, make this draw outside the constructor.",
            )
        out = self._concrete_call(func, flat, spec, fakes)
        flat_out, out_spec = flatten(out)
        return unflatten([self._record_constant(t) if isinstance(t, torch.Tensor) else t for t in flat_out], out_spec)

    def _is_view(self, mout: Any) -> bool:
        outs = [m for m in flatten(mout)[0] if isinstance(m, torch.Tensor)]
        return all(m.untyped_storage()._cdata in self._sids for m in outs)

    def _same_object(self, original: DeferredTensor, meta: torch.Tensor) -> DeferredTensor:
        # In-place metadata ops (t_, unsqueeze_) changed the meta: give the caller's
        # object the new shape the way `t.data = ...` does, keeping its identity.
        if (
            original.size() != meta.size()
            or original.stride() != meta.stride()
            or original.storage_offset() != meta.storage_offset()
        ):
            original.data = self._wrap(meta, original.device)
        return original

    @staticmethod
    def _result_device(flat: list, mkwargs: dict) -> torch.device:
        if mkwargs.get("device") is not None:
            return torch.device(mkwargs["device"])
        tensors = [x for x in flat if isinstance(x, torch.Tensor)]
        return tensors[0].device if tensors else torch.device("cpu")

    def _log(
        self,
        func: torch._ops.OpOverload,
        flat: list,
        spec: Structure,
        fakes: list[int],
        reals: list[int],
        metas: list,
        written: list[Any],
        creates: list[tuple[int, Ref]],
        mout: Any,
        device: torch.device,
        is_random: bool,
    ) -> None:
        sid_of = {i: self._sids[metas[i].untyped_storage()._cdata] for i in fakes}
        written_ids = {id(w) for w in written}
        writes = {sid_of[i] for i in fakes if id(metas[i]) in written_ids}
        overwrites = {ref.sid for _, ref in creates}
        # a storage passed more often than written is read too (copy_(w, w), add(w, 1, out=w), w[:] = w)
        passed = Counter(sid_of.values())
        written_sids = Counter(self._sids.get(w.untyped_storage()._cdata) for w in written)
        for i in fakes:
            if (
                id(metas[i]) in written_ids
                and _covers_storage(metas[i])
                and ((i == 0 and func.overloadpacket in _OVERWRITING) or "out" in func._overloadname)
                and passed[sid_of[i]] <= written_sids[sid_of[i]]
            ):
                overwrites.add(sid_of[i])
        # An overwritten argument's old values are not read; every other input is.
        reads = {sid_of[i] for i in fakes if id(metas[i]) not in written_ids or sid_of[i] not in overwrites}
        logged = list(flat)
        for i in fakes:
            logged[i] = self.ref(flat[i])
        for i in reals:
            value = flat[i]
            if value.numel() * value.element_size() <= _CONST_COPY_BYTES:
                value = value.detach().clone()
            logged[i] = Const(value, value._version)
        if not fakes and not reals:  # a factory: pin what defaults it resolved
            logged, spec = self._pin_factory_defaults(func, logged, spec, mout, device)
        index = self._append(
            Op(
                func,
                logged,
                spec,
                frozenset(reads),
                frozenset(writes | overwrites),
                frozenset(overwrites),
                tuple(creates),
                is_random,
            )
        )
        for sid in writes | overwrites:
            self._last_write[sid] = index
            self.uninitialized.discard(sid)
        if func.overloadpacket in _UNINITIALIZED:
            self.uninitialized.update(ref.sid for _, ref in creates)
        if is_random and self.replay_from is not None:
            self._drawn_after_jump(index)

    def _append(self, op: Op) -> int:
        """Log ``op``, and return its index. A generator of the caller's own it draws from is logged as a copy
        at its present state, which replay draws from: the op gets eager's numbers whatever the caller does
        with the generator afterwards (draw from it, seed it again, rewind it)."""
        self.ops.append(op)
        for i, x in enumerate(op.flat):
            if isinstance(x, torch.Generator) and x is not torch.default_generator:
                copy = torch.Generator(device=x.device)
                copy.set_state(x.get_state())
                op.flat[i] = copy
                self._move_past(x, copy, op)
                break  # (an op takes one generator)
        return len(self.ops) - 1

    def _move_past(self, generator: torch.Generator, copy: torch.Generator, op: Op) -> None:
        """Move a generator of the caller's own past the numbers ``op`` draws from it (``copy`` holds the state
        they start from), as eager does: its next draw, ``get_state()``, seed or rewind meets eager's state.
        Jumped over where the count is known; else drawn once more, into a throwaway tensor, or, when the count
        may depend on other recorded tensors' values, by running everything recorded so far."""
        with recording_paused():
            words = Executor(self.storages, None).draws(op) if generator.device.type == "cpu" else None
            if words is not None:
                skip_outputs(generator, words)
                return
            if op.reads <= op.writes:  # it reads nothing but the tensor it fills
                probe = torch.Generator(device=copy.device)
                probe.set_state(copy.get_state())
                Executor(self.storages, None).run(op, probe)
                generator.set_state(probe.get_state())
                return
            self.flush(
                f"{op.func} draws from a generator of the constructor's own and reads other recorded tensors",
                "How many numbers it draws may depend on their values, which eager had",
                "To keep the whole model deferred, draw from the global generator there.",
            )
            generator.set_state(copy.get_state())  # the flush drew from the copy

    @staticmethod
    def _pin_factory_defaults(
        func: torch._ops.OpOverload, logged: list, spec: Structure, mout: Any, device: torch.device
    ) -> tuple[list, Structure]:
        # dtype=None means "the default dtype when it runs"; Lightning changes that
        # default inside init_module(), so record the one in force now.
        args, kwargs = unflatten(logged, spec)
        names = {a.name for a in func._schema.arguments}
        if "dtype" in names and kwargs.get("dtype") is None and isinstance(mout, torch.Tensor):
            kwargs["dtype"] = mout.dtype
        if "device" in names and kwargs.get("device") is None:
            kwargs["device"] = device
        return flatten((args, kwargs))

    def _record_constant(self, value: torch.Tensor) -> DeferredTensor:
        """``torch.tensor(...)`` inside the recording: a tracked storage holding a value."""
        flat, spec = flatten(((value,), {}))
        return self._record(aten.clone.default, flat, spec, [], [0], False)

    # -- reading values --------------------------------------------------------------
    def _concrete_call(self, func: torch._ops.OpOverload, flat: list, spec: Structure, fakes: list[int]) -> Any:
        values = list(flat)
        for i in fakes:
            values[i] = self.concrete(flat[i], func)
        args, kwargs = unflatten(values, spec)
        return func(*args, **kwargs)

    def concrete(self, fake: DeferredTensor, what: Any) -> torch.Tensor:
        """The value a recorded tensor holds now, as eager construction would have it (see :meth:`read`)."""
        return self.read(fake, what)[0]

    def read(self, fake: DeferredTensor, what: Any, writable: bool = False) -> tuple[torch.Tensor, bool]:
        """The value a recorded tensor holds now, as eager construction would have it, and whether it is
        the tensor's own memory (a write to it lands in the weight) rather than a copy.

        Without randomness in its history it is computed aside, on the CPU, and nothing
        else changes: a copy. With randomness, the draws must happen now and in eager's order:
        everything recorded so far is run for real (see :meth:`flush`), and the value is its own
        memory; so it is too for a ``writable`` read (a NumPy array, which may be written through)
        in the recording block. After the block a read of random history is refused (``what`` names
        it), as any other use of an unmaterialized weight is.
        """
        ref = self.ref(fake)
        pending = [self.ops[k] for k in self.pending()]
        live = [op for op, flag in zip(pending, live_ops(pending, {ref.sid})) if flag]
        with recording_paused():
            random = any(op.random for op in live)
            if random or (writable and self.active):
                if not self.active:
                    raise DeferredInitError(self.not_materialized(what))
                if random:
                    self.flush(
                        "a constructor reads the value of a randomly initialized tensor "
                        "(.item(), .tolist(), bool(...), a data-dependent loop)"
                    )
                else:
                    self.flush(
                        f"a constructor takes a NumPy array of a tensor's memory ({what})",
                        "A write through it must land in the tensor",
                        "To keep the whole model deferred, fill the tensor with torch ops (torch.sin of a "
                        "torch.arange) instead.",
                    )
                assert self.executor is not None  # flush() replayed into it
                return self.executor.view(ref), True
            cached = self._concrete.get(ref.sid)
            if cached is None or cached[0] <= self._last_write.get(ref.sid, -1):
                aside = Executor(self.storages, torch.device("cpu"))
                touched = {ref.sid}.union(*(op.reads | op.writes for op in live))
                done = self.executor.bases if self.executor is not None else {}
                aside.bases = {sid: done[sid].clone() for sid in touched & done.keys()}
                for op in live:
                    aside.run(op)
                cached = (len(self.ops), aside.base(ref.sid))
                self._concrete[ref.sid] = cached
            return cached[1].as_strided(ref.size, ref.stride, ref.offset), False

    def flush(
        self,
        reason: str,
        why: str = "Eager construction would branch on random numbers here",
        fix: str = "Move the read out of the constructor to keep the whole model deferred.",
    ) -> None:
        """Run every pending op for real, now, on the global generator, in order.

        This is eager construction, delayed: the values and the RNG stream are exactly
        eager's, but the memory of everything recorded so far is allocated now.
        """
        warnings.warn(
            f"{reason} in {constructor_site()}. {why}, so everything recorded so far was run "
            f"eagerly (its memory is allocated now); weights stay exactly eager's. {fix}",
            DeferredInitWarning,
            stacklevel=user_stacklevel(),
        )
        keep = {self.ref(f).sid for f in list(self.alive)}
        with recording_paused(), self.eager_generator():
            replay_exact(
                self,
                targets=set(),
                keep=keep,
                device=None,
                draw_skipped_tail=True,
                on_ready=lambda sid, executor: None,
            )

    def before_generator_use(self, function: str, use: str) -> None:
        """``function`` (``torch.manual_seed``, ``torch.get_rng_state``...) is about to ``use`` ("set" or
        "read") the global generator: eager drew the numbers recorded so far before that, so they are
        drawn now (nothing to do if none is pending)."""
        if any(self.ops[k].random for k in self.pending()):
            fix = "seed" if use == "set" else "read the generator"
            self.flush(
                f"{function} after random numbers were recorded",
                f"Eager construction drew them before the generator was {use}",
                f"To keep the whole model deferred, {fix} before trainer.fit (or deferred_init), or at "
                "the top of configure_model before building any layer.",
            )

    def generator_set(self) -> None:
        """The global generator was just set: the draws recorded from now on start from its new state."""
        self.rng_state = torch.get_rng_state()
        self.follows = None  # eager would draw from the new state, not after an earlier recording

    def record_call(
        self, func: Callable[..., Any], tensor: DeferredTensor, args: tuple, kwargs: dict
    ) -> DeferredTensor:
        """Log a whole Python function that initializes ``tensor`` in place.

        For init functions that loop on random values (rejection sampling): replaying
        the call itself draws exactly what eager drew, with no value needed now.
        """
        ref = self.ref(tensor)
        full = _covers_storage(self.meta(tensor))
        flat, spec = flatten(((tensor, *args), kwargs))
        logged = [ref if x is tensor else x for x in flat]
        if any(isinstance(x, torch.Tensor) for x in logged):
            raise DeferredInitError(
                f"{func.__qualname__} with tensor arguments other than the one it initializes, in {constructor_site()}."
            )
        sid = frozenset({ref.sid})
        index = self._append(
            Op(func, logged, spec, frozenset() if full else sid, sid, sid if full else frozenset(), (), True)
        )
        self._last_write[ref.sid] = index
        self.uninitialized.discard(ref.sid)
        if self.replay_from is not None:
            self._drawn_after_jump(index)
        return tensor

    def _drawn_after_jump(self, index: int) -> None:
        """A draw recorded after the generator was jumped past the block's (``model.apply(init_fn)``
        after ``trainer.init_module()``): eager draws it next, so the generator jumps past it too.
        When it cannot (its count is unknown, or numbers were drawn since the block), the generator
        goes back to where it was and replay draws from it as it is at materialize, as without a jump."""
        words = _global_words(self, [index])
        unmoved = self.jumped_to is not None and torch.equal(torch.get_rng_state(), self.jumped_to)
        if words is not None and unmoved:
            skip_outputs(torch.default_generator, words)
            self.jumped_to = torch.get_rng_state()
            return
        if unmoved and self.replay_from is not None:
            torch.set_rng_state(self.replay_from)
        self.replay_from = self.jumped_to = None


class _RecordingMode(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in dynamo.disable, whose first call
        # imports torch._dynamo: seconds of start-up for a mode that never compiles.
        return False

    def __torch_dispatch__(
        self, func: torch._ops.OpOverload, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        return self.recorder.dispatch(func, args, kwargs or {})


_state = threading.local()


def current_recorder() -> Recorder | None:
    """The recorder of the recording on this thread, if any."""
    return getattr(_state, "recorder", None)


def _recording_user_code() -> Recorder | None:
    """The recorder, if this thread is recording and not running replay or materialize."""
    return None if getattr(_state, "paused", False) else current_recorder()


@contextlib.contextmanager
def recording_paused() -> Iterator[None]:
    """Run real ops inside a recording (replay, values read by a constructor)."""
    paused = getattr(_state, "paused", False)
    _state.paused = True
    try:
        with _disable_current_modes():
            yield
    finally:
        _state.paused = paused


# Init functions whose Python loops on random values; recorded as one call each.
_WHOLE_CALLS = [(torch.nn.init, "trunc_normal_")]
# Init functions that compute in new tensors (orthogonal_: the QR decomposition of a normal draw): recorded op
# by op in the block, where their draws are counted, and as one call each after it, where a new tensor made
# from a deferred one means a forward pass and is refused (``model.apply(init_fn)`` before ``fit``).
_CALLS_AFTER_THE_BLOCK = [(torch.nn.init, "orthogonal_")]
# Setters and getters of the global CPU generator: the draws recorded before one must
# happen before it (fork_rng reads the state, then puts it back), and the draws recorded
# after a setter start from the state it sets.
_RNG_GETTERS = [(torch, "get_rng_state"), (torch.random, "get_rng_state")]
_RNG_SETTERS = [
    (torch, "manual_seed"),
    (torch.random, "manual_seed"),
    (torch, "seed"),
    (torch.random, "seed"),
    (torch, "set_rng_state"),
    (torch.random, "set_rng_state"),
]
_patch_lock = threading.Lock()
_patch_users = 0


def _recorded_call(original: Callable[..., Any], also_in_the_block: bool = True) -> Callable[..., Any]:
    """``original``, recorded as one call on a deferred tensor (in its block too, or only after it)."""

    @functools.wraps(original)
    def call(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(tensor, DeferredTensor):
            return original(tensor, *args, **kwargs)
        # recorded where the tensor was, in its block or after it (model.apply(init_fn) before fit)
        if current_recorder() not in (None, tensor._cs_recording):
            raise DeferredInitError(_mixes_recordings(original.__qualname__))
        if not also_in_the_block:
            if tensor._cs_recording.active:
                return original(tensor, *args, **kwargs)  # recorded op by op
            # eager's argument errors at the caller's line, not at materialize (meta tensors draw nothing)
            original(
                torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype, device="meta"), *args, **kwargs
            )
        return tensor._cs_recording.record_call(original, tensor, args, kwargs)

    call._cs_recorded = True  # type: ignore[attr-defined]
    return call


def _setter(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        recorder = _recording_user_code()
        if recorder is None:
            return original(*args, **kwargs)
        recorder.before_generator_use(f"torch.{original.__name__}", "set")
        result = original(*args, **kwargs)
        recorder.generator_set()
        return result

    return call


def _getter(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        recorder = _recording_user_code()
        if recorder is not None:
            recorder.before_generator_use(f"torch.{original.__name__}", "read")
        return original(*args, **kwargs)

    return call


def _install_whole_calls() -> None:
    """Swap in the init functions' wrappers, for good: in-place init after the block
    (``model.apply(init_fn)`` between ``trainer.init_module()`` and ``fit``) is recorded too, and a
    model module's ``from torch.nn.init import trunc_normal_`` made after ``import cs_lightning`` gets
    the wrapper; real tensors pass straight through to torch's function."""
    for calls, also_in_the_block in ((_WHOLE_CALLS, True), (_CALLS_AFTER_THE_BLOCK, False)):
        for owner, name in calls:
            if not getattr(getattr(owner, name), "_cs_recorded", False):
                setattr(owner, name, _recorded_call(getattr(owner, name), also_in_the_block))


@contextlib.contextmanager
def _patched() -> Iterator[None]:
    """Swap in the recording wrappers (generator setters and getters), process-wide; each acts
    only on the thread that records."""
    global _patch_users
    patches = [(owner, name, _setter) for owner, name in _RNG_SETTERS]
    patches += [(owner, name, _getter) for owner, name in _RNG_GETTERS]
    with _patch_lock:
        _install_whole_calls()  # again if something has rebound a name since
        if _patch_users == 0:
            for owner, name, wrap in patches:
                setattr(owner, name, wrap(getattr(owner, name)))
        _patch_users += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                for owner, name, _ in patches:
                    setattr(owner, name, getattr(owner, name).__wrapped__)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Defer every tensor created inside the block; nested blocks join the outer one.

    Modules built inside hold :class:`DeferredTensor` parameters and buffers until
    :func:`cs_lightning.deferred.materialize`. The recording state is restored on exit,
    also when the block raises.
    """
    if current_recorder() is not None:
        yield
        return
    recorder = Recorder()
    _state.recorder = recorder
    try:
        with _patched(), _RecordingMode(recorder):
            yield
    except RuntimeError as err:
        if "data is not allocated yet" not in str(err):
            raise
        # a kernel that reads a tensor's memory before dispatch (torch.quasirandom.SobolEngine's)
        raise DeferredInitError(
            f"a torch function read the values of a tensor being recorded, which has none until materialize "
            f"({str(err).splitlines()[0]}), so it cannot be deferred. Fix: build that part eagerly, outside "
            "the recording (in the LightningModule's __init__ rather than configure_model)."
        ) from err
    finally:
        recorder.active = False
        _state.recorder = None


def deferred_init(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)`` (usually a module class) with its tensors deferred.

    If the constructor does something that cannot be replayed faithfully, this warns
    (:class:`DeferredInitWarning`, naming the constructor and line) and constructs the
    module eagerly instead: the weights are then eager's, never silently different.
    Inside an enclosing :func:`recording` block it joins that block and raises instead.
    ``fn`` must return a ``torch.nn.Module``: :func:`materialize` makes a module real, and a
    bare tensor or a container of modules returned here could never be.
    """
    module = _deferred_call(fn, *args, **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise DeferredInitUsageError(
            f"deferred_init: {getattr(fn, '__qualname__', fn)!s} returned a {type(module).__name__}, not a "
            "torch.nn.Module; fix: return the module (wrap several in nn.ModuleList or nn.ModuleDict)"
        )
    return module


def _deferred_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with its tensors deferred, or eagerly with a warning (see deferred_init)."""
    if current_recorder() is not None:
        return fn(*args, **kwargs)
    python_rng, numpy_rng = random.getstate(), np.random.get_state()
    torch_rng = torch.get_rng_state()
    try:
        with recording():
            return fn(*args, **kwargs)
    except DeferredInitError as err:
        warnings.warn(
            f"{err} Falling back to eager construction of {getattr(fn, '__qualname__', fn)!s}.",
            DeferredInitWarning,
            stacklevel=2,
        )
        # Start over from where the failed attempt started (it may have run a part).
        random.setstate(python_rng)
        np.random.set_state(numpy_rng)
        torch.set_rng_state(torch_rng)
        return fn(*args, **kwargs)


def is_deferred(module: torch.nn.Module) -> bool:
    """True while any parameter or buffer of ``module`` is still a deferred tensor."""
    return any(isinstance(t, DeferredTensor) for t in (*module.parameters(), *module.buffers()))


def jump_past_draws(recording: Recording) -> bool:
    """Move the global CPU generator past the draws ``recording`` holds and has not run, to where
    eager construction would have left it, so numbers drawn before materialize (a ``random_split``,
    a ``torch.randn``) are eager's too; materialize then replays from the state saved here.

    Only when every such draw's count of generator outputs is known without generating it
    (float32/float64 ``normal_``, ``uniform_``, ``randn``, ``rand`` on the CPU, and the one round
    of ``normal_`` a ``trunc_normal_`` takes when a second has odds under 1e-3; draws from the
    user's own generators count none): returns whether the generator is where eager leaves it.
    A jump over many outputs costs 10-30 ms whatever their count (``mt19937.advance``).
    """
    words = _global_words(recording, recording.pending())
    if words is None:
        return False
    if words:
        recording.replay_from = torch.get_rng_state()
        skip_outputs(torch.default_generator, words)
        recording.jumped_to = torch.get_rng_state()
    return True


def advance_past_draws(recording: Recording, indices: list[int]) -> bool:
    """Move the global CPU generator past the draws of the ops at ``indices``, as running them would: by a jump
    where an op's count of outputs is known, by making its numbers in scratch memory where it is a fill of
    numbers alone (a ``normal_`` under 16 elements). False, with the generator part of the way, at an op whose
    count depends on values made before it (``bernoulli(p)``, ``poisson(rates)``): those are not made here."""
    executor = Executor(recording.storages, torch.device("cpu"))
    for k in indices:
        op = recording.ops[k]
        if not _draws_globally(op):
            continue
        words = executor.global_draws(op)
        if words is not None:
            skip_outputs(torch.default_generator, words)
        elif chunkable(op) is not None:
            executor.advance(op)
        else:
            return False
    return True


def _draws_globally(op: Op) -> bool:
    return op.random and not any(isinstance(x, torch.Generator) and x is not torch.default_generator for x in op.flat)


def _global_words(recording: Recording, indices: list[int]) -> int | None:
    """Outputs of the global CPU generator the ops at ``indices`` take; None if one is unknown."""
    counter = Executor(recording.storages, None)  # allocates nothing: global_draws reads metadata only
    total = 0
    for k in indices:
        op = recording.ops[k]
        if not _draws_globally(op):
            continue
        words = counter.global_draws(op)
        if words is None:  # a trunc_normal_ nearly sure to take one round counts as one (replay checks it)
            fill = truncated_normal(op)
            words = None if fill is None else fill.words
        if words is None:
            return None
        total += words
    return total


_install_whole_calls()
