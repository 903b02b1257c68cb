"""A Lightning program behaves the same under strategy="auto" and strategy="csx" (issue 16).

Each test is written as a Lightning user would write it (a LightningModule, a Trainer, public
API only), runs under both strategies and asserts the same observable behaviour.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import warnings
from typing import Any

import pytest
import torch
from conftest import flat_state
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import BackboneFinetuning, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from torch import nn
from torch.optim import lr_scheduler as torch_lr
from torch.utils.data import DataLoader, TensorDataset

import cs_lightning
from cs_lightning import schedulers as cs
from cs_lightning.schedulers.from_torch import HostSchedulerWarning

STRATEGIES = ["auto", "csx"]


def _data(n: int = 48, batch_size: int = 4) -> DataLoader:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(n, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size)


def _trainer(strategy: str, max_steps: int, **kwargs: Any) -> Trainer:
    settings: dict[str, Any] = dict(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    settings.update(kwargs)
    return Trainer(strategy=strategy, max_steps=max_steps, **settings)


class _Rates(Callback):
    """What a user sees at the start of every batch: each group's lr, and the scheduler's own view."""

    def __init__(self) -> None:
        self.lrs: list[list[float]] = []
        self.last_epochs: list[int] = []
        self.last_lrs: list[list[float]] = []

    def on_train_batch_start(self, trainer: Trainer, module: LightningModule, batch: Any, batch_idx: int) -> None:
        self.lrs.append([float(group["lr"]) for group in trainer.optimizers[0].param_groups])
        scheduler = module.lr_schedulers()
        self.last_epochs.append(int(scheduler.last_epoch))
        # a group added since the last step has no last value yet (torch's list is shorter, ours holds None)
        self.last_lrs.append([float(lr) for lr in scheduler.get_last_lr() if lr is not None])


def _close(got: list[list[float]], expected: list[list[float]]) -> None:
    """Equal to float32 precision (relative 1e-6), step for step and group for group."""
    assert [len(row) for row in got] == [len(row) for row in expected]
    flat = [torch.tensor([value for row in rows for value in row], dtype=torch.float64) for rows in (got, expected)]
    torch.testing.assert_close(*flat, rtol=1e-6, atol=0.0)


class _Regressor(LightningModule):
    """The smallest model: one linear layer, mean squared error; tests add what they exercise."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])


# -- 1. the user's scheduler object stays the one Lightning and the user see -------------------------


class _UserStepLR(LightningModule):
    """A user's module: a torch StepLR it keeps a reference to, and an lr_scheduler_step override."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(4, 8), nn.Linear(8, 1)
        self.stepped_by_override = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.head(torch.relu(self.body(x))), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(
            [{"params": self.body.parameters()}, {"params": self.head.parameters(), "lr": 0.03}], lr=0.1
        )
        self.my_scheduler = torch_lr.StepLR(optimizer, step_size=3, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.my_scheduler, "interval": "step"}}

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        if isinstance(scheduler, torch_lr.StepLR):  # a common user check: it must keep stepping
            self.stepped_by_override += 1
            scheduler.step()


def _fit_user_step_lr(
    strategy: str, steps: int = 10, ckpt_path: Any = None, **kwargs: Any
) -> tuple[_UserStepLR, _Rates, Trainer]:
    torch.manual_seed(0)
    module, rates = _UserStepLR(), _Rates()
    run = _trainer(strategy, steps, callbacks=[rates, *kwargs.pop("callbacks", [])], **kwargs)
    run.fit(module, _data(), ckpt_path=ckpt_path)
    return module, rates, run


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_users_scheduler_object_is_the_one_lightning_and_the_user_see(strategy: str) -> None:
    module, rates, run = _fit_user_step_lr(strategy)
    scheduler = module.my_scheduler
    assert module.lr_schedulers() is scheduler and run.lr_scheduler_configs[0].scheduler is scheduler
    assert isinstance(scheduler, torch_lr.StepLR) and type(scheduler).__name__ == "StepLR"
    assert module.stepped_by_override == 10  # the override's isinstance check held every step
    expected = [[0.1 * 0.5 ** (k // 3), 0.03 * 0.5 ** (k // 3)] for k in range(10)]
    _close(rates.lrs, expected)
    _close(rates.last_lrs, expected)  # get_last_lr() moves with the groups
    assert rates.last_epochs == list(range(10))
    assert scheduler.last_epoch == 10
    _close([scheduler.get_last_lr()], [[0.1 * 0.5**3, 0.03 * 0.5**3]])
    state = scheduler.state_dict()
    assert state["last_epoch"] == 10 and state["_step_count"] == 11  # torch's own bookkeeping
    assert set(state) == set(torch_lr.StepLR(torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=1.0), 3).state_dict())


@pytest.mark.parametrize(("first", "second"), [("auto", "csx"), ("csx", "auto")])
def test_checkpoints_load_both_ways_between_the_strategies(first: str, second: str, tmp_path: Any) -> None:
    _, uninterrupted, _ = _fit_user_step_lr("auto", steps=10)
    saver = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    _, before, _ = _fit_user_step_lr(first, steps=5, enable_checkpointing=True, callbacks=[saver])
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)  # plain types only, as torch's state
    assert saved["lr_schedulers"][0]["last_epoch"] == 5
    module, after, _run = _fit_user_step_lr(second, steps=10, ckpt_path=tmp_path / "last.ckpt")
    _close(before.lrs + after.lrs, uninterrupted.lrs)
    assert before.last_epochs + after.last_epochs == list(range(10))
    assert module.my_scheduler.last_epoch == 10
    _close([module.my_scheduler.get_last_lr()], [[0.1 * 0.5**3, 0.03 * 0.5**3]])


# -- 2. param groups added later are scheduled as torch schedules them -------------------------------


class _Finetuned(LightningModule):
    """A backbone unfrozen by Lightning's BackboneFinetuning, which adds its param group at epoch 2."""

    def __init__(self, make_scheduler: Any) -> None:
        super().__init__()
        self.backbone, self.head = nn.Linear(4, 8), nn.Linear(8, 1)
        self.make_scheduler = make_scheduler

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.head(torch.relu(self.backbone(x))), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": self.make_scheduler(optimizer), "interval": "step"},
        }


LATE_GROUP_SCHEDULERS = {
    "torch StepLR": lambda o: torch_lr.StepLR(o, step_size=5, gamma=0.5),
    "torch ExponentialLR": lambda o: torch_lr.ExponentialLR(o, gamma=0.95),
    "torch LinearLR": lambda o: torch_lr.LinearLR(o, start_factor=0.25, total_iters=30),
    "cs StepLR": lambda o: cs.StepLR(o, initial_learning_rate=0.1, step_size=5, gamma=0.5),
}


def _fit_finetuned(strategy: str, case: str) -> _Rates:
    torch.manual_seed(0)
    rates = _Rates()
    unfreeze = BackboneFinetuning(unfreeze_backbone_at_epoch=2, backbone_initial_ratio_lr=0.5, verbose=False)
    # 12 steps an epoch: the backbone's group joins at step 24, mid-schedule
    run = _trainer(strategy, 40, callbacks=[unfreeze, rates])
    run.fit(_Finetuned(LATE_GROUP_SCHEDULERS[case]), _data())
    return rates


@pytest.mark.parametrize("case", LATE_GROUP_SCHEDULERS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_param_group_added_later_follows_the_schedule_from_its_own_lr(strategy: str, case: str) -> None:
    rates = _fit_finetuned(strategy, case)
    reference = _fit_finetuned("auto", case) if strategy != "auto" else rates
    _close(rates.lrs, reference.lrs)
    assert [len(lrs) for lrs in rates.lrs] == [1] * 24 + [2] * 16  # the backbone joins at epoch 2
    # torch's chainable rule: the new group moves with the schedule from its own value (and from
    # the values BackboneFinetuning sets at each epoch start), never frozen
    assert rates.lrs[25][1] != rates.lrs[24][1] or rates.lrs[30][1] != rates.lrs[29][1]


def test_a_native_scheduler_refuses_a_group_added_where_the_schedule_is_zero() -> None:
    optimizer = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.0)
    warmup = cs.LinearLR(optimizer, initial_learning_rate=0.0, end_learning_rate=0.1, total_iters=10)
    optimizer.add_param_group({"params": [nn.Parameter(torch.ones(1))], "lr": 0.05})
    with pytest.raises(
        ValueError, match=r"param_groups\[1\] joins the schedule at step 0 holding lr=0.05, but the schedule is 0"
    ):
        warmup.step()


# -- 4. step(epoch): torch's meaning and its deprecation warning -------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda o: torch_lr.ExponentialLR(o, gamma=0.5),
        lambda o: cs.ExponentialLR(o, initial_learning_rate=0.1, total_iters=1, decay_rate=0.5),
    ],
    ids=["torch ExponentialLR", "cs ExponentialLR"],
)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_step_with_an_epoch_jumps_there_with_torchs_deprecation_warning(strategy: str, make: Any) -> None:
    class Jumping(_Regressor):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": make(optimizer), "interval": "step"}}

        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            scheduler.step(2 * self.trainer.global_step)  # an old-style schedule: two epochs a step

    rates = _Rates()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(strategy, 5, callbacks=[rates]).fit(Jumping(), _data())
    assert any("epoch parameter in `scheduler.step()`" in str(w.message) for w in caught)
    _close(rates.lrs, [[0.1 * 0.5 ** (2 * k)] for k in range(5)])


# -- 8. LightningCLI's short scheduler names keep meaning torch's classes --------------------------


class _CLIModel(_Regressor):
    def train_dataloader(self) -> DataLoader:
        return _data()


def _cli(strategy: str, config: dict[str, Any], tmp_path: Any) -> Any:
    import yaml
    from lightning.pytorch.cli import LightningCLI

    path = tmp_path / f"{strategy}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "strategy": strategy,
                    "max_steps": 6,
                    "logger": False,
                    "enable_checkpointing": False,
                    "enable_progress_bar": False,
                    "enable_model_summary": False,
                },
                "optimizer": {"class_path": "SGD", "init_args": {"lr": 0.1}},
                **config,
            }
        )
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        return LightningCLI(_CLIModel, args=["fit", "--config", str(path)], save_config_callback=None)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_lightning_cli_short_scheduler_names_mean_torchs_classes(strategy: str, tmp_path: Any) -> None:
    torchs = _cli(strategy, {"lr_scheduler": {"class_path": "StepLR", "init_args": {"step_size": 2}}}, tmp_path)
    scheduler = torchs.model.lr_schedulers()
    assert type(scheduler).__module__ == "torch.optim.lr_scheduler" and isinstance(scheduler, torch_lr.StepLR)
    # Lightning steps a bare scheduler once an epoch: 12 batches, so not yet
    assert torchs.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1)
    ours = _cli(
        strategy,
        {
            "lr_scheduler": {
                "class_path": "cs_lightning.schedulers.StepLR",
                "init_args": {"initial_learning_rate": 0.1, "step_size": 2, "gamma": 0.5},
            }
        },
        tmp_path,
    )
    assert isinstance(ours.model.lr_schedulers(), cs.StepLR)  # full class paths reach the catalogue


def test_lightning_cli_short_names_print_config_unambiguously(tmp_path: Any, capsys: Any) -> None:
    from lightning.pytorch.cli import LightningCLI

    with pytest.raises(SystemExit), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        LightningCLI(
            _CLIModel,
            args=[
                "fit",
                "--optimizer",
                "SGD",
                "--optimizer.lr",
                "0.1",
                "--lr_scheduler",
                "OneCycleLR",
                "--lr_scheduler.max_lr",
                "0.5",
                "--print_config",
            ],
        )
    assert "class_path: torch.optim.lr_scheduler.OneCycleLR" in capsys.readouterr().out


# -- 5. every floating and complex dtype under every precision -------------------------------------

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]


class _AllDtypes(LightningModule):
    """Buffers of every floating and complex dtype, a default-dtype pair and a layer, built in configure_model."""

    def configure_model(self) -> None:
        if hasattr(self, "net"):
            return
        self.net = nn.Linear(4, 1)
        for dtype in DTYPES:
            values = torch.tensor([1.25, -2.5j] if dtype.is_complex else [1.25, -2.5], dtype=dtype)
            self.register_buffer(f"buffer_{str(dtype).removeprefix('torch.')}", values)
        self.register_buffer("default_real", torch.tensor([1.25, -2.5]))  # the precision's default dtype
        if torch.get_default_dtype() in (torch.float32, torch.float64):  # torch has no complex bfloat16/half default
            self.register_buffer("default_complex", torch.tensor([1.25, -2.5j]))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self.net(batch[0].to(self.net.weight.dtype)), batch[1].to(self.net.weight.dtype))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_fit_start(self) -> None:
        self.seen = {name: (t.dtype, t.detach().clone()) for name, t in self.state_dict().items()}


@pytest.mark.filterwarnings("ignore:Casting complex values to real")  # what plain Lightning's half() does
@pytest.mark.parametrize("precision", ["32-true", "64-true", "bf16-true", "16-true", "bf16-mixed", "16-mixed"])
def test_every_floating_and_complex_buffer_gets_the_dtype_plain_lightning_gives(precision: str) -> None:
    seen = {}
    for strategy in STRATEGIES:
        torch.manual_seed(0)
        module = _AllDtypes()
        _trainer(strategy, 1, precision=precision).fit(module, _data())
        seen[strategy] = module.seen
    assert seen["auto"].keys() == seen["csx"].keys()
    for name, (dtype, value) in seen["auto"].items():
        assert seen["csx"][name][0] == dtype, (name, seen["csx"][name][0], dtype)
        assert torch.equal(seen["csx"][name][1], value), name
    if precision == "64-true":  # the imaginary parts survive, and a default complex tensor is complex128
        assert seen["csx"]["buffer_complex64"][1].imag.tolist() == [0.0, -2.5]
        assert seen["csx"]["default_complex"][0] == torch.complex128


# -- 6. the loggers receive what the user logged; ttfl/* only when asked --------------------------


class _Recorder(Logger):
    """An in-memory logger: every metric name it received."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    @property
    def name(self) -> str:
        return "recorder"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.names.update(metrics)

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class _Logged(_Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_loggers_get_ttfl_metrics_only_with_the_callback(strategy: str, caplog: Any) -> None:
    plain = _Recorder()
    with caplog.at_level("INFO"):
        _trainer(strategy, 3, logger=plain, log_every_n_steps=1).fit(_Logged(), _data())
    assert plain.names == {"train_loss", "epoch"}  # what the user logged, nothing more
    printed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss:")]
    assert len(printed) == (1 if strategy == "csx" else 0)  # csx always prints the one line
    asked = _Recorder()
    _trainer(strategy, 3, logger=asked, log_every_n_steps=1, callbacks=[cs_lightning.TimeToFirstLoss()]).fit(
        _Logged(), _data()
    )
    assert {"ttfl/total", "ttfl/setup", "ttfl/first_step", "ttfl/loss"} <= asked.names
    assert asked.names - plain.names == {name for name in asked.names if name.startswith("ttfl/")}


# -- 9. a test suite that mocks Tensor.backward ---------------------------------------------------


@pytest.mark.parametrize("autospec", [False, True], ids=["Mock", "autospec"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_mocked_backward_runs_as_under_auto_with_the_check_on(strategy: str, autospec: bool) -> None:
    from unittest import mock

    module = _Logged()
    before = [p.detach().clone() for p in module.parameters()]
    with (
        mock.patch("torch.Tensor.backward", autospec=autospec) as backward,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        _trainer(strategy, 3).fit(module, _data())
    assert backward.call_count == 3
    assert all(torch.equal(p, q) for p, q in zip(module.parameters(), before))  # no gradients, no update
    assert not [w for w in caught if "trace" in str(w.message).lower()]  # nothing blamed on the model or the mock


# -- 3. OneCycleLR and CyclicLR cycle the momentum (or Adam's beta1) too --------------------------


class _Momentum(Callback):
    def __init__(self) -> None:
        self.seen: list[list[float]] = []

    def on_train_batch_start(self, trainer: Trainer, module: LightningModule, batch: Any, batch_idx: int) -> None:
        group = trainer.optimizers[0].param_groups[0]
        self.seen.append([float(group["lr"]), float(group["momentum"] if "momentum" in group else group["betas"][0])])


MOMENTUM_CYCLES = {
    "OneCycleLR, SGD momentum": (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda o: torch_lr.OneCycleLR(o, max_lr=0.5, total_steps=30),
    ),
    "OneCycleLR three-phase linear, Adam beta1": (
        lambda p: torch.optim.Adam(p, lr=0.1),
        lambda o: torch_lr.OneCycleLR(o, max_lr=0.5, total_steps=30, three_phase=True, anneal_strategy="linear"),
    ),
    "CyclicLR exp_range, SGD momentum": (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda o: torch_lr.CyclicLR(o, 0.01, 0.1, step_size_up=4, step_size_down=3, mode="exp_range", gamma=0.97),
    ),
    "CyclicLR triangular2, AdamW beta1": (
        lambda p: torch.optim.AdamW(p, lr=0.1),
        lambda o: torch_lr.CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="triangular2"),
    ),
}


def _fit_cycling(strategy: str, case: str) -> list[list[float]]:
    make_optimizer, make_scheduler = MOMENTUM_CYCLES[case]

    class Cycling(_Regressor):
        def configure_optimizers(self) -> Any:
            optimizer = make_optimizer(self.parameters())
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": make_scheduler(optimizer), "interval": "step"},
            }

    seen = _Momentum()
    with warnings.catch_warnings():
        warnings.simplefilter("error", cs_lightning.schedulers.from_torch.HostSchedulerWarning)  # converted
        _trainer(strategy, 30, callbacks=[seen]).fit(Cycling(), _data())
    return seen.seen


@pytest.mark.parametrize("case", MOMENTUM_CYCLES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_momentum_and_beta1_cycle_as_torchs_at_every_step(strategy: str, case: str) -> None:
    got = _fit_cycling(strategy, case)
    expected = _fit_cycling("auto", case) if strategy != "auto" else got
    _close(got, expected)
    assert len({row[1] for row in got}) > 5  # the momentum did cycle


def test_momentum_schedules_name_what_they_cannot_do() -> None:
    from cs_lightning.schedulers.from_torch import HostSchedulerWarning, convert_scheduler

    adagrad = torch.optim.Adagrad([nn.Parameter(torch.ones(1))], lr=0.1)  # no momentum, no betas
    with pytest.raises(
        ValueError, match=r"OneCycleMomentum: param_groups\[0\] has no momentum or betas \(Adagrad has no momentum\)"
    ):
        cs.OneCycleMomentum(adagrad, initial_val=0.95, max_val=0.85, total_steps=10)
    sgd = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1, momentum=0.9)
    with pytest.warns(HostSchedulerWarning, match=r"cycles the optimizer's momentum .* from_torch.drive"):
        assert convert_scheduler(torch_lr.OneCycleLR(sgd, max_lr=0.5, total_steps=10)) is None  # two schedules
    assert sgd.param_groups[0]["momentum"] == pytest.approx(0.95)  # torch's own value, untouched


# -- 7. mid-epoch resume: exact with a resumable dataloader; a plain one warns --------------------

KILLED_SCRIPT = """
import os, signal, sys
import torch
from torch import nn
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
import cs_lightning
from cs_lightning.schedulers import CosineDecayLR

strategy, mode, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Noisy(torch.utils.data.Dataset):  # noise drawn in the main process, as random transforms do (under csx)

    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return 64

    def __getitem__(self, i):
        noise = torch.zeros(6) if strategy == "auto" else 0.1 * torch.randn(6)
        return self.x[i] + noise, self.x[i].sum(0, keepdim=True).sin()


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        # dropout under csx, which saves the generators (plain Lightning does not)
        dropout = nn.Identity() if strategy == "auto" else nn.Dropout(0.2)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.GELU(), dropout, nn.Linear(16, 1))

    def train_dataloader(self):  # built once the checkpoint is restored, as most modules do
        return cs_lightning.ResumableDataLoader(Noisy(), batch_size=8, shuffle=True)  # 8 batches, a new order each

    def training_step(self, batch, batch_idx):
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        schedule = CosineDecayLR(optimizer, initial_learning_rate=0.01, end_learning_rate=0.001, total_iters=30)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class KillAt(Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


seed_everything(5)
model = Model()
callbacks = [ModelCheckpoint(dirpath="ckpt", every_n_train_steps=3, save_top_k=-1, save_last=True)]
callbacks += [KillAt()] if mode == "crash" else []
trainer = Trainer(strategy=strategy, max_steps=24, logger=False, enable_progress_bar=False,
                  enable_model_summary=False, callbacks=callbacks)
trainer.fit(model, ckpt_path="last" if mode == "resume" else None)
torch.save({"weights": model.state_dict(), "optimizer": trainer.optimizers[0].state_dict(),
            "lr": trainer.optimizers[0].param_groups[0]["lr"], "step": trainer.global_step}, f"{mode}.pt")
"""


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_run_killed_mid_epoch_resumes_bit_identical_with_a_resumable_dataloader(strategy: str, tmp_path: Any) -> None:
    import random
    import signal
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(KILLED_SCRIPT)
    # a step inside the second or third epoch, past a checkpoint that is itself inside the epoch
    kill_at = random.Random(strategy).choice([k for k in range(10, 23) if k % 8 and (k // 3 * 3) % 8])

    def run(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(script), strategy, mode, str(kill_at)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )

    uninterrupted = run("uninterrupted")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    (tmp_path / "ckpt").rename(tmp_path / "ckpt_uninterrupted")
    crashed = run("crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    resumed = run("resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Restoring states from the checkpoint path at" in resumed.stderr
    assert "not resumable" not in resumed.stderr  # Lightning's warning for a plain DataLoader
    expected, actual = (torch.load(tmp_path / f"{mode}.pt", weights_only=False) for mode in ("uninterrupted", "resume"))
    assert actual["step"] == expected["step"] == 24
    assert all(torch.equal(actual["weights"][k], expected["weights"][k]) for k in expected["weights"])
    assert flat_state(actual["optimizer"]) == flat_state(expected["optimizer"])
    assert actual["lr"] == expected["lr"]


class _Shuffled(LightningModule):
    """Dropout, and a ResumableDataLoader's order drawn anew each epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 1))

    def train_dataloader(self) -> cs_lightning.ResumableDataLoader:
        x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
        return cs_lightning.ResumableDataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8, shuffle=True)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.parametrize(
    ("settings", "saved_at"),
    [
        ({}, "epoch=1-step=16.ckpt"),
        ({"limit_train_batches": 5}, "epoch=1-step=10.ckpt"),  # the epoch cut short: over all the same
        ({"reload_dataloaders_every_n_epochs": 3}, "epoch=1-step=16.ckpt"),  # no reload at epoch 2: it goes on
    ],
    ids=["whole epochs", "limit_train_batches", "no reload due"],
)
def test_a_fit_resumed_from_an_epoch_end_checkpoint_goes_on_exactly_under_csx(
    settings: dict, saved_at: str, tmp_path: Any
) -> None:
    """ModelCheckpoint's default checkpoint, taken at an epoch's end of a max_epochs run: Lightning does not hand
    the loader its state back there (under `auto` the resumed epoch repeats the first epoch's order), csx does."""

    def fit(epochs: int, checkpoint: Any = None, **kwargs: Any) -> tuple[_Shuffled, torch.Tensor]:
        torch.manual_seed(0)
        model = _Shuffled()
        options = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, **settings, **kwargs)
        Trainer(strategy="csx", max_epochs=epochs, default_root_dir=tmp_path, **options).fit(
            model, ckpt_path=checkpoint
        )
        return model, torch.rand(3)  # what a draw after the fit gives

    uninterrupted, after = fit(3, enable_checkpointing=False)
    fit(2)
    (saved,) = (tmp_path / "checkpoints").glob("*.ckpt")
    assert saved.name == saved_at  # the end of the second epoch
    resumed, resumed_after = fit(3, saved, enable_checkpointing=False)
    expected = uninterrupted.state_dict()
    assert all(torch.equal(value, expected[key]) for key, value in resumed.state_dict().items())
    assert torch.equal(resumed_after, after)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_resuming_mid_epoch_with_a_plain_dataloader_warns_once(strategy: str, tmp_path: Any) -> None:
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=5, save_last=True)
    _trainer(strategy, 5, enable_checkpointing=True, callbacks=[saver]).fit(_Logged(), _data())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(strategy, 8).fit(_Logged(), _data(), ckpt_path=tmp_path / "last.ckpt")
    restarts = [w for w in caught if "ended before the epoch ended" in str(w.message)]
    assert len(restarts) == 1 and "not resumable" in str(restarts[0].message)


def test_resumable_dataloader_resumes_its_order_and_refuses_what_it_cannot_resume() -> None:
    dataset = TensorDataset(torch.arange(20.0))
    torch.manual_seed(1)
    loader = cs_lightning.ResumableDataLoader(dataset, batch_size=2, shuffle=True)
    batches = iter(loader)
    served = [next(batches)[0].tolist() for _ in range(3)]
    state = loader.state_dict()
    rest = [batch[0].tolist() for batch in batches]
    torch.manual_seed(99)  # another global state: the order comes from the loader's own generator
    again = cs_lightning.ResumableDataLoader(dataset, batch_size=2, shuffle=True)
    again.load_state_dict(state)
    assert [batch[0].tolist() for batch in again] == rest
    assert sorted(functools.reduce(operator.iadd, served + rest, [])) == list(range(20))
    with pytest.raises(TypeError, match=r"dataset=_Stream, an IterableDataset"):
        cs_lightning.ResumableDataLoader(_Stream())
    with pytest.raises(ValueError, match=r"got keys \['position'\], expected \['epoch_start', 'generator', 'served'\]"):
        loader.load_state_dict({"position": 3})


@pytest.mark.parametrize(
    "sampler",
    [
        lambda data: torch.utils.data.RandomSampler(data),
        lambda data: torch.utils.data.WeightedRandomSampler(torch.rand(20), 20),
        lambda data: torch.utils.data.SubsetRandomSampler(range(20)),
        lambda data: torch.utils.data.RandomSampler(data, generator=torch.Generator().manual_seed(3)),
    ],
    ids=["RandomSampler", "WeightedRandomSampler", "SubsetRandomSampler", "own generator"],
)
def test_a_given_random_sampler_resumes_its_order(sampler: Any) -> None:
    """Without a generator of its own a sampler drew its order from the global generator at each iter():
    the resumed epoch was another permutation, some samples seen twice and some never (no warning)."""
    dataset = TensorDataset(torch.arange(20))

    def make() -> cs_lightning.ResumableDataLoader:
        torch.manual_seed(7)  # the weights of WeightedRandomSampler: the same in both loaders
        return cs_lightning.ResumableDataLoader(dataset, sampler=sampler(dataset), batch_size=3)

    loader = make()
    torch.manual_seed(0)
    for _ in loader:  # a first epoch, so the one resumed is not the first
        pass
    batches = iter(loader)
    served = [next(batches)[0].tolist() for _ in range(3)]
    state = loader.state_dict()
    rest = [batch[0].tolist() for batch in batches]
    again = make()
    torch.manual_seed(5)  # the global generator elsewhere
    again.load_state_dict(state)
    assert [batch[0].tolist() for batch in again] == rest
    assert served + rest != [batch[0].tolist() for batch in again]  # the epoch after: a new order
    if "samplers" in state:  # a state saved by 0.1.0 has no sampler generators: loaded, with a warning
        with pytest.warns(UserWarning, match="holds no generator of the sampler"):
            make().load_state_dict({k: state[k] for k in ("generator", "epoch_start", "served")})


@pytest.mark.parametrize("in_hook", [False, True], ids=["given to fit", "made in train_dataloader"])
def test_a_sampler_wrapped_for_ddp_follows_the_loader_lightning_makes_around_it(in_hook: bool) -> None:
    """Under DDP Lightning makes the loader again (from its __init__ arguments when made in a hook, else
    from its attributes, generator included), the user's sampler inside a DistributedSamplerWrapper: the
    sampler followed the first loader's generator, never seeded, so the order was the same whatever the seed."""
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
    from lightning.pytorch.utilities.data import _update_dataloader

    dataset = TensorDataset(torch.arange(20))

    def make(seed: int) -> cs_lightning.ResumableDataLoader:
        torch.manual_seed(seed)
        with _replace_dunder_methods(DataLoader, "dataset") if in_hook else contextlib.nullcontext():
            user = cs_lightning.ResumableDataLoader(
                dataset, sampler=torch.utils.data.RandomSampler(dataset), batch_size=3
            )
        # what Lightning's DDP setup does with it
        return _update_dataloader(user, DistributedSamplerWrapper(user.sampler, num_replicas=2, rank=0, shuffle=False))

    orders = [[batch[0].tolist() for batch in make(seed)] for seed in (0, 0, 1)]
    assert orders[0] == orders[1] != orders[2]  # the seed picks the order
    loader = make(0)
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    rest = [batch[0].tolist() for batch in batches]
    again = make(1)
    again.load_state_dict(state)
    assert [batch[0].tolist() for batch in again] == rest


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(3))


def test_a_copy_or_pickle_of_a_driven_scheduler_is_the_plain_torch_one() -> None:
    import copy
    import pickle

    from cs_lightning.schedulers.from_torch import closed_form_of, drive

    optimizer = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
    scheduler = torch_lr.StepLR(optimizer, step_size=2, gamma=0.5)
    assert drive(scheduler) and closed_form_of(scheduler) is not None
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    for twin in (copy.deepcopy(scheduler), pickle.loads(pickle.dumps(scheduler))):
        assert type(twin) is torch_lr.StepLR and closed_form_of(twin) is None
        assert twin.state_dict().keys() == scheduler.state_dict().keys() and twin.last_epoch == 3
        assert twin.get_last_lr() == pytest.approx([0.05])


class _Values(_Recorder):
    """An in-memory logger keeping every value by (name, step)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[tuple[str, int], float] = {}

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        super().log_metrics(metrics, step)
        self.values.update({(name, step): float(value) for name, value in metrics.items()})


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_learning_rate_monitor_logs_the_same_rates_and_momentum(strategy: str) -> None:
    from lightning.pytorch.callbacks import LearningRateMonitor

    def logged(strategy: str) -> dict[tuple[str, int], float]:
        class OneCycle(_Logged):
            def configure_optimizers(self) -> Any:
                optimizer = torch.optim.SGD(
                    [{"params": self.net.weight}, {"params": self.net.bias, "lr": 0.05}], lr=0.1, momentum=0.9
                )
                schedule = torch_lr.OneCycleLR(optimizer, max_lr=[0.5, 0.25], total_steps=20)
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

        recorder = _Values()
        monitor = LearningRateMonitor(logging_interval="step", log_momentum=True)
        _trainer(strategy, 20, logger=recorder, log_every_n_steps=1, callbacks=[monitor]).fit(OneCycle(), _data())
        return {key: value for key, value in recorder.values.items() if key[0] != "train_loss"}

    got = logged(strategy)
    expected = logged("auto") if strategy != "auto" else got
    assert got.keys() == expected.keys()
    assert {name for name, _ in got} == {
        "lr-SGD/pg1",
        "lr-SGD/pg2",
        "lr-SGD/pg1-momentum",
        "lr-SGD/pg2-momentum",
        "epoch",
    }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=0.0), key


# -- 10. StochasticWeightAveraging resumes, its SWALR restored by the callback itself -----------------


class _Averaged(_Regressor):
    """SGD, and a scheduler of the user's own if given: SWA trains with its SWALR in its place."""

    def __init__(self, scheduler: Any = None) -> None:
        super().__init__()
        self.scheduler = scheduler

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        if self.scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.scheduler(optimizer), "interval": "epoch"}}


def _fit_averaged(strategy: str, ckpt_path: Any = None, scheduler: Any = None) -> tuple[_Averaged, dict[str, Any]]:
    """Four epochs of 12 steps, averaged from the second (SWA's epochs count from 1), a checkpoint in ckpt/
    after each epoch (before SWA puts the average into the model as training ends): the model, the last one."""
    from lightning.pytorch.callbacks import StochasticWeightAveraging

    torch.manual_seed(0)
    module = _Averaged(scheduler)
    swa = StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2, annealing_epochs=3)
    saver = ModelCheckpoint(dirpath="ckpt", save_top_k=-1, save_on_train_epoch_end=True)
    run = _trainer(strategy, -1, max_epochs=4, enable_checkpointing=True, callbacks=[swa, saver])
    run.fit(module, _data(), ckpt_path=ckpt_path)
    return module, torch.load("ckpt/epoch=3-step=48.ckpt", weights_only=False)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_run_with_stochastic_weight_averaging_resumes_bit_identical(strategy: str, tmp_path: Any) -> None:
    """Under csx the resume was refused: "holds 1 scheduler, this run 0 schedulers". The checkpoint's one
    scheduler state is SWA's SWALR, which SWA loads itself after dropping the run's schedulers."""
    whole, expected = _fit_averaged(strategy)
    (tmp_path / "ckpt").rename(tmp_path / "whole")
    inside = tmp_path / "whole" / "epoch=2-step=36.ckpt"  # two epochs averaged, SWALR two steps on
    assert torch.load(inside, weights_only=False)["lr_schedulers"][0]["_step_count"] == 3
    resumed, actual = _fit_averaged(strategy, ckpt_path=inside)
    # the model holds the average once training ends; the checkpoint the weights trained, and SWA's state
    assert all(torch.equal(a, b) for a, b in zip(resumed.state_dict().values(), whole.state_dict().values()))
    if strategy != "auto":  # and the same numbers as without csx
        (tmp_path / "ckpt").rename(tmp_path / "resumed")
        under_auto, _ = _fit_averaged("auto")
        assert all(torch.equal(a, b) for a, b in zip(resumed.state_dict().values(), under_auto.state_dict().values()))
    assert flat_state(actual["state_dict"]) == flat_state(expected["state_dict"])
    averaged, expected_averaged = (c["callbacks"]["StochasticWeightAveraging"] for c in (actual, expected))
    assert averaged["n_averaged"] == expected_averaged["n_averaged"] == 3
    assert flat_state(averaged) == flat_state(expected_averaged)
    assert flat_state(actual["optimizer_states"]) == flat_state(expected["optimizer_states"])
    assert flat_state(actual["lr_schedulers"]) == flat_state(expected["lr_schedulers"])


def test_a_checkpoint_from_before_averaging_starts_still_refuses_another_scheduler() -> None:
    """Only the state SWA restores itself is left out of the check: the user's own scheduler, saved before
    SWA's epochs start, is still compared with the one this run configures."""
    from cs_lightning.errors import CheckpointSchedulersError

    def linear(optimizer: Any) -> Any:
        return cs.LinearLR(optimizer, initial_learning_rate=0.05, end_learning_rate=0.01, total_iters=4)

    def cosine(optimizer: Any) -> Any:
        return cs.CosineDecayLR(optimizer, initial_learning_rate=0.05, end_learning_rate=0.01, total_iters=4)

    _fit_averaged("csx", scheduler=linear)
    with pytest.raises(CheckpointSchedulersError, match="schedulers\\[0\\] is LinearLR in the checkpoint but Cos"):
        _fit_averaged("csx", ckpt_path="ckpt/epoch=0-step=12.ckpt", scheduler=cosine)


# -- 11. an lr set from outside, or a fractional epoch: torch's own steps take over ----------------


class _WarmedUp(_Regressor):
    """Lightning's docs' warm-up recipe (the lr written in optimizer_step for the first steps) over a torch
    scheduler of the user's, then a one-off write at step 9 (a cool-down set by hand)."""

    def __init__(self, make_scheduler: Any) -> None:
        super().__init__()
        self.make_scheduler = make_scheduler

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": self.make_scheduler(optimizer), "interval": "step"},
        }

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        step = self.trainer.global_step
        if step < 3 or step == 9:
            for group in optimizer.param_groups:
                group["lr"] = 0.1 * (step + 1) / 4 if step < 3 else 0.01
        optimizer.step(closure=optimizer_closure)


SET_FROM_OUTSIDE = {
    # torch's recursion adds the cosine's increment to the value written; past T_max it climbs back
    "CosineAnnealingLR": lambda o: torch_lr.CosineAnnealingLR(o, T_max=5),
    # at the milestone torch's SequentialLR drops what was written; the closed form kept it as a factor
    "SequentialLR": lambda o: torch_lr.SequentialLR(
        o, [torch_lr.LinearLR(o, 0.5, total_iters=4), torch_lr.CosineAnnealingLR(o, T_max=8)], milestones=[6]
    ),
    # 0 from step 4 on: a value written there was refused as "no multiple of 0"
    "PolynomialLR": lambda o: torch_lr.PolynomialLR(o, total_iters=4),
    # LambdaLR ignores what was written at its next step: kept as a factor, it moved the last bits
    "LambdaLR": lambda o: torch_lr.LambdaLR(o, lambda step: 0.9**step),
}


def _fit_warmed_up(strategy: str, case: str, steps: int = 14, **kwargs: Any) -> tuple[_WarmedUp, _Rates]:
    torch.manual_seed(0)
    module, rates = _WarmedUp(SET_FROM_OUTSIDE[case]), _Rates()
    ckpt_path = kwargs.pop("ckpt_path", None)
    run = _trainer(strategy, steps, callbacks=[rates, *kwargs.pop("callbacks", [])], **kwargs)
    run.fit(module, _data(n=28), ckpt_path=ckpt_path)
    return module, rates


@pytest.mark.parametrize("case", SET_FROM_OUTSIDE)
def test_an_lr_set_from_outside_goes_on_as_torchs_steps_go_on(case: str) -> None:
    """Once torch's step gives other values than the closed form (after the recipe's first write), they are
    torch's own, bit for bit; LambdaLR ignores what was written, so its closed form goes on."""
    module, expected = _fit_warmed_up("auto", case)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        csx, rates = _fit_warmed_up("csx", case)
    said = [str(w.message) for w in caught if issubclass(w.category, HostSchedulerWarning)]
    if case == "LambdaLR":
        assert said == []
        _close(rates.lrs, expected.lrs)
        return
    assert len(said) == 1 and f"torch {case}: torch's step gives param_groups[0] lr=" in said[0]
    assert "at step 1, where the closed form gives" in said[0]
    assert rates.lrs == expected.lrs
    assert rates.last_lrs == expected.last_lrs
    assert flat_state(csx.state_dict()) == flat_state(module.state_dict())


@pytest.mark.parametrize("case", SET_FROM_OUTSIDE)
def test_a_checkpoint_saved_after_an_lr_was_set_from_outside_resumes_as_torch(case: str, tmp_path: Any) -> None:
    """7 batches an epoch: the checkpoint at step 14 is an epoch's end, after the write at step 9. Where torch's
    value then is not the schedule's (PolynomialLR keeps the 0.01 written where the schedule is 0), torch's steps
    take over as the checkpoint loads. (Lightning replays a batch after an epoch-end checkpoint, under any
    strategy: the resumed runs are compared.)"""
    resumed = {}
    for strategy in STRATEGIES:
        saver = ModelCheckpoint(dirpath=tmp_path / strategy, save_top_k=-1)  # each epoch's end
        _fit_warmed_up(strategy, case, steps=21, enable_checkpointing=True, callbacks=[saver])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, resumed[strategy] = _fit_warmed_up(
                strategy, case, steps=21, ckpt_path=tmp_path / strategy / "epoch=1-step=14.ckpt"
            )
    _close(resumed["csx"].lrs, resumed["auto"].lrs)
    assert len(resumed["csx"].lrs) == 7
    said = [str(w.message) for w in caught if issubclass(w.category, HostSchedulerWarning)]  # csx's resume
    if case == "PolynomialLR":
        assert said == [
            "cs_lightning: torch PolynomialLR: the checkpoint gives param_groups[0] lr=0.01 at step 14, where the "
            "closed form gives 0 (the lr was set from outside, or the step is not a whole number); torch's own "
            "steps take over from here, on the host, as no closed form gives their values from there"
        ]


def test_warm_restarts_stepped_with_a_fractional_epoch_as_torchs_docs_show() -> None:
    class Restarting(_Regressor):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            restarts = torch_lr.CosineAnnealingWarmRestarts(optimizer, T_0=2)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": restarts, "interval": "step"}}

        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            done = self.trainer.fit_loop.epoch_loop.batch_progress.current.completed
            scheduler.step(self.current_epoch + done / self.trainer.num_training_batches)

    runs = {}
    for strategy in STRATEGIES:
        runs[strategy] = rates = _Rates()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _trainer(strategy, 12, callbacks=[rates]).fit(Restarting(), _data(n=16))
    said = "torch CosineAnnealingWarmRestarts: torch's step gives param_groups[0] lr=0.096193977 at step 0"
    assert any(said in str(w.message) for w in caught)  # csx's run: step(0.25)
    assert runs["csx"].lrs == runs["auto"].lrs
    assert len({lr for (lr,) in runs["csx"].lrs[:4]}) == 3  # within the first epoch: 0.1 twice, then two more


def test_a_batch_size_search_leaves_the_generators_as_under_auto(tmp_path: Any) -> None:
    """BatchSizeFinder restores the checkpoint it took before its trials: the weights, not csx's generators
    (under `auto` the fit goes on drawing after the trials' draws; the LR finder isolates its own)."""
    from lightning.pytorch.callbacks import BatchSizeFinder

    class Searched(_Shuffled):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 4

        def train_dataloader(self) -> DataLoader:
            x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.batch_size, shuffle=True)

    results = {}
    for strategy in STRATEGIES:
        torch.manual_seed(0)
        model = Searched()
        finder = BatchSizeFinder(max_trials=2, steps_per_trial=2)
        trainer = _trainer(
            strategy, -1, max_epochs=1, limit_train_batches=5, callbacks=[finder], default_root_dir=tmp_path
        )
        trainer.fit(model)
        results[strategy] = (model.batch_size, model.state_dict(), torch.rand(3))
    (size, weights, drawn), (csx_size, csx_weights, csx_drawn) = results["auto"], results["csx"]
    assert size == csx_size
    assert all(torch.equal(csx_weights[key], value) for key, value in weights.items())
    assert torch.equal(csx_drawn, drawn)


class _OnPlateau(_Shuffled):
    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        plateau = torch_lr.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "train_loss"}}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss)
        return loss


def test_a_scheduler_left_on_the_host_is_warned_of_at_the_users_configure_optimizers() -> None:
    with pytest.warns(HostSchedulerWarning, match="ReduceLROnPlateau is not converted") as caught:
        _trainer("csx", 2).fit(_OnPlateau())
    (warning,) = [w for w in caught if issubclass(w.category, HostSchedulerWarning)]
    code = _OnPlateau.configure_optimizers.__code__
    assert (warning.filename, warning.lineno) == (code.co_filename, code.co_firstlineno)
