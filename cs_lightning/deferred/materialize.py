"""Make a recorded module real, in place: exactly as eager, or order-independent."""

from __future__ import annotations

import bisect
import gc
import mmap
import os
import sys
import warnings
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase
from torch.nn.modules.instancenorm import _InstanceNorm

from cs_lightning.deferred.independent import replay_independent
from cs_lightning.deferred.oplog import Recording, Ref
from cs_lightning.deferred.pages import MADV_DONTNEED, advise, advise_huge_pages, whole_pages
from cs_lightning.deferred.recorder import DeferredTensor, recording_paused, user_stacklevel
from cs_lightning.deferred.replay import TRUNC_NORMAL, Executor, replay_exact
from cs_lightning.errors import DeferredInitUsageError, DeferredInitWarning, UsageError

_MODES = ("exact", "independent")
_REGISTRIES = ("_parameters", "_buffers", "_modules")
_RNG = ("eager", "skip_unread")
# Old values of rng=, kept for one release with a DeprecationWarning.
_RNG_RENAMED = {"fast": "skip_unread"}
# _load_from_state_dict overrides that only handle old checkpoint versions: copying the
# tensors into place gives what they give.
_PLAIN_LOADING = {nn.Module._load_from_state_dict, _NormBase._load_from_state_dict, _InstanceNorm._load_from_state_dict}


@dataclass
class Slot:
    """One place a module holds a tensor: ``owner.<name>``, reachable as ``fqn``."""

    owner: nn.Module
    kind: str  # "parameter", "buffer", "attribute" or "item" (owner.<name>[key])
    name: str
    fqn: str
    tensor: torch.Tensor
    in_state_dict: bool
    key: Any = None


@dataclass
class Deferred:
    """One deferred tensor object of the module, with every name it has there."""

    fake: DeferredTensor
    ref: Ref
    fqns: list[str] = field(default_factory=list)
    source: torch.Tensor | None = None  # its value from the state_dict, if any
    cast: bool = False  # parameters and buffers take the dtype; plain attributes do not


def materialize(
    module: nn.Module,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    *,
    mode: str = "exact",
    rng: str = "eager",
) -> nn.Module:
    """Make every parameter and buffer of ``module`` real, in place, and return it.

    Args:
        module: a module built under :func:`recording` or :func:`deferred_init`
            (modules built eagerly work too: they are moved, cast and loaded).
        device: where the tensors go; None keeps the device they were recorded on.
        dtype: floating-point tensors end in this dtype, bit-identical to eager
            construction followed by ``.to(dtype)``; each tensor is computed in its
            recorded dtype and cast as soon as it is final, so the model is never held
            whole in float32. Non-floating tensors keep their dtype.
        state_dict: values by ``module.state_dict()`` key (a ``torch.load(mmap=True)``
            result works). Tensors found there are never initialized: they are read
            straight into place, exactly as eager construction followed by
            ``load_state_dict(strict=False)``; keys that name no parameter or
            persistent buffer are reported in a warning. They are copied on all
            threads, so the module owns its memory, as after ``load_state_dict``; the
            pages of a memory-mapped source are unmapped once copied (adopting them
            in place instead faulted them in during the first step and copied each
            again at the first update: measured slower to the first loss). A module
            that loads in its own way (load_state_dict hooks, its own
            ``_load_from_state_dict`` or ``set_extra_state``) is initialized in full
            and then loaded with ``load_state_dict``, with a warning naming it.
        mode: ``"exact"``: bit-identical to eager construction, including the global
            RNG state afterwards. The replay draws from the global generator as it is
            now, so draw no random numbers between recording and materialize (a
            warning says when that happened). Modules recorded in one block may be
            materialized in any order: the first call replays the whole block and keeps
            the other modules' tensors until their turn. Modules of separate blocks (two
            ``deferred_init`` calls) must be materialized in recording order: eager drew
            the second's numbers after the first's, and a seed set again in between
            cannot be told apart from none, so the second, materialized first, draws the
            first's numbers.
            ``"independent"``: each tensor draws from its own CPU generator, seeded
            from ``torch.initial_seed()``, its qualified name (as seen from ``module``)
            and shape, then moves to ``device``; parallel on all threads, the same
            values for any order, thread count, rank or device, NOT equal to eager; the
            global RNG state is left untouched.
        rng: exact mode only. ``"eager"``: the generator is advanced past the numbers
            eager construction drew for tensors the state_dict provides (jumped over on
            the CPU, drawn into a small scratch buffer elsewhere), so the global RNG
            state afterwards equals eager construction + ``load_state_dict``.
            ``"skip_unread"``: those draws are skipped unless a later initialization
            depends on them (no one reads them); weights are unchanged (still exact), only
            the global RNG state afterwards differs. (``"fast"``, its old name, still
            works for one release, with a DeprecationWarning.)
    """
    if not isinstance(module, nn.Module):
        raise DeferredInitUsageError(
            f"materialize: got a {type(module).__name__}; fix: pass the torch.nn.Module that deferred_init "
            "or a recording() block built (a module built eagerly works too)"
        )
    if rng in _RNG_RENAMED:
        warnings.warn(
            f"materialize: rng={rng!r} is deprecated and will be removed in the next release;"
            f" pass rng={_RNG_RENAMED[rng]!r} (same behaviour).",
            DeprecationWarning,
            stacklevel=2,
        )
        rng = _RNG_RENAMED[rng]
    device, dtype = _check(device, dtype, state_dict, mode, rng)
    state_dict = state_dict or {}
    custom = custom_loading(module, state_dict)
    if custom is not None:
        warnings.warn(loaded_in_full("materialize", custom), DeferredInitWarning, stacklevel=2)
        materialize(module, device, mode=mode)
        _warn_unused(module.load_state_dict(state_dict, strict=False).unexpected_keys)
        return materialize(module, device, dtype)
    with recording_paused(), torch.no_grad():
        slots = module_slots(module, state_dict)
        _warn_unused(set(state_dict) - {s.fqn for s in slots if s.in_state_dict})
        deferred = deferred_tensors(slots, state_dict)
        finals: dict[int, torch.Tensor] = {}
        for k, (recording, group) in enumerate(by_recording(deferred)):
            if mode == "exact" and k == 0:  # later recordings draw after the earlier ones
                warn_if_rng_moved(recording)
            with recording.eager_generator():
                finals.update(_materialize_recording(recording, group, device, dtype, mode, rng))
            recording.materialized = True
        _assign(slots, finals, device, dtype, state_dict)
    return module


def _check(
    device: Any, dtype: Any, state_dict: Any, mode: Any, rng: Any
) -> tuple[torch.device | None, torch.dtype | None]:
    check_mode("materialize", mode, rng)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise DeferredInitUsageError(
            f"materialize: dtype={dtype!r} must be a floating-point torch.dtype such as torch.bfloat16, or None."
        )
    if state_dict is not None and not isinstance(state_dict, Mapping):
        raise DeferredInitUsageError(
            f"materialize: state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}."
        )
    try:
        return (None if device is None else torch.device(device)), dtype
    except (RuntimeError, TypeError) as err:
        raise UsageError(f"materialize: device={device!r} is not a torch device (e.g. 'cpu', 'cuda:0').") from err


def check_mode(caller: str, mode: Any, rng: Any) -> None:
    """Refuse a ``mode`` or ``rng`` that ``caller`` (materialize, or its sharded twin) does not know."""
    if mode not in _MODES:
        raise UsageError(f"{caller}: mode={mode!r} is not one of {_MODES}.")
    if rng not in _RNG:
        raise UsageError(f"{caller}: rng={rng!r} is not one of {_RNG}.")


def module_slots(module: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> list[Slot]:
    """Every tensor the module holds, in load_state_dict's order (params, then buffers)."""
    slots = []
    for prefix, mod in module.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for name, p in mod._parameters.items():
            if p is not None:
                slots.append(Slot(mod, "parameter", name, dot + name, p, True))
        for name, b in mod._buffers.items():
            if b is not None:
                persistent = name not in mod._non_persistent_buffers_set
                slots.append(Slot(mod, "buffer", name, dot + name, b, persistent))
        for name, value in vars(mod).items():
            if isinstance(value, DeferredTensor):  # a plain attribute, e.g. a cache
                slots.append(Slot(mod, "attribute", name, dot + name, value, False))
            elif isinstance(value, (dict, list)) and name not in _REGISTRIES:
                # e.g. torchmetrics' state defaults, an RNN's _flat_weights
                items = value.items() if isinstance(value, dict) else enumerate(value)
                slots.extend(
                    Slot(mod, "item", name, f"{dot}{name}[{key!r}]", item, False, key)
                    for key, item in items
                    if isinstance(item, DeferredTensor)
                )
    for slot in slots:
        source = state_dict.get(slot.fqn) if slot.in_state_dict else None
        if isinstance(source, DeferredTensor):
            raise DeferredInitUsageError(
                f"materialize: state_dict[{slot.fqn!r}] is a deferred tensor; "
                "materialize the module it comes from first."
            )
        if source is not None and tuple(source.shape) != tuple(slot.tensor.shape):
            raise UsageError(
                f"materialize: state_dict[{slot.fqn!r}] has shape {tuple(source.shape)}, "
                f"the module's tensor has {tuple(slot.tensor.shape)}; fix the checkpoint "
                "or drop that key."
            )
    return slots


def custom_loading(module: nn.Module, state_dict: Mapping[str, Any]) -> str | None:
    """The first submodule given state_dict keys whose loading is more than copying them
    into place, as ``"path (why)"``; None if there is none."""
    if not state_dict:
        return None
    given = {""}  # every module path that some key lies under
    for key in state_dict:
        parts = key.split(".")
        given.update(".".join(parts[:k]) for k in range(1, len(parts)))
    for path, mod in module.named_modules():
        if path not in given:
            continue
        name = f"{path or 'the root module'} ({type(mod).__name__})"
        if not path and type(mod).load_state_dict is not nn.Module.load_state_dict:  # only the root's is called
            return f"{name}, with its own load_state_dict,"
        if mod._load_state_dict_pre_hooks or mod._load_state_dict_post_hooks:
            return f"{name}, with load_state_dict hooks,"
        if type(mod)._load_from_state_dict not in _PLAIN_LOADING:
            return f"{name}, with its own _load_from_state_dict,"
        if (f"{path}." if path else "") + "_extra_state" in state_dict:
            return f"{name}, with extra state,"
    return None


def loaded_in_full(caller: str, custom: str) -> str:
    """The warning for a module that ``custom_loading`` found: initialized in full, then loaded by itself."""
    return (
        f"{caller}: {custom} loads a state_dict in its own way, so the module is initialized in full and then "
        "loaded with its load_state_dict, as eager does (no time saved on the checkpoint)."
    )


def _warn_unused(keys: Collection[str]) -> None:
    """Keys load_state_dict(strict=False) would return as unexpected: never silently unused."""
    if keys:
        unexpected = sorted(keys)
        shown = ", ".join(unexpected[:5]) + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else "")
        warnings.warn(
            f"materialize: state_dict keys {shown} name no parameter or persistent buffer "
            "of the module; they were not loaded. Rename them to the module's "
            "state_dict() keys (check the prefix) or drop them.",
            DeferredInitWarning,
            stacklevel=3,
        )


def deferred_tensors(slots: list[Slot], state_dict: Mapping[str, torch.Tensor]) -> list[Deferred]:
    """Each deferred tensor the slots hold, once (a tied weight has several names), with its state_dict value."""
    found: dict[int, Deferred] = {}
    for slot in slots:
        fake = slot.tensor
        if not isinstance(fake, DeferredTensor):
            continue
        entry = found.setdefault(id(fake), Deferred(fake, fake._cs_recording.ref(fake)))
        entry.fqns.append(slot.fqn)
        entry.cast = entry.cast or slot.kind in ("parameter", "buffer")
        if slot.in_state_dict and slot.fqn in state_dict:
            entry.source = state_dict[slot.fqn]  # the last key loaded wins, as in eager
    return list(found.values())


def by_recording(deferred: list[Deferred]) -> list[tuple[Recording, list[Deferred]]]:
    """The tensors grouped by recording, in the order the recordings were made."""
    groups: dict[Recording, list[Deferred]] = {}
    for entry in deferred:
        groups.setdefault(entry.fake._cs_recording, []).append(entry)
    return sorted(groups.items(), key=lambda item: item[0].serial)


def by_storage(group: list[Deferred]) -> dict[int, list[Deferred]]:
    """The tensors grouped by the storage they view (tied weights and views of one tensor share one)."""
    by_sid: dict[int, list[Deferred]] = {}
    for entry in group:
        by_sid.setdefault(entry.ref.sid, []).append(entry)
    return by_sid


def held_elsewhere(recording: Recording, mine: Callable[[torch.Tensor], bool]) -> set[int]:
    """The storages of the recording's tensors still alive that are not ``mine``: code other than the module
    being materialized holds them, so the replay computes them and keeps them for a later materialize."""

    def held() -> set[int]:
        return {recording.ref(fake).sid for fake in list(recording.alive) if not mine(fake)}

    storages = held()
    if storages:  # dead tensors in reference cycles would be computed for nothing
        gc.collect()
        storages = held()
    return storages


def _materialize_recording(
    recording: Recording,
    group: list[Deferred],
    device: torch.device | None,
    dtype: torch.dtype | None,
    mode: str,
    rng: str,
) -> dict[int, torch.Tensor]:
    by_sid = by_storage(group)
    # a tensor of the module's is mine as an object: a view of its storage held elsewhere keeps the storage
    mine = {id(e.fake) for e in group}
    keep = held_elsewhere(recording, lambda fake: id(fake) in mine)  # computed and kept
    targets = {sid for sid, entries in by_sid.items() if any(e.source is None for e in entries)}
    provided = [e for sid in set(by_sid) - targets for e in by_sid[sid]]
    _warn_uninitialized(recording, targets, by_sid)
    finals: dict[int, torch.Tensor] = {}

    def on_ready(sid: int, executor: Executor) -> None:
        views = [(e, executor.view(e.ref)) for e in by_sid[sid]]
        for e, view in views:  # load_state_dict(strict=False) copies into place
            if e.source is not None:
                view.copy_(e.source)
        for e, view in views:
            finals[id(e.fake)] = final_tensor(view, device, dtype if e.cast else None)
        if sid not in keep:
            copied = all(
                finals[id(e.fake)].untyped_storage().data_ptr() != view.untyped_storage().data_ptr()
                for e, view in views
            )
            executor.release(sid, reusable=copied)

    # The checkpoint is read before the replay moves the generator or marks any op done: a
    # read that fails (a bad tensor, out of memory, Ctrl-C) leaves the recording as it was.
    finals.update(_read_checkpoint(provided, recording, device, dtype))
    if mode == "exact":
        # Random fills go on all threads where their storages are the final tensors; a cast
        # (bfloat16 weights) frees each float32 storage as soon as it is cast, one at a time.
        parallel = (device is None or device.type == "cpu") and dtype in (None, torch.float32)
        workers = torch.get_num_threads() if parallel else 1
        replays_the_block = bool(recording.pending())  # (a second module of a block finds it replayed)
        replay_exact(
            recording,
            targets=targets,
            keep=keep,
            device=device,
            draw_skipped_tail=rng == "eager",
            on_ready=on_ready,
            workers=workers,
        )
        if rng == "eager" and replays_the_block:
            _warn_if_jumped_wrong(recording)
    else:
        keys = {sid: tuple((e.fqns[0], tuple(e.ref.size)) for e in by_sid[sid]) for sid in targets}
        replay_independent(recording, targets=targets, keep=keep, keys=keys, on_ready=on_ready)
    return finals


def _warn_uninitialized(recording: Recording, targets: set[int], by_sid: dict[int, list[Deferred]]) -> None:
    names = [e.fqns[0] for sid in sorted(targets & recording.uninitialized) for e in by_sid[sid]]
    if names:
        warnings.warn(
            f"materialize: nothing initialized {', '.join(names)} (created with "
            "torch.empty and never written); its values are arbitrary memory, as in eager "
            "construction. Initialize it in the constructor or pass it in state_dict.",
            DeferredInitWarning,
            stacklevel=3,
        )


def warn_if_rng_moved(recording: Recording) -> None:
    """Warn when the generator is not where eager construction would have found it."""
    if recording.done or recording.replay_from is not None or not any(op.random for op in recording.ops):
        return  # (after a jump past its draws, replay draws from the saved state: later draws are fine)
    expected: torch.Tensor | None = recording.rng_state
    earlier = recording.follows
    if earlier is not None and earlier.rng_after is None:  # its draws, eager's first, are not made yet
        earlier.overtaken = True
        warnings.warn(
            f"materialize: this module was recorded (at {recording.site}) after another recording (at "
            f"{earlier.site}) that is not materialized yet, whose random numbers eager construction drew "
            "first: neither gets eager's weights. Fix: materialize the modules in the order they were "
            "recorded, or together in one call (materialize(nn.ModuleList([first, second])))",
            DeferredInitWarning,
            stacklevel=user_stacklevel(),
        )
        return
    if recording.overtaken:
        return  # said as the later recording was materialized first
    if earlier is not None:  # eager would have drawn after the earlier recording
        expected = earlier.rng_after
    # (generators of the caller's own need no check: recording moved them as eager does, see recorder._move_past)
    if expected is not None and not torch.equal(expected, torch.get_rng_state()):
        warnings.warn(
            "materialize: random numbers were drawn (or the seed was set) between recording and "
            f"materialize (recorded at {recording.site}), from the global generator; "
            "the weights are those eager construction would give now, not at recording time, "
            "and those draws differ from eager's too. Fix: build the model in configure_model "
            "rather than under trainer.init_module() (or materialize before drawing), or draw "
            "those numbers with your own torch.Generator.",
            DeferredInitWarning,
            stacklevel=user_stacklevel(),
        )


def _warn_if_jumped_wrong(recording: Recording) -> None:
    """The generator was jumped past the block's draws as it ended (``recorder.jump_past_draws``),
    counting a ``trunc_normal_`` as one round: say so if the replay, which draws eager's numbers,
    ended elsewhere."""
    if (
        recording.jumped_to is None
        or recording.rng_after is None
        or torch.equal(recording.rng_after, recording.jumped_to)
        or not any(op.func is TRUNC_NORMAL for op in recording.ops)
    ):
        return
    warnings.warn(
        f"materialize: a trunc_normal_ recorded at {recording.site} took a second round of draws (odds "
        "under 1e-3); the generator had been moved past one round as the trainer.init_module() block "
        "ended, so numbers drawn since then (a random_split, a torch.randn) differ from eager's. The "
        "weights are eager's. Building the model in configure_model avoids it.",
        DeferredInitWarning,
        stacklevel=user_stacklevel(),
    )


def final_tensor(view: torch.Tensor, device: torch.device | None, dtype: torch.dtype | None) -> torch.Tensor:
    """A replayed tensor as the module will hold it: on ``device``, cast to ``dtype`` (floating ones only)."""
    target = cast_to(dtype, view.dtype)
    if (device is not None and view.device != device) or view.dtype != target:
        return view.to(device=device, dtype=target)
    # The same memory as a tensor of its own (not a view of the flat replay storage).
    own = torch.empty(0, dtype=view.dtype, device=view.device)
    return own.set_(view.untyped_storage(), view.storage_offset(), view.size(), view.stride())


def cast_to(dtype: torch.dtype | None, recorded: torch.dtype) -> torch.dtype:
    """The dtype a tensor ends in: floating ones are cast, as ``Module.double()``/``half()`` do.

    Complex ones keep theirs (``Module.to(torch.float64)`` would drop the imaginary part):
    Lightning's precision plugin converts the materialized module afterwards exactly as it
    converts an eager one, complex tensors included.
    """
    if dtype is not None and recorded.is_floating_point:
        return dtype
    return recorded


def _read_checkpoint(
    entries: list[Deferred], recording: Recording, device: torch.device | None, dtype: torch.dtype | None
) -> dict[int, torch.Tensor]:
    """The tensors the state_dict provides, copied into place on all threads, largest first
    (``copy_`` releases the GIL; the new memory's page faults are taken in parallel too)."""
    entries = sorted(entries, key=lambda e: -e.ref.numel)
    mapped = MappedFiles()

    def read(entry: Deferred) -> torch.Tensor:
        with torch.no_grad():  # grad mode is per thread: a source requiring grad must not be recorded
            value = _from_checkpoint(entry, recording, device, dtype)
        assert entry.source is not None  # entries here are the ones the state_dict provides
        mapped.release(entry.source)
        return value

    with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
        return {id(e.fake): value for e, value in zip(entries, pool.map(read, entries))}


def _from_checkpoint(
    entry: Deferred, recording: Recording, device: torch.device | None, dtype: torch.dtype | None
) -> torch.Tensor:
    """A tensor's value read from the state_dict, as load_state_dict + .to(dtype) give."""
    source, ref = entry.source, entry.ref
    assert source is not None
    recorded = ref.dtype
    where = device if device is not None else recording.storages[ref.sid].device
    value = source if source.dtype == recorded else source.to(recorded)  # copy_'s cast
    out = torch.empty_strided(ref.size, ref.stride, dtype=cast_to(dtype, recorded), device=where)
    return advise_huge_pages(out).copy_(value)


class MappedFiles:
    """This process's private file mappings (a checkpoint loaded with ``mmap=True``), read once.

    A tensor copied out of one has its pages unmapped (``MADV_DONTNEED``): mapped pages count
    in the process's memory, and a second copy of the weights is what loading from a mapped
    file avoids. The pages stay in the page cache (``MADV_PAGEOUT`` would evict them, so that
    the next run, or another rank mapping the same file, reads it from disk again) and come
    back from it if read again. A range holding a page written since mapping (copy-on-write:
    a hook edited the checkpoint in place) is left mapped, as is every range where
    ``/proc/self/pagemap`` cannot tell: unmapping would lose the edit.
    """

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        if sys.platform.startswith("linux") and os.path.exists("/proc/self/maps"):
            with open("/proc/self/maps") as maps:
                for line in maps:
                    fields = line.split()
                    if len(fields) >= 6 and fields[1].endswith("p") and fields[5].startswith("/"):
                        start, end = (int(x, 16) for x in fields[0].split("-"))
                        self.ranges.append((start, end))
            self.ranges.sort()

    def release(self, tensor: torch.Tensor) -> None:
        if tensor.device.type != "cpu" or not self.ranges:
            return
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        k = bisect.bisect_right(self.ranges, (start, float("inf"))) - 1
        if k < 0 or not (self.ranges[k][0] <= start and end <= self.ranges[k][1]):
            return  # not in a file mapping: memory of its own, which the caller may still use
        first, last = whole_pages(start, end)  # of this tensor only
        if last > first and _file_pages_only(first, last):
            advise(first, last, MADV_DONTNEED)


def _file_pages_only(first: int, last: int) -> bool:
    """Whether no page in [first, last) is private anonymous memory, i.e. written since it was
    mapped (pagemap bit 63: present, 62: swapped, 61: a file page). False when pagemap cannot be read."""
    page = mmap.PAGESIZE
    try:
        with open("/proc/self/pagemap", "rb") as pagemap:
            pagemap.seek(first // page * 8)
            entries = np.frombuffer(pagemap.read((last - first) // page * 8), dtype="<u8")
    except OSError:
        return False
    present, swapped, file_page = np.uint64(1 << 63), np.uint64(1 << 62), np.uint64(1 << 61)
    # A swapped-out page was anonymous memory too: a copy-on-write edit written to swap.
    written = (((entries & present) != 0) & ((entries & file_page) == 0)) | ((entries & swapped) != 0)
    return entries.size == (last - first) // page and not written.any()


def _assign(
    slots: list[Slot],
    finals: dict[int, torch.Tensor],
    device: torch.device | None,
    dtype: torch.dtype | None,
    state_dict: Mapping[str, torch.Tensor],
) -> None:
    """Put the real tensors in place; one Parameter object per recorded one (ties stay)."""
    params = {
        id(s.tensor): nn.Parameter(finals[id(s.tensor)], requires_grad=s.tensor.requires_grad)
        for s in slots
        if s.kind == "parameter" and isinstance(s.tensor, DeferredTensor)
    }
    for slot in slots:
        t = slot.tensor
        if not isinstance(t, DeferredTensor):
            _update_real(slot, device, dtype, state_dict)
            continue
        value = params.get(id(t), finals[id(t)])  # other references get the Parameter too
        _carry_over(t, value)
        t.__dict__[_REPLACED_BY] = value  # for what holds the recorded tensor outside the module (see replaced)
        if slot.kind == "item":
            getattr(slot.owner, slot.name)[slot.key] = value
        else:
            setattr(slot.owner, slot.name, value)


# The attribute of a recorded tensor that names the real one materialize put in its place.
_REPLACED_BY = "_cs_replaced_by"


def replaced(tensor: torch.Tensor) -> torch.Tensor:
    """The real tensor materialize put in place of ``tensor``, a recorded one; ``tensor`` itself otherwise.

    What held a recorded tensor outside the module (an optimizer built in ``configure_model``, a dict of
    parameter groups) still holds it after materialize: this finds what the module holds now.
    """
    return tensor.__dict__.get(_REPLACED_BY, tensor) if isinstance(tensor, DeferredTensor) else tensor


def _carry_over(fake: DeferredTensor, real: torch.Tensor) -> None:
    """What a constructor attached to a tensor: attributes (a no-weight-decay flag) and
    gradient hooks (registered again: handles taken before materialize no longer remove
    them)."""
    real.__dict__.update((k, v) for k, v in vars(fake).items() if k not in ("_cs_recording", "_is_param", _REPLACED_BY))
    if real._backward_hooks is None and fake._backward_hooks:  # once, if tied
        for hook in fake._backward_hooks.values():
            real.register_hook(hook)
    if real._post_accumulate_grad_hooks is None and fake._post_accumulate_grad_hooks:
        for hook in fake._post_accumulate_grad_hooks.values():
            real.register_post_accumulate_grad_hook(hook)


def _update_real(
    slot: Slot, device: torch.device | None, dtype: torch.dtype | None, state_dict: Mapping[str, torch.Tensor]
) -> None:
    """A tensor that was never deferred: load, move and cast it like eager would."""
    t = slot.tensor
    if slot.in_state_dict and slot.fqn in state_dict:
        t.copy_(state_dict[slot.fqn])
    target = cast_to(dtype, t.dtype)
    if (device is None or t.device == device) and t.dtype == target:
        return
    moved = t.to(device=device, dtype=target)
    if slot.kind == "parameter":
        t.data = moved  # keeps the Parameter object, as Module.to does
    else:
        setattr(slot.owner, slot.name, moved)
