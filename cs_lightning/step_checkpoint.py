"""Checkpoints every N steps and at the last one, as a Cerebras run's checkpoint steps are taken."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

__all__ = ["StepCheckpoint"]


class StepCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` that also saves when training ends, if the last step was not saved.

    A Cerebras run with ``checkpoint_steps: N`` saves every N steps and the final step; ``ModelCheckpoint(
    every_n_train_steps=N)`` saves only the multiples of N, so a run of ``max_steps`` that is not one would
    lose its last steps. ``cs-lightning convert`` writes this callback for Model Zoo's checkpoint steps.
    It takes ``ModelCheckpoint``'s arguments.
    """

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # skipped, as ModelCheckpoint skips any save, when this step is saved already (a multiple of N), in
        # fast_dev_run, and outside fit
        if not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
        super().on_train_end(trainer, pl_module)
