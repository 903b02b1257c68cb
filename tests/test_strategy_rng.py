"""Seeding and drawing around a recorded model under Lightning: the weights and the global generator
are those of the default strategy (eager construction), and what cannot be kept deferred says where."""

from __future__ import annotations

import warnings

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from lightning_models import data, trainer
from torch import nn

from cs_lightning.errors import DeferredInitWarning


class _SeedsInConfigureModel(LightningModule):
    """Seeds in ``configure_model``: first (nothing built yet) or between its two layers."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.net: nn.Module | None = None

    def configure_model(self) -> None:
        if self.net is not None:
            return
        if self.where == "first":
            seed_everything(1234, verbose=False)
        first = nn.Linear(6, 16)
        if self.where == "between":
            seed_everything(1234, verbose=False)  # SEED_BETWEEN_LINE
        self.net = nn.Sequential(first, nn.GELU(), nn.Linear(16, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _AtFitStart(Callback):
    """The weights and the global generator once the model is built (materialized, under csx)."""

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        tensors = pl_module.state_dict().values()  # csx_fsdp's are DTensors: gathered whole
        self.weights = [getattr(t, "full_tensor", t.detach)().detach().clone() for t in tensors]
        self.rng = torch.get_rng_state()


def _built(model: LightningModule, strategy: str) -> _AtFitStart:
    torch.manual_seed(0)  # not the seed configure_model sets
    seen = _AtFitStart()
    trainer(strategy, max_steps=0, accelerator="cpu", devices=1, callbacks=[seen]).fit(model, data())
    return seen


def _assert_same(a: _AtFitStart, b: _AtFitStart) -> None:
    assert len(a.weights) == len(b.weights) == 4
    assert all(torch.equal(x, y) for x, y in zip(a.weights, b.weights))
    assert torch.equal(a.rng, b.rng)


def _line_of(marker: str) -> int:
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if marker in line and "_line_of" not in line)


@pytest.mark.parametrize("strategy", ["csx", "csx_ddp", "csx_fsdp"])
def test_seeding_at_the_top_of_configure_model_is_honoured(strategy: str) -> None:
    """It was refused: the recording thought the seed came after draws it had deferred."""
    eager = _built(_SeedsInConfigureModel("first"), "auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)  # nothing is run eagerly
        csx = _built(_SeedsInConfigureModel("first"), strategy)
    _assert_same(eager, csx)
    seed_everything(1234, verbose=False)
    plain = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 1))
    assert all(torch.equal(x, y) for x, y in zip(csx.weights, plain.state_dict().values()))


def test_seeding_between_layers_builds_what_was_recorded_before_eagerly_and_names_the_users_line() -> None:
    """It stopped training, naming Lightning's seed.py and a fix for deferred_init users."""
    eager = _built(_SeedsInConfigureModel("between"), "auto")
    with pytest.warns(DeferredInitWarning) as caught:
        csx = _built(_SeedsInConfigureModel("between"), "csx")
    _assert_same(eager, csx)
    [warning] = [w for w in caught if issubclass(w.category, DeferredInitWarning)]
    message = str(warning.message)
    site = f"{__file__}:{_line_of('SEED_BETWEEN_LINE')}"
    assert (
        f"torch.manual_seed after random numbers were recorded in _SeedsInConfigureModel.configure_model ({site})"
        in message
    )
    assert "seed before trainer.fit" in message and "top of configure_model" in message
    assert (warning.filename, warning.lineno) == (__file__, _line_of("SEED_BETWEEN_LINE"))
