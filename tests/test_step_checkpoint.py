"""StepCheckpoint saves every N steps and the last step, as a Model Zoo run's checkpoint steps do."""

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import cs_lightning


class _Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(folder: Path, strategy: str, max_steps: int, ckpt_path: str | None = None) -> pl.Trainer:
    trainer = pl.Trainer(
        strategy=strategy, accelerator="cpu", max_steps=max_steps, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=folder,
        callbacks=[cs_lightning.StepCheckpoint(dirpath=folder, every_n_train_steps=4, save_top_k=-1)],
    )  # fmt: skip
    data = DataLoader(TensorDataset(torch.randn(12, 4, generator=torch.Generator().manual_seed(0))), batch_size=2)
    trainer.fit(_Regressor(), data, ckpt_path=ckpt_path)
    return trainer


def _steps(folder: Path) -> list[int]:
    return sorted(torch.load(path, weights_only=True)["global_step"] for path in folder.glob("*.ckpt"))


@pytest.mark.parametrize("strategy", ["auto", "csx"])
def test_the_last_step_is_saved_when_it_is_no_multiple_of_the_steps(tmp_path: Path, strategy: str) -> None:
    trainer = _fit(tmp_path, strategy, max_steps=10)
    assert _steps(tmp_path) == [4, 8, 10]  # ModelCheckpoint(every_n_train_steps=4) saves 4 and 8 only
    assert torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)["global_step"] == 10


def test_the_last_step_is_saved_in_its_epoch_as_a_step_checkpoint(tmp_path: Path) -> None:
    """6 batches an epoch: step 10 is the 4th batch of epoch 1. Saved once training ended, it was named and
    restored as epoch 2 (Lightning counts the epoch done by then): a resume skipped the rest of epoch 1."""
    _fit(tmp_path, "auto", max_steps=10)
    names = sorted(path.name for path in tmp_path.glob("*.ckpt"))
    assert names == ["epoch=0-step=4.ckpt", "epoch=1-step=10.ckpt", "epoch=1-step=8.ckpt"]
    saved = torch.load(tmp_path / "epoch=1-step=10.ckpt", weights_only=True)
    loop = saved["loops"]["fit_loop"]
    assert saved["epoch"] == 1 and loop["epoch_progress"]["current"]["completed"] == 1  # epoch 1 still running
    assert loop["epoch_loop.batch_progress"]["current"]["processed"] == 4  # its 4th batch


def test_a_last_step_saved_already_is_not_saved_twice(tmp_path: Path) -> None:
    _fit(tmp_path, "auto", max_steps=8)
    assert _steps(tmp_path) == [4, 8]
    _fit(tmp_path, "auto", max_steps=8, ckpt_path=str(next(tmp_path.glob("*step=8.ckpt"))))  # nothing left to train
    assert _steps(tmp_path) == [4, 8]
    _fit(tmp_path, "auto", max_steps=10, ckpt_path=str(next(tmp_path.glob("*step=8.ckpt"))))
    assert _steps(tmp_path) == [4, 8, 10]


def test_a_monitor_is_refused_naming_model_checkpoint() -> None:
    """Ranked with the last validation's score, the last step pushed a validated checkpoint out of the top k
    (and with save_top_k=1 was not saved at all)."""
    with pytest.raises(
        ValueError, match=r"^StepCheckpoint\(monitor='val_loss'\): it saves by steps, .*ModelCheckpoint"
    ):
        cs_lightning.StepCheckpoint(monitor="val_loss", every_n_train_steps=4)


class _Validated(_Regressor):
    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("v", float(self.global_step))


def test_the_last_step_is_saved_after_its_validation(tmp_path: Path) -> None:
    """Validation every 2 steps runs at step 10 too: the last checkpoint has its metrics, as ModelCheckpoint's."""
    data = DataLoader(TensorDataset(torch.randn(12, 4, generator=torch.Generator().manual_seed(0))), batch_size=2)
    checkpoints = cs_lightning.StepCheckpoint(
        dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1, filename="{epoch}-{step}-{v:.0f}"
    )
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=10, val_check_interval=2, num_sanity_val_steps=0, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path, callbacks=[checkpoints],
    )  # fmt: skip
    trainer.fit(_Validated(), data, data)
    assert "epoch=1-step=10-v=10.ckpt" in {path.name for path in tmp_path.glob("*.ckpt")}
