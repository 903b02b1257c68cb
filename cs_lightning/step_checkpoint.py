"""Checkpoints every N steps and at the last one, as a Cerebras run's checkpoint steps are taken."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

from cs_lightning.errors import UsageError

__all__ = ["StepCheckpoint"]


class StepCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` that also saves when training ends, if the last step was not saved.

    A Cerebras run with ``checkpoint_steps: N`` saves every N steps and the final step; ``ModelCheckpoint(
    every_n_train_steps=N)`` saves only the multiples of N, so a run of ``max_steps`` that is not one would
    lose its last steps. ``cs-lightning convert`` writes this callback for Model Zoo's checkpoint steps.
    It takes ``ModelCheckpoint``'s arguments but ``monitor``: the last step has no score of its own to rank it by
    (ranked with the last validation's, it could push out a checkpoint that was validated).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.monitor is not None:
            raise UsageError(
                f"StepCheckpoint(monitor={self.monitor!r}): it saves by steps, as Model Zoo's checkpoint steps do;"
                " for checkpoints ranked by a metric use ModelCheckpoint(monitor=...), beside it or instead"
            )

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if 0 <= trainer.max_steps <= trainer.global_step:
            # the run's last step, after its validation if one runs there, saved where it stands: in its epoch,
            # mid-epoch if so (once training ends, Lightning counts the epoch done: the name and a resume would
            # say the next)
            self._save_this_step(trainer)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save_this_step(trainer)  # training ended otherwise: max_epochs, a time limit, a stop
        super().on_train_end(trainer, pl_module)

    def _save_this_step(self, trainer: pl.Trainer) -> None:
        # skipped, as ModelCheckpoint skips any save, when this step is saved already (a multiple of N), in
        # fast_dev_run, and outside fit
        if not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
