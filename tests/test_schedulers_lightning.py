"""Closed-form schedulers inside a real Lightning Trainer.fit (CPU, a tiny model)."""

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from cs_lightning.schedulers import CosineDecayLR, LinearLR, LinearWD, SequentialLR, lightning_config


class TinyModule(pl.LightningModule):
    """A linear regression whose LR and weight decay are scheduled per optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[tuple[float, float]] = []

    def training_step(self, batch, batch_idx):
        group = self.optimizers().param_groups[0]
        self.seen.append((group["lr"], group["weight_decay"]))
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1.0, weight_decay=0.0, foreach=True)
        lr = SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 0.01, 4), CosineDecayLR(optimizer, 0.01, 0.001, 8)], [4])
        wd = LinearWD(optimizer, 0.1, 0.0, 12)
        return [optimizer], [lightning_config(lr), lightning_config(wd)]


def _data() -> DataLoader:
    x = torch.randn(64, 4)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


def _fit(module: TinyModule, max_steps: int, ckpt_path=None) -> pl.Trainer:
    trainer = pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(module, _data(), ckpt_path=ckpt_path)
    return trainer


def test_fit_steps_schedules_every_optimizer_step_and_resumes_exactly(tmp_path):
    whole = TinyModule()
    trainer = _fit(whole, 12)
    lr, wd = (config.scheduler for config in trainer.lr_scheduler_configs)
    assert whole.seen == list(zip(lr.values(12)[:, 0].tolist(), wd.values(12)[:, 0].tolist()))
    assert lr.state_dict()["last_epoch"] == 12

    first = TinyModule()
    _fit(first, 6).save_checkpoint(tmp_path / "six.ckpt")
    resumed = TinyModule()
    _fit(resumed, 12, ckpt_path=tmp_path / "six.ckpt")
    assert first.seen + resumed.seen == whole.seen
