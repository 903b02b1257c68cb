"""Closed-form schedulers inside a real Lightning Trainer.fit (CPU, a tiny model)."""

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cs_lightning.errors import CheckpointSchedulersError
from cs_lightning.schedulers import (
    CosineDecayLR,
    EpochSteppingWarning,
    LinearLR,
    LinearWD,
    OneCycleLR,
    SequentialLR,
    lightning_config,
)


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


def _fit(module: pl.LightningModule, max_steps: int, ckpt_path=None, strategy: str = "auto") -> pl.Trainer:
    trainer = pl.Trainer(
        strategy=strategy,
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


class _Scheduled(pl.LightningModule):
    """A linear regression whose one scheduler, stepped per optimizer step, ``make`` builds."""

    def __init__(self, make) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.make = make
        self.seen: list[float] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(self.optimizers().param_groups[0]["lr"])
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.make(optimizer), "interval": "step"}}


class BareSchedulerModule(TinyModule):
    """Returns its scheduler without a config, which Lightning's own strategies step once per epoch."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        return [optimizer], [LinearLR(optimizer, 0.0, 0.01, 16)]


def test_a_scheduler_stepped_once_per_epoch_is_warned_of_once():
    """16 batches an epoch: the schedule would run 16 times slower than written, silently."""
    with pytest.warns(
        EpochSteppingWarning, match=r"^LinearLR\.step\(\) came after 16 optimizer steps, .*16 times"
    ) as seen:
        _fit(BareSchedulerModule(), 48)
    assert sum(issubclass(w.category, EpochSteppingWarning) for w in seen) == 1  # not once per epoch


def test_a_scheduler_stepped_every_optimizer_step_is_not_warned_of(recwarn):
    _fit(TinyModule(), 20)  # past an epoch's end
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedule = LinearLR(optimizer, 0.0, 0.01, 16)
    for _ in range(3):
        optimizer.step()
        schedule.step()
    schedule.step()  # no optimizer step in between: a jump ahead, not a slower schedule
    assert not [w for w in recwarn if issubclass(w.category, EpochSteppingWarning)]


class EpochIntervalModule(TinyModule):
    """Asks, in its config, for its scheduler to be stepped each epoch."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": LinearLR(optimizer, 0.0, 0.01, 4), "interval": "epoch"},
        }


class SteppedModule(TinyModule):
    lr = 1.0  # what the LR finder sets

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        return {"optimizer": optimizer, "lr_scheduler": lightning_config(LinearLR(optimizer, 0.1, 0.01, 100))}


@pytest.mark.parametrize(
    ("module", "strategy", "callbacks"),
    [
        (EpochIntervalModule, "csx", []),  # csx steps a bare one every step: an epoch interval is asked for
        (SteppedModule, "auto", [pl.callbacks.LearningRateFinder(num_training_steps=20)]),  # its trial is undone
    ],
    ids=["an epoch interval under csx", "an LR finder's trial"],
)
def test_optimizer_steps_a_schedule_is_not_due_are_not_warned_of(module, strategy, callbacks, recwarn):
    trainer = pl.Trainer(
        strategy=strategy,
        max_steps=40,
        accelerator="cpu",
        callbacks=callbacks,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(module(), _data())
    assert not [w for w in recwarn if issubclass(w.category, EpochSteppingWarning)]


def test_a_scheduler_pickled_by_an_earlier_release_counts_updates():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedule = LinearLR(optimizer, 0.0, 0.01, 16)
    state = schedule.__getstate__()
    del state["_updates"], state["_warned_of_skipped_updates"]  # what such a pickle holds
    restored = LinearLR.__new__(LinearLR)
    restored.__setstate__(state)
    optimizer.step()
    optimizer.step()
    with pytest.warns(EpochSteppingWarning, match="after 2 optimizer steps"):
        restored.step()


def _csx_fit(module: pl.LightningModule, max_steps: int, ckpt_path=None) -> pl.Trainer:
    return _fit(module, max_steps, ckpt_path, strategy="csx")


FIX = "fix: resume with the schedulers it was trained with, or start a new run from its weights (without ckpt_path)"


@pytest.mark.parametrize(
    ("saved", "resumed", "found"),
    [
        (
            lambda o: LinearLR(o, 0.1, 0.0, 10),
            lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5),
            "schedulers[0] is LinearLR in the checkpoint but torch's StepLR in this run",
        ),
        (
            lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5),
            lambda o: LinearLR(o, 0.1, 0.0, 10),
            "schedulers[0] is a torch scheduler in the checkpoint but LinearLR in this run",
        ),
        (
            lambda o: LinearLR(o, 0.1, 0.0, 10),
            lambda o: CosineDecayLR(o, 0.1, 0.0, 10),
            "schedulers[0] is LinearLR in the checkpoint but CosineDecayLR in this run",
        ),
    ],
    ids=["catalogue_into_torch", "torch_into_catalogue", "catalogue_into_catalogue"],
)
def test_resuming_a_python_run_with_another_scheduler_class_is_refused_naming_both(saved, resumed, found, tmp_path):
    """Under csx a torch scheduler is driven by a closed form, whose step would follow any loaded state:
    without this check LinearLR's state gave StepLR's run 0.05, 0.05, 0.025 (torch alone: 0.06, 0.06, 0.03)."""
    _csx_fit(_Scheduled(saved), 4).save_checkpoint(tmp_path / "four.ckpt")
    module = _Scheduled(resumed)
    with pytest.raises(CheckpointSchedulersError) as raised:
        _csx_fit(module, 7, ckpt_path=tmp_path / "four.ckpt")
    assert str(raised.value) == f"ckpt_path: {str(tmp_path / 'four.ckpt')!r}: {found}; {FIX}"
    assert module.seen == []  # refused before any step


class OneCycleModule(TinyModule):
    """cerebras.pytorch's linear three-phase OneCycle: below 0 at step total_steps (8), past its end."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = OneCycleLR(optimizer, 0.004, 0.1, total_steps=8, three_phase=True, anneal_strategy="linear")
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


@pytest.mark.parametrize("strategy", ["auto", "csx"])
def test_a_run_of_total_steps_ends_and_a_longer_one_is_refused_its_negative_update(strategy: str) -> None:
    """Lightning steps the schedulers after the last update too, writing step 8's negative value: a
    run of 8 steps never uses it and ends; a run of 9 would, and is refused before that update (under csx
    before step 0, from max_steps, as a CS-X compiles the schedule with the run)."""
    assert _fit(OneCycleModule(), 8, strategy=strategy).global_step == 8
    module = OneCycleModule()
    with pytest.raises(ValueError, match=r"^OneCycleLR: step 8 gives lr=-0\.000951"):
        _fit(module, 9, strategy=strategy)
    assert module.trainer.global_step == (8 if strategy == "auto" else 0)
    assert all(lr >= 0 for lr, _ in module.seen)
