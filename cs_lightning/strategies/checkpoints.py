"""What the CS-X strategies add to Lightning's checkpoints, and what they check in one before loading it.

* The random generators' states of every rank, saved under ``RNG_KEY`` and restored when a fit resumes, each rank
  its own (``every_rank_rng_states``, ``restore_rank_rng_states``).
* A checkpoint of another model refused before anything is loaded (``check_checkpoint_matches``).
* Which of a checkpoint's scheduler states the run's own schedulers resume from (``users_scheduler_states``):
  not StochasticWeightAveraging's, which that callback restores itself.
* What a sharded checkpoint folder is (``sharded_checkpoint_problem``), the one error for a folder that is not a
  whole one (``sharded_folder_error``) and the one refusing a whole one to a strategy that reads files
  (``sharded_checkpoint_refused``): the strategies and the CLI share all three; ``folder_refused`` picks one.
* A checkpoint file read memory-mapped (``load_mapped``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from lightning.fabric.utilities.load import _METADATA_FILENAME
from lightning.fabric.utilities.rank_zero import rank_zero_warn
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import StochasticWeightAveraging
from torch import nn

from cs_lightning.errors import CheckpointMismatchError, ConfigError, UsageError
from cs_lightning.generators import restore_rng_states, rng_states

# Checkpoint key of the random generators' states (torch, CUDA, numpy, python).
RNG_KEY = "csx_rng_states"

# What a sharded checkpoint folder holds (Lightning's ModelParallelStrategy, under csx_fsdp): the shards that
# torch.distributed.checkpoint writes, one or more per rank, their index, and Lightning's torch.save of the rest.
SHARDS, SHARD_INDEX, SHARDED_REST = "*.distcp", ".metadata", _METADATA_FILENAME


def sharded_checkpoint_problem(path: Path) -> str | None:
    """None when the folder ``path`` holds a whole sharded checkpoint; else what it is, ending a sentence that
    starts with the path. Lightning takes any folder holding meta.pt for one, and fails later, in torch's words."""
    missing = [name for name in (SHARD_INDEX, SHARDED_REST) if not (path / name).is_file()]
    if missing:
        return f"is a folder but not a sharded checkpoint (it has no {' and no '.join(missing)})"
    if not any(path.glob(SHARDS)):
        return f"is a sharded checkpoint without its shards ({SHARDS})"
    return None


# The one fix for a folder that is not a whole sharded checkpoint, as a Python argument or a YAML key alike.
SHARDED_FOLDER_FIX = (
    "fix: give a .ckpt file that Lightning saved, or a sharded checkpoint folder (csx_fsdp's, holding "
    f"{SHARD_INDEX} and {SHARDED_REST}), or leave ckpt_path out"
)


def sharded_folder_error(path: str, problem: str, *, in_config: bool = False) -> UsageError | ConfigError:
    """``ckpt_path`` is a folder but not a whole sharded checkpoint: ``problem``, from ``sharded_checkpoint_problem``,
    says what it is instead. ``in_config``: ckpt_path is a YAML key (the CLI), not an argument of ``Trainer.fit``."""
    return _ckpt_path_error(path, f"{problem}; {SHARDED_FOLDER_FIX}", in_config)


def sharded_checkpoint_refused(path: str, strategy: str, *, in_config: bool = False) -> UsageError | ConfigError:
    """Why ``strategy``, which reads checkpoint files, cannot resume the sharded checkpoint ``path``, and the two
    ways to use it, each written as the user sets a strategy: ``Trainer(strategy=...)``, or in a config."""
    if in_config:
        setting = f"trainer.strategy {strategy!r}"
        resume = "trainer.strategy: csx_fsdp"
        full = "trainer.strategy: {class_path: cs_lightning.CSXFSDPStrategy, init_args: {state_dict_type: full}}"
    else:
        setting = f"strategy={strategy!r}"
        resume = "strategy='csx_fsdp'"
        full = "CSXFSDPStrategy(state_dict_type='full')"
    problem = (
        "is a sharded checkpoint (a folder of torch.distributed.checkpoint shards, as csx_fsdp writes by default), "
        f"which {setting} cannot read; fix: resume it with {resume}, or save single-file checkpoints, which every "
        f"strategy reads, with {full}"
    )
    return _ckpt_path_error(path, problem, in_config)


def folder_refused(path: str, strategy: str) -> UsageError | ConfigError:
    """A folder given as ``ckpt_path`` to a strategy that reads checkpoint files: a whole sharded checkpoint
    (``csx_fsdp``'s default) is said to be one, with the two ways to use it; another folder, what it lacks."""
    problem = sharded_checkpoint_problem(Path(path))
    if problem is not None:
        return sharded_folder_error(path, problem)
    return sharded_checkpoint_refused(path, strategy)


def _ckpt_path_error(path: str, problem: str, in_config: bool) -> UsageError | ConfigError:
    """``ckpt_path`` refused where the user wrote it: a YAML key is a ConfigError at its key path; the argument
    of ``Trainer.fit``/``validate``/``test`` a UsageError, as every other refused Python argument."""
    if in_config:
        return ConfigError("ckpt_path", f"{path!r} {problem}")
    return UsageError(f"ckpt_path={path!r} {problem}")


def load_mapped(path: _PATH, weights_only: bool | None) -> dict[str, Any]:
    """A local checkpoint file, memory-mapped: its tensors are read when used (once, straight into the model)."""
    return cast(dict[str, Any], torch.load(path, map_location="cpu", mmap=True, weights_only=weights_only))


def every_rank_rng_states(world_size: int) -> list[dict[str, Any]]:
    """Every rank's ``rng_states()``, in rank order: a collective when the ranks run as a process group (every
    rank calls it, as Lightning's ``trainer.save_checkpoint`` is)."""
    states = rng_states()
    if world_size == 1 or not torch.distributed.is_initialized():
        return [states]
    gathered: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(gathered, states)
    return gathered


def restore_rank_rng_states(saved: Any, world_size: int, rank: int) -> None:
    """Set this rank's generators as ``saved`` (a checkpoint's ``RNG_KEY``, if any) holds them: rank 0's, with a
    warning, when the checkpoint was written by another number of ranks."""
    if saved is None:
        return
    if isinstance(saved, Mapping):  # written by cs_lightning 0.1.0: one state, for every rank
        restore_rng_states(saved)
        return
    if len(saved) != world_size:
        rank_zero_warn(
            f"the checkpoint holds the random generators of {len(saved)} rank(s) and this run has "
            f"{world_size}: every rank continues from rank 0's, so random draws (dropout) differ from "
            "the run that wrote it"
        )
    restore_rng_states(saved[rank] if len(saved) == world_size else saved[0])


def users_scheduler_states(checkpoint: Mapping[str, Any], callbacks: Iterable[Callback]) -> Any:
    """The scheduler states of ``checkpoint`` (its ``lr_schedulers``) that the schedulers the user configured
    resume from: none when one of ``callbacks`` is a StochasticWeightAveraging that restores its own.

    From its first epoch on, SWA trains with its SWALR in place of the user's scheduler (it allows one at most):
    the checkpoint's only state is then SWALR's, also kept in SWA's own entry of the checkpoint. Resuming, SWA
    drops the run's schedulers (``on_fit_start``) and loads SWALR's state itself when its epochs start again.
    SWA is the one Lightning callback that puts its scheduler in ``trainer.lr_scheduler_configs``, where a
    checkpoint saves it (the learning-rate finder puts the user's back before training); a checkpoint does not
    say which of its states a callback owns, so no general rule could tell.
    """
    entries = checkpoint.get("callbacks") or {}
    for callback in callbacks:
        if isinstance(callback, StochasticWeightAveraging):
            entry = entries.get(callback.state_key) or {}
            if entry.get("scheduler_state") is not None:  # what SWA tests before dropping the run's schedulers
                return []
    return checkpoint["lr_schedulers"]


def check_checkpoint_matches(module: nn.Module, shapes: Mapping[str, tuple[int, ...] | None], strict: bool) -> None:
    """Refuse a checkpoint of another model before anything is loaded or initialized, naming what differs:
    its names (only when ``strict``, as torch's ``load_state_dict``) and shapes. ``shapes``: the checkpoint's
    ``state_dict`` names, with each tensor's full shape (None for what is not a tensor: not compared)."""
    expected = model_shapes(module.state_dict())
    missing = sorted(expected.keys() - shapes.keys()) if strict else []
    unexpected = sorted(shapes.keys() - expected.keys()) if strict else []
    resized = [
        f"{name} (checkpoint {shapes[name]}, model {shape})"
        for name, shape in expected.items()
        if shapes.get(name) is not None and shape is not None and shapes[name] != shape
    ]
    found = {"missing keys": missing, "unexpected keys": unexpected, "size mismatch for": resized}
    problems = [f"{what} {listed(names)}" for what, names in found.items() if names]
    if not problems:
        return
    fix = "Load a checkpoint of this model"
    if missing or unexpected:
        leniency = {
            (True, False): "initialize the missing ones",
            (False, True): "ignore the unexpected ones",
            (True, True): "initialize the missing ones and ignore the unexpected ones",
        }[(bool(missing), bool(unexpected))]
        fix += f", or set `strict_loading = False` on the LightningModule to {leniency}"
    raise CheckpointMismatchError(
        f"Error(s) in loading state_dict for {type(module).__name__}: {'; '.join(problems)}. {fix}."
    )


def model_shapes(state_dict: Mapping[str, Any]) -> dict[str, tuple[int, ...] | None]:
    """Each entry's shape, None for what is not a tensor: what ``check_checkpoint_matches`` compares."""
    return {name: tuple(value.shape) if isinstance(value, torch.Tensor) else None for name, value in state_dict.items()}


def listed(items: list[str], most: int = 10) -> str:
    """The first ``most`` items, then how many more: another model's checkpoint can differ in hundreds."""
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")
