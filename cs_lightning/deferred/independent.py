"""Order-independent materialization: every tensor gets its own random stream.

Each group of storages that live ops connect (usually one parameter) draws from a CPU
generator seeded from a hash of (seed, fully qualified names, shapes). The values then do
not depend on the order tensors are materialized in, nor on the number of threads, ranks
or devices, so the groups run in parallel threads (torch kernels release the GIL). They
are NOT the values eager construction gives: eager draws every tensor from one shared
stream. Tensors whose initialization draws no random numbers (zeros, ones, ``arange``
tables) are exactly eager's.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from cs_lightning.deferred.oplog import Op, Recording
from cs_lightning.deferred.replay import Executor, live_ops


def stream_seed(seed: int, key: tuple) -> int:
    """A 63-bit seed for one group, from the global seed and the group's names/shapes."""
    digest = hashlib.sha256(repr((seed, key)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _groups(ops: Sequence[Op], flags: list[bool]) -> list[list[int]]:
    """Live op indices grouped by the storages they share (union-find)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for k, op in enumerate(ops):
        if flags[k]:
            first, *rest = op.reads | op.writes
            for other in rest:
                parent[find(other)] = find(first)
    groups: dict[int, list[int]] = defaultdict(list)
    for k, op in enumerate(ops):
        if flags[k]:
            groups[find(next(iter(op.writes)))].append(k)
    return list(groups.values())


def replay_independent(
    recording: Recording,
    *,
    targets: set[int],
    keep: set[int],
    keys: dict[int, tuple],
    on_ready: Callable[[int, Executor], None],
    seed: int | None = None,
) -> None:
    """Replay the groups that make ``targets``, one CPU generator each, on all threads.

    Each generator is seeded from ``seed`` (default ``torch.initial_seed()``) and its storages' keys; the groups
    run on the CPU whatever the module's device, so every device kind gets the same numbers.

    ``keys[sid]`` names a target storage (qualified names and shape of its tensors);
    ``on_ready`` gets each target storage as soon as its group is done. Groups that make
    only ``keep`` storages (other modules' tensors) stay pending for their own
    materialize, where their own names seed them.
    """
    pending = recording.pending()
    ops = [recording.ops[k] for k in pending]
    flags = live_ops(ops, targets | keep)
    executor = recording.executor or Executor(recording.storages, torch.device("cpu"))
    seed = torch.initial_seed() if seed is None else seed
    recording.executor = executor
    touched = {sid for k, op in enumerate(ops) if flags[k] for sid in op.reads | op.writes}
    for sid in targets - touched:  # already computed by an earlier materialize
        on_ready(sid, executor)

    def run(indices: list[int]) -> None:
        sids = {sid for k in indices for sid in ops[k].reads | ops[k].writes}
        key = tuple(sorted(keys[sid] for sid in sids if sid in keys))
        first = next(iter(ops[indices[0]].writes))
        generator = torch.Generator(device=executor.device_of(first))
        generator.manual_seed(stream_seed(seed, key))
        with torch.no_grad():  # grad mode is per thread: a source requiring grad must not be recorded
            for k in indices:
                executor.run(ops[k], generator)
            for sid in sids:
                if sid in targets:
                    on_ready(sid, executor)
                elif sid not in keep:
                    executor.release(sid, reusable=True)

    groups = [idx for idx in _groups(ops, flags) if any(sid in targets for k in idx for sid in ops[k].writes)]
    # Largest groups first, so that the threads finish together.
    groups.sort(key=lambda idx: -sum(recording.storages[sid].nbytes for sid in {s for k in idx for s in ops[k].writes}))
    with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
        list(pool.map(run, groups))
    recording.done.update(pending[k] for idx in groups for k in idx)
    executor.drop_spares()
