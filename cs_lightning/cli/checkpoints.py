"""`ckpt_path` checked before anything is built or written: a Lightning checkpoint file or a
sharded checkpoint folder, read no further than its index."""

from __future__ import annotations

import pickletools
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy, ModelParallelStrategy, StrategyRegistry

from cs_lightning.errors import ConfigError
from cs_lightning.strategies.checkpoints import (
    SHARDED_FOLDER_FIX,
    SHARDED_REST,
    load_mapped,
    sharded_checkpoint_problem,
    sharded_checkpoint_refused,
    sharded_folder_error,
)
from cs_lightning.user_code import import_dotted, imported_or_none

# ckpt_path values Lightning resolves itself, not file paths.
_LIGHTNING_CHECKPOINTS = ("best", "last", "hpc")


def check_ckpt_path(value: str, trainer: Mapping[str, Any]) -> None:
    """Refuse a `ckpt_path` that is no Lightning checkpoint, before anything is built or written.

    A file is read as far as the archive's index and its small pickle of names (torch.save
    writes a zip archive whose tensors are separate members), never the tensors: cheap for any
    size. A folder must be a sharded checkpoint (csx_fsdp's default): the same reading of its
    `meta.pt`, the shards' index and shards next to it, and a ``trainer.strategy`` that reads one.
    Lightning's names (`best`, `hpc`) must name a checkpoint a fresh Trainer can find.
    """
    if value in _LIGHTNING_CHECKPOINTS:
        _check_lightning_name(value, trainer.get("default_root_dir") or ".")
        return
    if value.startswith("registry") or "://" in value:
        return
    strategy = trainer.get("strategy")
    fix = SHARDED_FOLDER_FIX  # files and folders alike
    path = Path(value)
    chosen = _strategy_class(strategy)
    if path.is_dir() and chosen is not None and issubclass(chosen, DeepSpeedStrategy):
        return  # DeepSpeed's checkpoints are folders of its own making, which it judges itself
    if path.is_dir():
        if (path / SHARDED_REST).is_file():
            _pickled_names(path / SHARDED_REST, fix)  # the rest of the state must be readable too
        problem = sharded_checkpoint_problem(path)
        if problem is not None:
            raise sharded_folder_error(value, problem, in_config=True)
        if not _reads_sharded(strategy):
            raise sharded_checkpoint_refused(value, _strategy_name(strategy), in_config=True)
        return
    if not path.is_file():
        raise ConfigError("ckpt_path", f"{value!r} does not exist; {fix}")
    if "state_dict" not in _pickled_names(path, fix):
        raise ConfigError("ckpt_path", f"{value!r} is not a Lightning checkpoint (it has no 'state_dict'); {fix}")


def _check_lightning_name(value: str, root: str) -> None:
    """Lightning raises, as a run starts, for `best` and `hpc` with nothing to find; `last` it allows
    without a checkpoint (the first run of a job resubmitted with the same command), and so do we."""
    if value == "best":
        raise ConfigError(
            "ckpt_path",
            "'best' is the best checkpoint of an earlier fit by the same Trainer, and each cs-lightning run makes "
            "a new Trainer, which has none; fix: give that checkpoint's file (under the earlier run's "
            "checkpoints folder), or leave ckpt_path out",
        )
    if value == "hpc" and "://" not in root and not any(Path(root).glob("hpc_ckpt_*.ckpt")):
        raise ConfigError(
            "ckpt_path",
            f"'hpc' resumes the newest hpc_ckpt_N.ckpt that Lightning saved in trainer.default_root_dir when SLURM "
            f"requeued the job, and {root!r} holds none; fix: give a checkpoint's path, or leave ckpt_path out",
        )


def _strategy_name(strategy: Any) -> str:
    """How the config names its strategy: "csx_fsdp", a class path, or the object's class."""
    if strategy is None or isinstance(strategy, str):
        return str(strategy or "auto")
    return str(getattr(strategy, "class_path", None) or type(strategy).__name__)


def _strategy_class(strategy: Any) -> type | None:
    """The class the config's strategy names; None for auto, or one that cannot be resolved here."""
    if strategy is None or strategy == "auto":
        return None
    if isinstance(strategy, str):
        chosen = StrategyRegistry[strategy]["strategy"] if strategy in StrategyRegistry else None
    elif getattr(strategy, "class_path", None):
        chosen = imported_or_none(strategy.class_path)
    else:
        chosen = type(strategy)
    return chosen if isinstance(chosen, type) else None


def _reads_sharded(strategy: Any) -> bool:
    """Whether the strategy loads torch.distributed.checkpoint folders: Lightning's FSDPStrategy and
    ModelParallelStrategy and their subclasses (csx_fsdp among them) do; csx, csx_ddp, DDP and auto
    read files only. A strategy named but not resolved here is left for Lightning to judge."""
    if strategy is None or strategy == "auto":
        return False
    chosen = _strategy_class(strategy)
    return chosen is None or issubclass(chosen, (FSDPStrategy, ModelParallelStrategy))


def _pickled_names(path: Path, fix: str) -> set[str]:
    """The strings in the pickle of a torch.save archive (its keys, among others), tensors unread."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [name for name in archive.namelist() if name.endswith("data.pkl")]
            if not pickles:
                return set()
            return {arg for _, arg, _ in pickletools.genops(archive.read(pickles[0])) if isinstance(arg, str)}
    except (zipfile.BadZipFile, ValueError, EOFError):  # not a zip, cut short, or a damaged pickle
        raise ConfigError(
            "ckpt_path",
            f"{str(path)!r} is not a checkpoint, or is cut short: it is not the zip archive torch.save writes; {fix}",
        ) from None


def saved_hyperparameters(path: Path) -> dict[str, Any]:
    """The hyperparameters a checkpoint file holds. The file is memory-mapped, so none of its
    tensors is read (LightningCLI's own reading loads them all: seconds and gigabytes for a big model)."""
    saved = load_mapped(path, True).get("hyper_parameters")
    return dict(saved) if isinstance(saved, Mapping) else {}


def check_model_class(value: str, hyperparameters: Mapping[str, Any], configured: str) -> None:
    """Refuse a checkpoint (``value`` as given) that another LightningModule class wrote: LightningCLI
    would build the class in its ``hyperparameters`` in place of the configured one, so the run would
    silently train a model the config does not name.

    The same class reached by another import path (a re-export) is the configured model: accepted.
    A checkpoint without a saved class (not written through a LightningCLI) has nothing to compare.
    """
    written_by = hyperparameters.get("_class_path")
    if written_by is None or written_by == configured or imported_or_none(written_by) is import_dotted(configured):
        return
    raise ConfigError(
        "ckpt_path",
        f"{value!r} was written by model {written_by}, but the config's model is {configured}; fix: set "
        f"model.class_path to {written_by} to resume that model, or leave ckpt_path out to start {configured} "
        "from its own initial weights",
    )
