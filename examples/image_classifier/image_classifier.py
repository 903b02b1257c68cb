"""A small CNN that reads 8x8 handwritten digits, with torchmetrics accuracy.

The data ship with the example (``digits.csv.gz``, 1,797 images; see README.md), so
nothing is downloaded. The optimizer and schedule come from the YAML file.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics.classification import MulticlassAccuracy

from cs_lightning import ResumableDataLoader

DIGITS = Path(__file__).with_name("digits.csv.gz")


def load_digits(path: Path = DIGITS) -> TensorDataset:
    """(images, labels): images (N, 1, 8, 8) scaled to [0, 1], labels (N,) in 0..9."""
    with gzip.open(path, "rt") as handle:
        rows = [[int(v) for v in row] for row in csv.reader(handle)]
    data = torch.tensor(rows)
    images = data[:, :64].float().div(16.0).reshape(-1, 1, 8, 8)
    return TensorDataset(images, data[:, 64])


class DigitsData(L.LightningDataModule):
    """The shipped digits, split once into train and validation by a fixed seed."""

    def __init__(self, batch_size: int = 64, val_fraction: float = 0.15, split_seed: int = 0) -> None:
        super().__init__()
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got val_fraction={val_fraction}")
        self.batch_size, self.val_fraction, self.split_seed = batch_size, val_fraction, split_seed

    def setup(self, stage: str) -> None:
        full = load_digits()
        n_val = round(len(full) * self.val_fraction)
        generator = torch.Generator().manual_seed(self.split_seed)
        self.train_set, self.val_set = random_split(full, [len(full) - n_val, n_val], generator=generator)

    def train_dataloader(self) -> ResumableDataLoader:
        # resumable: a run resumed from a checkpoint taken inside an epoch goes on at the exact batch
        return ResumableDataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class DigitClassifier(L.LightningModule):
    """Two 3x3 convolutions, a pooling and a linear read-out: about 10k parameters."""

    def __init__(self, channels: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(2 * channels * 4 * 4, num_classes),
        )
        # validate_args=False: no host-side value checks inside the step.
        self.val_acc = MulticlassAccuracy(num_classes=num_classes, validate_args=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self(images)
        self.val_acc(logits, labels)
        self.log("val_loss", F.cross_entropy(logits, labels), prog_bar=True)
        self.log("val_acc", self.val_acc, prog_bar=True)
