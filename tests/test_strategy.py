"""CSXStrategy on one system: lazy model, lazy factories, precision, logging, time to first loss."""

import importlib
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning_models import Regressor, SkipsFirst, data, fit, mlp, trainer

from cs_lightning import CSXDDPStrategy, CSXFSDPStrategy, CSXStrategy, GraphBreakError, TimeToFirstLoss
from cs_lightning.deferred import is_deferred
from cs_lightning.errors import CheckpointMismatchError, DeferredInitWarning, UsageError
from cs_lightning.schedulers import CosineDecayLR, CosineDecayWD, LinearLR, OneCycleLR, lightning_config
from cs_lightning.strategies.checkpoints import sharded_checkpoint_problem


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_model_built_in_configure_model_trains_bit_identically_to_eager_default(norm: str) -> None:
    torch.manual_seed(0)
    eager_model = Regressor(build_in="init", norm=norm)
    _, eager = fit(eager_model, "auto", steps=20)
    torch.manual_seed(0)
    csx_model = Regressor(build_in="configure_model", norm=norm)
    run, csx = fit(csx_model, "csx", steps=20)
    assert len(eager.values) == 20
    assert _equal(eager.values, csx.values)
    assert _equal(list(eager_model.state_dict().values()), list(csx_model.state_dict().values()))  # with BN stats
    assert isinstance(run.strategy, CSXStrategy)


def test_model_built_in_init_trains_unchanged_under_csx() -> None:
    torch.manual_seed(0)
    eager_model = Regressor()
    _, eager = fit(eager_model, "auto", steps=10)
    torch.manual_seed(0)
    csx_model = Regressor()
    _, csx = fit(csx_model, "csx", steps=10)
    assert _equal(eager.values, csx.values)
    assert _equal(list(eager_model.parameters()), list(csx_model.parameters()))


def test_a_model_skipping_its_first_step_trains_bit_identically_to_the_default() -> None:
    """The step after the skipped one runs under the trace check (the skipped one was no verdict): no number changes."""
    torch.manual_seed(0)
    eager_model = SkipsFirst(build_in="configure_model")
    _, eager = fit(eager_model, "auto", steps=8)
    torch.manual_seed(0)
    csx_model = SkipsFirst(build_in="configure_model")
    _, csx = fit(csx_model, "csx", steps=8)
    assert len(eager.values) == 7
    assert _equal(eager.values, csx.values)
    assert _equal(list(eager_model.state_dict().values()), list(csx_model.state_dict().values()))


def test_optimizers_are_built_after_materialization() -> None:
    seen = []

    class Checks(Regressor):
        def configure_optimizers(self):
            seen.append(is_deferred(self))
            return super().configure_optimizers()

    fit(Checks(build_in="configure_model"), "csx", steps=1)
    assert seen == [False]


class _HoldsItsOwnParameters(Regressor):
    """Takes its parameters where it builds its layers: an optimizer (``optimizer``) or a dict of groups
    (``groups``) that ``configure_optimizers`` builds the optimizer from. Under csx, both are taken while the
    model is recorded, before materialize puts the real parameters in place."""

    def __init__(self, holds: str, **kwargs: Any) -> None:
        self.holds = holds
        super().__init__(**kwargs)

    def configure_model(self) -> None:
        if self.net is not None:
            return
        self.net = mlp()
        weights = [p for p in self.net.parameters() if p.ndim == 2]
        self.groups = {"decay": weights, "no_decay": tuple(p for p in self.net.parameters() if p.ndim < 2)}
        if self.holds != "groups":  # LBFGS keeps its group's list; Adagrad makes state per parameter
            self.optimizer = getattr(torch.optim, self.holds)(self.net.parameters(), lr=0.05)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.holds != "groups":
            return self.optimizer
        return torch.optim.AdamW([{"params": self.groups["decay"]}, {"params": self.groups["no_decay"]}], lr=0.01)


@pytest.mark.parametrize("holds", ["SGD", "LBFGS", "Adagrad", "groups"])
def test_what_configure_model_took_of_the_parameters_trains_the_real_ones(holds: str, tmp_path: Path) -> None:
    """They held the recorded tensors materialize replaced: the optimizer skipped them (no gradients), the
    weights stayed as initialized, silently. Adagrad's state, made with it, was keyed by them: a checkpoint
    could not be saved."""
    torch.manual_seed(0)
    eager_model = _HoldsItsOwnParameters(holds, build_in="configure_model")
    _, eager = fit(eager_model, "auto", steps=10)
    torch.manual_seed(0)
    csx_model = _HoldsItsOwnParameters(holds, build_in="configure_model")
    run, csx = fit(csx_model, "csx", steps=10)
    assert _equal(eager.values, csx.values)
    assert _equal(list(eager_model.state_dict().values()), list(csx_model.state_dict().values()))
    optimizer = run.optimizers[0]
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in held} == {id(p) for p in csx_model.parameters()} >= {id(p) for p in optimizer.state}
    run.save_checkpoint(tmp_path / "saved.ckpt")
    saved = torch.load(tmp_path / "saved.ckpt", weights_only=True)["optimizer_states"][0]["state"]
    assert len(saved) == len(optimizer.state) == {"SGD": 0, "LBFGS": 1}.get(holds, len(held))


def test_csx_ddp_points_an_optimizer_taken_in_configure_model_at_the_real_parameters() -> None:
    torch.manual_seed(0)
    eager_model = _HoldsItsOwnParameters("SGD", build_in="configure_model")
    _, eager = fit(eager_model, "ddp", steps=5, devices=1, accelerator="cpu")  # ddp reseeds as csx_ddp does
    torch.manual_seed(0)
    csx_model = _HoldsItsOwnParameters("SGD", build_in="configure_model")
    _, csx = fit(csx_model, "csx_ddp", steps=5, devices=1, accelerator="cpu")
    assert _equal(eager.values, csx.values)
    assert _equal(list(eager_model.state_dict().values()), list(csx_model.state_dict().values()))


def test_csx_fsdp_refuses_an_optimizer_holding_the_recorded_parameters() -> None:
    """It shards the model as it materializes it: the recorded tensors have no one real tensor to stand for."""
    run = trainer("csx_fsdp", devices=1, accelerator="cpu", max_steps=1)
    with pytest.raises(
        UsageError, match=r"^SGD\.param_groups\[0\]\['params'\]\[0\] holds the model's parameters as they were recorded"
    ):
        run.fit(_HoldsItsOwnParameters("SGD", build_in="configure_model"), data())
    assert run.global_step == 0


class _Snapshot(Callback):
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.weights = [p.detach().clone() for p in pl_module.parameters()]
        self.rng = torch.get_rng_state()


def _materialized(init_mode: str, draws_in_between: int) -> list[torch.Tensor]:
    """Weights of a model recorded under ``trainer.init_module()``, as materialized by ``fit``."""
    torch.manual_seed(0)
    run = trainer(CSXStrategy(init_mode=init_mode), max_steps=0)
    with run.init_module():
        model = Regressor()
    assert is_deferred(model)
    torch.rand(draws_in_between)
    snapshot = _Snapshot()
    run.callbacks.append(snapshot)
    run.fit(model, data())
    return snapshot.weights


def test_init_module_records_and_the_init_mode_is_honoured() -> None:
    assert _equal(_materialized("independent", 0), _materialized("independent", 5))
    # exact: the generator jumped past the recorded draws as the block ended, so draws made
    # before fit change nothing (they changed the weights before)
    assert _equal(_materialized("exact", 0), _materialized("exact", 5))
    assert not _equal(_materialized("exact", 0), _materialized("independent", 0))


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16-true", torch.bfloat16), ("bf16-mixed", torch.float32), ("32-true", torch.float32)]
)
def test_precision_sets_the_materialized_dtype(precision: str, dtype: torch.dtype) -> None:
    model = Regressor(build_in="configure_model")
    run, losses = fit(model, "csx", steps=3, precision=precision)
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert all(torch.isfinite(loss) for loss in losses.values)
    if precision == "bf16-mixed":
        assert losses.values[0].dtype == torch.float32 and run.precision_plugin.device == "cpu"


def test_bf16_true_matches_lightning_default_bf16_true() -> None:
    torch.manual_seed(0)
    eager_model = Regressor(build_in="configure_model")
    _, eager = fit(eager_model, "auto", steps=5, precision="bf16-true")
    torch.manual_seed(0)
    csx_model = Regressor(build_in="configure_model")
    _, csx = fit(csx_model, "csx", steps=5, precision="bf16-true")
    assert _equal(eager.values, csx.values)


def test_bare_closed_form_scheduler_steps_every_optimizer_step(caplog: pytest.LogCaptureFixture) -> None:
    model = Regressor(scheduler=True)
    with caplog.at_level(logging.INFO):
        run, _ = fit(model, "csx", steps=10)
    said = [r.getMessage() for r in caplog.records if "without a scheduler config" in r.getMessage()]
    assert len(said) == 1 and "steps every optimizer step" in said[0] and '"interval": "epoch"' in said[0]
    config = run.lr_scheduler_configs[0]
    assert config.interval == "step"
    expected = config.scheduler.values([10])[0, 0].item()
    assert run.optimizers[0].param_groups[0]["lr"] == pytest.approx(expected, rel=1e-6)
    auto, _ = fit(Regressor(scheduler=True), "auto", steps=10)
    assert auto.lr_scheduler_configs[0].interval == "epoch"  # Lightning's default, outside csx


class _GoesNegative(Regressor):
    """A linear OneCycleLR keeps its last phase going past total_steps - 1: below 0 from step 4 on."""

    def __init__(self, frequency: int = 1) -> None:
        super().__init__()
        self.frequency = frequency

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        cycle = OneCycleLR(optimizer, initial_learning_rate=0.01, max_lr=0.1, total_steps=4, anneal_strategy="linear")
        schedule = {"scheduler": cycle, "interval": "step", "frequency": self.frequency}
        return {"optimizer": optimizer, "lr_scheduler": schedule}


def test_a_schedule_stepped_every_other_batch_is_not_checked_from_max_steps() -> None:
    """Lightning counts a frequency in each epoch's batches: 3 batches an epoch and 9 steps take the schedule to
    step 3 only (as under auto), where a count from max_steps says step 4."""
    run = trainer("csx", max_steps=9, limit_train_batches=3)
    run.fit(_GoesNegative(frequency=2), data())
    assert run.global_step == 9 and run.lr_scheduler_configs[0].scheduler.last_epoch == 3


@pytest.mark.parametrize(("steps", "refused"), [(4, False), (5, True)])
def test_a_schedule_an_update_would_refuse_within_max_steps_is_refused_before_step_0(steps: int, refused: bool) -> None:
    """Negative from step 4: the 5th update would use it, the 4th run ends before."""
    model = _GoesNegative()
    if not refused:
        assert fit(model, "csx", steps=steps)[0].global_step == steps
        return
    run = trainer("csx", max_steps=steps)
    with pytest.raises(UsageError, match=r"^OneCycleLR: step 4 gives lr=-0.0357129"):
        run.fit(model, data())
    assert run.global_step == 0


@pytest.mark.parametrize(("batches", "refused"), [(4, False), (8, True)])
def test_a_run_in_epochs_has_its_schedule_checked_on_the_steps_its_data_gives(batches: int, refused: bool) -> None:
    """max_epochs=1 over 8 batches is 8 steps: the 5th update would use a negative rate, refused before step 0;
    4 batches an epoch end before it."""
    run = trainer("csx", max_epochs=1, limit_train_batches=batches)
    if not refused:
        run.fit(_GoesNegative(), data())
        assert run.global_step == 4
        return
    with pytest.raises(UsageError, match=r"^OneCycleLR: step 4 gives lr=-0.0357129"):
        run.fit(_GoesNegative(), data())
    assert run.global_step == 0


class _Unsized(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(data().dataset)


def test_a_run_in_epochs_over_data_of_unknown_length_is_not_checked_and_trains() -> None:
    """Lightning's estimate is then max_steps, -1: nothing to check before step 0."""
    run = trainer("csx", max_epochs=1)
    run.fit(_TwoSchedules(second_weight_decay=True), torch.utils.data.DataLoader(_Unsized(), batch_size=8))
    assert run.global_step == 8


class _TwoSchedules(Regressor):
    def __init__(self, second_weight_decay: bool) -> None:
        super().__init__()
        self.second_weight_decay = second_weight_decay

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.1, weight_decay=0.01)
        warmup = LinearLR(optimizer, initial_learning_rate=0.0, end_learning_rate=0.1, total_iters=4)
        second = (CosineDecayWD if self.second_weight_decay else CosineDecayLR)(optimizer, 0.1, 0.0, 8)
        return [optimizer], [lightning_config(warmup), lightning_config(second)]


def test_two_closed_form_schedules_of_one_rate_are_refused_before_step_0() -> None:
    """Each writes the group's lr every step, so the later would apply alone: refused, as the CLI does."""
    run = trainer("csx", max_steps=3)
    with pytest.raises(
        UsageError,
        match=r"^configure_optimizers: scheduler 1 \(CosineDecayLR\) sets 'lr' of param group 0"
        r" \(untagged\), as scheduler 0 \(LinearLR\) does, so only the later would apply; fix: ",
    ):
        run.fit(_TwoSchedules(second_weight_decay=False), data())
    assert run.global_step == 0
    assert fit(_TwoSchedules(second_weight_decay=True), "csx", steps=3)[0].global_step == 3  # lr and weight decay


class _StepsOneScheduleItself(_TwoSchedules):
    """Manual optimization: the warmup for 4 steps, then the decay; never both in one step."""

    def __init__(self) -> None:
        super().__init__(second_weight_decay=False)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        warmup, decay = self.lr_schedulers()
        (warmup if self.global_step <= 4 else decay).step()


def test_two_schedules_of_one_rate_stepped_by_the_user_are_the_users_to_order() -> None:
    assert fit(_StepsOneScheduleItself(), "csx", steps=6)[0].global_step == 6


def test_explicit_scheduler_config_wins() -> None:
    class Explicit(Regressor):
        def configure_optimizers(self):
            conf = super().configure_optimizers()
            conf["lr_scheduler"] = {"scheduler": conf["lr_scheduler"], "interval": "epoch"}
            return conf

    run, _ = fit(Explicit(scheduler=True), "csx", steps=3)
    assert run.lr_scheduler_configs[0].interval == "epoch"


def test_self_log_keeps_working() -> None:
    run, losses = fit(Regressor(build_in="configure_model"), "csx", steps=4)
    assert torch.equal(run.callback_metrics["train_loss"], losses.values[-1])


def test_time_to_first_loss_is_split_into_csx_phases() -> None:
    clock = TimeToFirstLoss()
    fit(Regressor(build_in="configure_model"), "csx", steps=2, callbacks=[clock])
    phases = {"ttfl/total", "ttfl/setup", "ttfl/first_step", "ttfl/construct", "ttfl/materialize", "ttfl/trace"}
    assert phases <= set(clock.metrics)
    assert clock.metrics["ttfl/total"] == pytest.approx(clock.metrics["ttfl/setup"] + clock.metrics["ttfl/first_step"])
    assert clock.metrics["ttfl/materialize"] <= clock.metrics["ttfl/setup"]
    assert clock.metrics["ttfl/trace"] <= clock.metrics["ttfl/first_step"]


def test_fit_from_checkpoint_materializes_the_saved_weights_and_restores_the_generators() -> None:
    trained = Regressor(build_in="configure_model")
    fit(trained, "csx", steps=4, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath="ckpt", save_last=True)])
    saved = torch.load("ckpt/last.ckpt", weights_only=False)
    fresh = Regressor(build_in="configure_model")
    snapshot = _Snapshot()
    run = trainer("csx", max_steps=4, callbacks=[snapshot])
    run.fit(fresh, data(), ckpt_path="ckpt/last.ckpt")  # at max_steps: restore, no step
    assert _equal(list(trained.parameters()), snapshot.weights)
    assert torch.equal(saved["csx_rng_states"][0]["torch"], snapshot.rng)  # generators restored
    assert run.global_step == 4


def test_a_checkpoint_of_another_model_is_refused_naming_its_keys_and_shapes() -> None:
    """Shapes were checked only inside materialize, in other words than the keys; one message names both."""
    fit(
        Regressor(build_in="configure_model"),
        "csx",
        steps=1,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath="ckpt", save_last=True)],
    )
    saved = torch.load("ckpt/last.ckpt", weights_only=False)
    saved["state_dict"]["net.0.weight"] = torch.zeros(16, 7)
    torch.save(saved, "wider.ckpt")
    with pytest.raises(
        CheckpointMismatchError,
        match=r"^Error\(s\) in loading state_dict for Regressor: size mismatch for net.0.weight \(checkpoint \(16, 7\),"
        r" model \(16, 6\)\)\. Load a checkpoint of this model\.$",
    ):
        fit(Regressor(build_in="configure_model"), "csx", steps=2, ckpt_path="wider.ckpt")
    with pytest.raises(
        CheckpointMismatchError,
        match=r": missing keys net.1.num_batches_tracked, net.1.running_mean, net.1.running_var\. Load a checkpoint"
        r" of this model, or set `strict_loading = False` on the LightningModule to initialize the missing ones\.$",
    ):
        fit(Regressor(build_in="configure_model", norm="batch"), "csx", steps=2, ckpt_path="ckpt/last.ckpt")
    saved = torch.load("ckpt/last.ckpt", weights_only=False)
    saved["state_dict"]["extra.w"] = torch.zeros(2)
    torch.save(saved, "extra.ckpt")
    with pytest.raises(
        CheckpointMismatchError,
        match=r": unexpected keys extra.w\. Load a checkpoint of this model, or set `strict_loading = False` on the"
        r" LightningModule to ignore the unexpected ones\.$",
    ):
        fit(Regressor(build_in="configure_model"), "csx", steps=2, ckpt_path="extra.ckpt")


class _HalvesOnLoad(Regressor):
    """Converts a checkpoint in its own load_state_dict: its last layer's weight halved."""

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        state_dict = dict(state_dict)
        state_dict["net.4.weight"] = state_dict["net.4.weight"] * 0.5
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


class _RenamesOnLoad(Regressor):
    """Reads a checkpoint saved under another prefix, by a load pre-hook."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

        def rename(state_dict: dict, prefix: str, *args: Any) -> None:
            for key in [key for key in state_dict if key.startswith(prefix + "backbone.")]:
                state_dict[key.replace(prefix + "backbone.", prefix + "net.", 1)] = state_dict.pop(key)

        self._register_load_state_dict_pre_hook(rename)


def _saved_by_auto(steps: int = 2) -> dict:
    fit(Regressor(), "auto", steps=steps, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath="ckpt")])
    return torch.load(next(Path("ckpt").glob("*.ckpt")), weights_only=False)


@pytest.mark.parametrize("module", [_HalvesOnLoad, _RenamesOnLoad])
def test_a_module_loading_in_its_own_way_resumes_as_under_auto(module: type[Regressor]) -> None:
    """csx copied the checkpoint's weights into place past an override (silently unconverted) and refused keys a
    hook renames; now its own loading decides, after a full init, as under Lightning's other strategies."""
    saved = _saved_by_auto()
    if module is _RenamesOnLoad:
        saved["state_dict"] = {key.replace("net.", "backbone.", 1): v for key, v in saved["state_dict"].items()}
    torch.save(saved, "converted.ckpt")
    weights = []
    for strategy in ("auto", "csx"):
        torch.manual_seed(0)
        model = module(build_in="configure_model")
        fit(model, strategy, steps=4, ckpt_path="converted.ckpt")
        weights.append(model.state_dict())
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])


def test_a_run_refused_its_checkpoint_leaves_nothing_for_the_next_run_to_follow(recwarn: Any) -> None:
    """The next run's recording was taken to follow the refused one's: a warning said neither got eager's weights."""
    saved = _saved_by_auto(steps=1)
    saved["state_dict"]["net.0.weight"] = torch.zeros(16, 7)
    torch.save(saved, "wider.ckpt")
    torch.manual_seed(0)
    with pytest.raises(CheckpointMismatchError):
        fit(Regressor(build_in="configure_model"), "csx", steps=1, ckpt_path="wider.ckpt")
    trained = []
    for strategy in ("auto", "csx"):
        torch.manual_seed(0)
        model = Regressor(build_in="configure_model")
        fit(model, strategy, steps=1)
        trained.append(list(model.state_dict().values()))
    assert not [w for w in recwarn if issubclass(w.category, DeferredInitWarning)]
    assert _equal(*trained)


class _Evaluated(Regressor):
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0])


def test_validate_and_predict_materialize_a_recorded_model_from_the_checkpoint_or_from_scratch() -> None:
    fit(
        _Evaluated(),
        "auto",
        steps=4,
        enable_checkpointing=True,
        limit_val_batches=0,
        callbacks=[ModelCheckpoint(dirpath="ckpt", save_last=True)],
    )
    expected = trainer("auto").validate(_Evaluated(), data(), ckpt_path="ckpt/last.ckpt")
    recorded = _Evaluated(build_in="configure_model")
    assert trainer("csx").validate(recorded, data(), ckpt_path="ckpt/last.ckpt") == expected
    predicted = trainer("csx").predict(_Evaluated(build_in="configure_model"), data(), ckpt_path="ckpt/last.ckpt")
    assert torch.equal(torch.cat(predicted), torch.cat(trainer("auto").predict(recorded, data())))
    torch.manual_seed(0)
    from_scratch = trainer("csx").predict(_Evaluated(build_in="configure_model"), data())
    torch.manual_seed(0)
    assert torch.equal(torch.cat(from_scratch), torch.cat(trainer("auto").predict(_Evaluated(), data())))


class _TorchStepLR(Regressor):
    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def test_a_checkpoint_written_by_the_default_strategy_resumes_under_csx() -> None:
    fit(
        _TorchStepLR(),
        "auto",
        steps=6,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath="ckpt", save_last=True)],
    )
    saved = torch.load("ckpt/last.ckpt", weights_only=False)
    assert not any(key.startswith("csx") for key in saved)
    snapshot = _Snapshot()
    run, _ = fit(
        _TorchStepLR(build_in="configure_model"), "csx", steps=12, ckpt_path="ckpt/last.ckpt", callbacks=[snapshot]
    )
    assert _equal([saved["state_dict"][k] for k in run.lightning_module.state_dict()], snapshot.weights)
    # the torch StepLR, converted to its closed form, went on from step 6: halved at 3, 6, 9 and 12
    assert run.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**4, rel=1e-6)


def test_a_second_fit_with_the_same_trainer_goes_on_from_the_trained_weights() -> None:
    model = Regressor(build_in="configure_model")
    snapshot = _Snapshot()
    run, losses = fit(model, "csx", steps=3, callbacks=[snapshot])
    after_first = [p.detach().clone() for p in model.parameters()]
    run.fit_loop.epoch_loop.max_steps = 6
    run.fit(model, data())
    assert _equal(snapshot.weights, after_first)  # on_fit_start of the second fit: not materialized again
    assert run.global_step == 6 and len(losses.values) == 6


def test_lightning_cli_configures_the_strategy_and_its_options() -> None:
    args = [
        "--trainer.strategy=cs_lightning.CSXStrategy",
        "--trainer.strategy.init_mode=independent",
        "--trainer.strategy.strict_schedulers=true",
        "--trainer.logger=false",
        "--model.build_in=configure_model",
    ]
    cli = LightningCLI(Regressor, run=False, args=args, save_config_callback=None)
    assert isinstance(cli.trainer.strategy, CSXStrategy)
    assert cli.trainer.strategy.init_mode == "independent" and cli.trainer.strategy.strict_schedulers is True
    by_name = LightningCLI(
        Regressor,
        run=False,
        args=["--trainer.strategy=csx", "--trainer.devices=2", "--trainer.accelerator=cpu"],
        save_config_callback=None,
    )
    assert type(by_name.trainer.strategy) is CSXDDPStrategy


def test_bad_options_are_rejected_naming_the_argument() -> None:
    with pytest.raises(ValueError, match=r"init_mode='lazy'.*'exact', 'independent'"):
        CSXStrategy(init_mode="lazy")
    with pytest.raises(TypeError, match=r"trace_check='yes' must be a bool"):
        CSXStrategy(trace_check="yes")


MODEL_SOURCE = """
import torch
from torch import nn
from lightning_models import Regressor


class Checked(Regressor):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        return y{change}
"""


def test_code_that_passed_the_trace_check_is_not_checked_again_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "checked_model.py"
    source.write_text(MODEL_SOURCE.format(change=""))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("checked_model")
    first = TimeToFirstLoss()
    fit(
        module.Checked(build_in="configure_model"),
        "csx",
        steps=2,
        enable_checkpointing=True,
        callbacks=[first, ModelCheckpoint(dirpath="ckpt", save_last=True)],
    )
    resumed = TimeToFirstLoss()
    fit(module.Checked(build_in="configure_model"), "csx", steps=4, ckpt_path="ckpt/last.ckpt", callbacks=[resumed])
    assert "ttfl/trace" in first.metrics and "ttfl/trace" not in resumed.metrics

    source.write_text(MODEL_SOURCE.format(change=" * 2 if y.sum() > 0 else y"))  # the code changed: check again
    module = importlib.reload(sys.modules["checked_model"])
    with pytest.raises(GraphBreakError, match="checked_model.py"):
        fit(module.Checked(build_in="configure_model"), "csx", steps=4, ckpt_path="ckpt/last.ckpt")


SHARDED_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_models import Regressor, fit
fit(Regressor(build_in="configure_model"), "csx_fsdp", steps=2, devices=1, enable_checkpointing=True,
    callbacks=[ModelCheckpoint(dirpath="ckpt")])
"""

# The one fix for a folder that is not a whole sharded checkpoint, in Python as in the CLI (test_cli's CHECKPOINT_FIX).
FOLDER_FIX = (
    "fix: give a .ckpt file that Lightning saved, or a sharded checkpoint folder (csx_fsdp's, holding .metadata and "
    "meta.pt), or leave ckpt_path out"
)


@pytest.mark.parametrize("strategy", ["csx", "csx_ddp"])
def test_a_sharded_checkpoint_folder_is_refused_by_strategies_that_read_files(strategy: str, tmp_path: Path) -> None:
    """torch.load's IsADirectoryError said nothing of what the folder is, nor how to use it."""
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED_SCRIPT.format(tests=str(Path(__file__).parent)))  # csx_fsdp's process group: its own
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    folder = "ckpt/epoch=0-step=2.ckpt"
    assert {".metadata", "meta.pt"} <= {p.name for p in (tmp_path / folder).iterdir()}
    line = (
        f"ckpt_path={folder!r} is a sharded checkpoint (a folder of torch.distributed.checkpoint shards, as csx_fsdp "
        f"writes by default), which strategy={strategy!r} cannot read; fix: resume it with strategy='csx_fsdp', or save "
        "single-file checkpoints, which every strategy reads, with CSXFSDPStrategy(state_dict_type='full')"
    )
    with pytest.raises(UsageError) as refused:
        fit(Regressor(build_in="configure_model"), strategy, steps=4, ckpt_path=folder, devices=1)
    assert str(refused.value) == line
    with pytest.raises(UsageError) as refused:
        fit(Regressor(build_in="configure_model"), strategy, steps=4, ckpt_path="ckpt", devices=1)
    assert str(refused.value) == (
        f"ckpt_path='ckpt' is a folder but not a sharded checkpoint (it has no .metadata and no meta.pt); {FOLDER_FIX}"
    )


def test_a_sharded_folder_is_what_csx_fsdp_writes_and_one_lacking_a_part_is_named_as_such(tmp_path: Path) -> None:
    """One answer to "is this a sharded checkpoint?" for every strategy and the CLI: the folder csx_fsdp writes
    (shards, their index, meta.pt) is one; without a part, csx (which said only "is a folder") and csx_fsdp (whose
    torch error named a file it failed to open) name what is missing, with the CLI's fix."""
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED_SCRIPT.format(tests=str(Path(__file__).parent)))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    folder = tmp_path / "ckpt/epoch=0-step=2.ckpt"
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "meta.pt"]
    assert sharded_checkpoint_problem(folder) is None
    (folder / "__0_0.distcp").unlink()
    assert sharded_checkpoint_problem(folder) == "is a sharded checkpoint without its shards (*.distcp)"
    with pytest.raises(UsageError) as refused:
        fit(Regressor(build_in="configure_model"), "csx", steps=4, ckpt_path="ckpt/epoch=0-step=2.ckpt")
    assert str(refused.value) == (
        f"ckpt_path='ckpt/epoch=0-step=2.ckpt' is a sharded checkpoint without its shards (*.distcp); {FOLDER_FIX}"
    )
    (folder / ".metadata").unlink()
    with pytest.raises(UsageError) as refused:
        CSXFSDPStrategy().load_checkpoint("ckpt/epoch=0-step=2.ckpt")
    assert str(refused.value) == (
        "ckpt_path='ckpt/epoch=0-step=2.ckpt' is a folder but not a sharded checkpoint (it has no .metadata); "
        f"{FOLDER_FIX}"
    )


# Saves meta.pt again as a GPU machine would: every storage tagged with cuda:0 (this machine has no GPU).
RESAVE_ON_CUDA = """
import sys, torch, torch.serialization
checkpoint = torch.load(sys.argv[1], weights_only=False)
torch.serialization.register_package(0, lambda storage: "cuda:0", lambda storage, location: None)
torch.save(checkpoint, sys.argv[1])
"""


def test_csx_fsdp_reads_on_cpu_a_sharded_checkpoint_saved_on_cuda(tmp_path: Path) -> None:
    """meta.pt was read with torch.load and no map_location: its tensors (the generators' states), saved from
    CUDA, could not be restored on a CPU-only machine. Read as a single file is: mapped, on CPU."""
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED_SCRIPT.format(tests=str(Path(__file__).parent)))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    folder = tmp_path / "ckpt/epoch=0-step=2.ckpt"
    saved = torch.load(folder / "meta.pt", weights_only=False)
    resave = subprocess.run([sys.executable, "-c", RESAVE_ON_CUDA, str(folder / "meta.pt")], capture_output=True)
    assert resave.returncode == 0, resave.stderr[-3000:]
    with pytest.raises(RuntimeError, match="on a CUDA device but torch.cuda.is_available"):
        torch.load(folder / "meta.pt", weights_only=False)
    checkpoint = CSXFSDPStrategy().load_checkpoint(str(folder))
    restored = checkpoint["csx_rng_states"][0]["torch"]  # rank 0's
    assert restored.device == torch.device("cpu")
    assert torch.equal(restored, saved["csx_rng_states"][0]["torch"])
