"""Tiny LightningModules, data and a fit helper shared by the strategy tests (and their subprocess scripts)."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cs_lightning.schedulers import CosineDecayLR


def mlp(norm: str = "layer") -> nn.Module:
    """Dropout, and a LayerNorm (no buffers) or a BatchNorm (running statistics): RNG use and norms exercised."""
    layer = nn.LayerNorm(16) if norm == "layer" else nn.BatchNorm1d(16)
    return nn.Sequential(nn.Linear(6, 16), layer, nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 1))


class Regressor(LightningModule):
    """An MLP regressor built in ``__init__`` (eager) or in ``configure_model`` (recorded under csx)."""

    def __init__(
        self, build_in: str = "init", scheduler: bool = False, optimizer: str = "adamw", norm: str = "layer"
    ) -> None:
        super().__init__()
        self.build_in, self.scheduler, self.optimizer_name, self.norm = build_in, scheduler, optimizer, norm
        self.net: nn.Module | None = mlp(norm) if build_in == "init" else None

    def configure_model(self) -> None:
        if self.net is None:
            self.net = mlp(self.norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        if self.optimizer_name == "sgd":
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        else:
            optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        if not self.scheduler:
            return optimizer
        schedule = CosineDecayLR(optimizer, initial_learning_rate=0.01, end_learning_rate=0.001, total_iters=40)
        return {"optimizer": optimizer, "lr_scheduler": schedule}


class SkipsFirst(Regressor):
    """Skips its first batch (``training_step`` returns None, as a warmup does: Lightning runs no backward).

    With ``reads``, the steps after it read the loss to the host, which the csx trace check refuses.
    """

    def __init__(self, reads: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reads = reads

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        loss = super().training_step(batch, batch_idx)
        if batch_idx == 0:
            return None
        if self.reads:
            self.log("read_loss", loss.item())
        return loss


def data(n: int = 64, batch_size: int = 8) -> DataLoader:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(n, 6, generator=generator)
    y = x.sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(n, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


class Losses(Callback):
    """Every training loss, as the step produced it (a test-only host read per step); none for a skipped batch."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if "loss" in outputs:  # a batch whose training_step returned None was skipped: Lightning hands {}
            self.values.append(outputs["loss"].detach().clone())


def trainer(strategy: Any = "auto", **kwargs: Any) -> Trainer:
    settings: dict[str, Any] = dict(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    settings.update(kwargs)
    return Trainer(strategy=strategy, **settings)


def fit(
    model: LightningModule, strategy: Any = "auto", steps: int = 20, ckpt_path: str | None = None, **kwargs: Any
) -> tuple[Trainer, Losses]:
    """Train ``steps`` steps on :func:`data`; ``kwargs`` go to the Trainer."""
    losses = Losses()
    run = trainer(strategy, max_steps=steps, callbacks=[losses, *kwargs.pop("callbacks", [])], **kwargs)
    run.fit(model, data(), ckpt_path=ckpt_path)
    return run, losses
