"""Stock torch schedulers converted to closed forms give torch's own learning rates."""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.optim import lr_scheduler as L

from cs_lightning import schedulers as cs
from cs_lightning.schedulers.from_torch import (
    GroupScaledLR,
    HostSchedulerWarning,
    NotConvertible,
    closed_form_of,
    convert_lightning_configs,
    convert_scheduler,
    drive,
)

STEPS = 1000


def _optimizer(*lrs: float) -> torch.optim.Optimizer:
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs]
    return torch.optim.SGD(groups, lr=lrs[0])


def _ramp_then_decay(k):
    k = torch.as_tensor(k)
    return torch.where(k < 100, (k + 1) / 100, 0.999 ** (k - 99))


# Each stock scheduler, with the arguments a project would pass.
CASES = {
    "StepLR": lambda o: L.StepLR(o, step_size=30, gamma=0.7),
    "MultiStepLR": lambda o: L.MultiStepLR(o, milestones=[100, 350, 700], gamma=0.3),
    "ExponentialLR": lambda o: L.ExponentialLR(o, gamma=0.995),
    "CosineAnnealingLR": lambda o: L.CosineAnnealingLR(o, T_max=300, eta_min=1e-4),
    "LinearLR": lambda o: L.LinearLR(o, start_factor=0.05, end_factor=1.0, total_iters=400),
    "PolynomialLR": lambda o: L.PolynomialLR(o, total_iters=800, power=2.0),
    "ConstantLR": lambda o: L.ConstantLR(o, factor=0.25, total_iters=150),
    "ConstantLR-total_iters_0": lambda o: L.ConstantLR(o, factor=0.25, total_iters=0),  # factor forever
    "SequentialLR-from-ConstantLR-total_iters_0": lambda o: L.SequentialLR(
        o, [L.ConstantLR(o, factor=0.25, total_iters=0), L.StepLR(o, step_size=50, gamma=0.5)], milestones=[30]
    ),
    "OneCycleLR": lambda o: L.OneCycleLR(o, max_lr=0.5, total_steps=STEPS + 1, cycle_momentum=False),
    "OneCycleLR-3phase-linear": lambda o: L.OneCycleLR(
        o, max_lr=0.5, total_steps=STEPS + 1, three_phase=True, anneal_strategy="linear", cycle_momentum=False
    ),
    "CyclicLR": lambda o: L.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=120, step_size_down=80, cycle_momentum=False
    ),
    "CyclicLR-triangular2": lambda o: L.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=120, mode="triangular2", cycle_momentum=False
    ),
    "CyclicLR-exp_range": lambda o: L.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=120, mode="exp_range", gamma=0.998, cycle_momentum=False
    ),
    "CosineAnnealingWarmRestarts": lambda o: L.CosineAnnealingWarmRestarts(o, T_0=50, T_mult=2, eta_min=1e-3),
    "SequentialLR": lambda o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.01, total_iters=100), L.CosineAnnealingLR(o, T_max=900)], milestones=[100]
    ),
    # a stage need not last its scheduler's total_iters (a closed-form SequentialLR takes any milestones)
    "SequentialLR-stage-outlasting-its-scheduler": lambda o: L.SequentialLR(
        o, [L.LinearLR(o, 0.1, 1.0, total_iters=5), L.ExponentialLR(o, 0.9)], milestones=[10]
    ),
    "SequentialLR-warmup-cut-short": lambda o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.01, total_iters=100), L.CosineAnnealingLR(o, T_max=900)], milestones=[50]
    ),
    "SequentialLR-from-ExponentialLR": lambda o: L.SequentialLR(
        o, [L.ExponentialLR(o, gamma=0.99), L.StepLR(o, step_size=50, gamma=0.5)], milestones=[120]
    ),
    "ChainedScheduler": lambda o: L.ChainedScheduler(
        [
            L.ConstantLR(o, factor=0.1, total_iters=20),
            L.ExponentialLR(o, gamma=0.998),
            L.LinearLR(o, start_factor=0.5, total_iters=50),
        ]
    ),
    "LambdaLR": lambda o: L.LambdaLR(o, _ramp_then_decay),
    # Python numbers meeting the step tensor: float64 under conversion, as in torch
    "LambdaLR-power": lambda o: L.LambdaLR(o, lambda k: 0.999**k),
    "LambdaLR-linear": lambda o: L.LambdaLR(o, lambda k: 1 - k / STEPS),
    "MultiplicativeLR": lambda o: L.MultiplicativeLR(o, lambda step: 0.997),
}


def _assert_relative(got, expected, rel=1e-6):
    """Every step, every group, within ``rel`` of torch's value (no absolute floor: a
    schedule reaching 0 must reach it too)."""
    torch.testing.assert_close(got, expected, rtol=rel, atol=0.0)


def _torch_and_converted(make, lrs):
    """Learning rates per step of torch's own stepping and of the converted scheduler."""
    reference_opt, converted_opt = _optimizer(*lrs), _optimizer(*lrs)
    reference = make(reference_opt)
    converted = convert_scheduler(make(converted_opt), strict=True)
    expected, got = [], []
    for _ in range(STEPS):
        expected.append([float(g["lr"]) for g in reference_opt.param_groups])
        got.append([float(g["lr"]) for g in converted_opt.param_groups])
        reference_opt.step()
        reference.step()
        converted.step()
    return torch.tensor(expected, dtype=torch.float64), torch.tensor(got, dtype=torch.float64), converted


@pytest.mark.parametrize("name", CASES)
def test_converted_schedule_equals_torch_stepping(name):
    expected, got, converted = _torch_and_converted(CASES[name], (0.1,))
    assert isinstance(converted, cs.Scheduler)
    _assert_relative(got, expected)
    _assert_relative(converted.values(range(STEPS)), expected)  # the same numbers, all at once


@pytest.mark.parametrize(
    "name", ["StepLR", "LinearLR", "ConstantLR", "SequentialLR", "ChainedScheduler", "LambdaLR", "MultiplicativeLR"]
)
def test_param_groups_with_different_base_rates(name):
    expected, got, converted = _torch_and_converted(CASES[name], (0.1, 0.02))
    assert isinstance(converted, GroupScaledLR)
    _assert_relative(got, expected)


def test_values_match_stepping_and_groups_are_left_alone():
    optimizer = _optimizer(0.1, 0.02)
    converted = convert_scheduler(L.StepLR(optimizer, step_size=3, gamma=0.5))
    assert set(optimizer.param_groups[1]) == set(_optimizer(0.1, 0.02).param_groups[1]) | {"initial_lr"}
    table = converted.values(range(7))
    assert table.dtype == torch.float64  # torch's precision
    _assert_relative(table[:, 1], torch.tensor([0.02] * 3 + [0.01] * 3 + [0.005], dtype=torch.float64), 1e-15)


def test_conversion_starts_at_the_torch_schedulers_step():
    optimizer = _optimizer(1.0)
    scheduler = L.ExponentialLR(optimizer, gamma=0.5)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    converted = convert_scheduler(scheduler)
    assert math.isclose(optimizer.param_groups[0]["lr"], 0.125, rel_tol=1e-6)
    converted.step()
    assert math.isclose(optimizer.param_groups[0]["lr"], 0.0625, rel_tol=1e-6)


def test_conversion_says_what_it_built_in_one_info_line(caplog):
    with caplog.at_level("INFO"):
        convert_scheduler(L.StepLR(_optimizer(0.1), step_size=30, gamma=0.7))
    assert [r.getMessage() for r in caplog.records if r.levelname == "INFO"] == [
        "cs_lightning: torch StepLR converted to the closed form StepLR(initial_learning_rate=0.1, step_size=30, "
        "gamma=0.7)"
    ]


NOT_CONVERTIBLE = {
    "ReduceLROnPlateau": (lambda o: L.ReduceLROnPlateau(o), "monitored metric"),
    "python-only lambda": (lambda o: L.LambdaLR(o, lambda k: 1.0 if k < 10 else 0.1), "tensor of steps"),
    "math on a step": (lambda o: L.LambdaLR(o, lambda k: math.exp(-k / 100)), "tensor of steps"),
    "step-dependent factor": (lambda o: L.MultiplicativeLR(o, lambda k: 1 - 1e-4 * k), "changes with the step"),
    "factor changing after the probed steps": (
        lambda o: L.MultiplicativeLR(o, lambda k: torch.where(torch.as_tensor(k) < 1000, 0.99, 0.9)),
        "changes with the step",
    ),
    "factor reducing the steps": (lambda o: L.MultiplicativeLR(o, lambda k: 0.9 ** (k.max() > 5)), "tensor of steps"),
    "OneCycleLR cycling momentum": (lambda o: L.OneCycleLR(o, max_lr=0.1, total_steps=100), "cycle_momentum"),
    "CyclicLR cycling momentum": (lambda o: L.CyclicLR(o, base_lr=0.01, max_lr=0.1), "cycle_momentum"),
    "custom scale_fn": (
        lambda o: L.CyclicLR(o, 0.01, 0.1, scale_fn=lambda c: 0.5**c, cycle_momentum=False),
        "scale_fn",
    ),
    "chain with a cosine": (
        lambda o: L.ChainedScheduler([L.ExponentialLR(o, 0.9), L.CosineAnnealingLR(o, 10)]),
        "does not just multiply",
    ),
    "sequence continuing a rate": (
        lambda o: L.SequentialLR(o, [L.ConstantLR(o, 0.5, 5), L.MultiplicativeLR(o, lambda k: 0.9)], [5]),
        "continues from the learning rate",
    ),
    "sequence restarting a ConstantLR(total_iters=0)": (
        lambda o: L.SequentialLR(o, [L.StepLR(o, 10), L.ConstantLR(o, 0.5, total_iters=0)], [5]),
        "full rate",
    ),
}


@pytest.mark.parametrize("name", NOT_CONVERTIBLE)
def test_not_convertible_warns_once_and_keeps_torch_stepping(name):
    make, reason = NOT_CONVERTIBLE[name]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1, momentum=0.9)
    scheduler = make(optimizer)
    before = [dict(g) for g in optimizer.param_groups]
    with pytest.warns(HostSchedulerWarning, match=reason) as caught:
        assert convert_scheduler(scheduler) is None
    assert len(caught) == 1
    assert [dict(g) for g in optimizer.param_groups] == before


@pytest.mark.parametrize("name", ["ReduceLROnPlateau", "python-only lambda"])
def test_strict_raises_instead(name):
    make, reason = NOT_CONVERTIBLE[name]
    with pytest.raises(NotConvertible, match=reason):
        convert_scheduler(make(_optimizer(0.1)), strict=True)


def test_different_shapes_per_group_are_not_convertible():
    scheduler = L.CosineAnnealingLR(_optimizer(0.1, 0.02), T_max=10, eta_min=1e-3)
    with pytest.raises(NotConvertible, match="eta_min"):
        convert_scheduler(scheduler, strict=True)


def test_closed_form_schedulers_pass_through():
    scheduler = cs.StepLR(_optimizer(0.1), initial_learning_rate=0.1, step_size=2, gamma=0.5)
    assert convert_scheduler(scheduler) is scheduler


def test_lightning_configs_keep_their_interval():
    from lightning.pytorch.utilities.types import LRSchedulerConfig

    optimizer = _optimizer(0.1)
    plateau, step = L.ReduceLROnPlateau(optimizer), L.StepLR(optimizer, 2)
    configs = [
        LRSchedulerConfig(step, interval="epoch", frequency=3),
        LRSchedulerConfig(plateau, monitor="val_loss", reduce_on_plateau=True),
    ]
    with pytest.warns(HostSchedulerWarning):
        convert_lightning_configs(configs)
    assert configs[0].scheduler is step and isinstance(step, L.StepLR)  # the user's object stays
    assert isinstance(closed_form_of(step), cs.StepLR)  # driven by its closed form
    assert closed_form_of(plateau) is None
    assert (configs[0].interval, configs[0].frequency) == ("epoch", 3)
    assert configs[1].scheduler is plateau


# -- a Lightning project returning torch schedulers trains under csx with torch's rates ----

LIGHTNING_CASES = {
    "OneCycleLR per step": (lambda o: L.OneCycleLR(o, max_lr=0.5, total_steps=40, cycle_momentum=False), "step"),
    "StepLR per epoch (bare)": (lambda o: L.StepLR(o, step_size=1, gamma=0.5), None),
    "SequentialLR per step": (
        lambda o: L.SequentialLR(
            o, [L.LinearLR(o, start_factor=0.1, total_iters=10), L.ExponentialLR(o, gamma=0.9)], milestones=[10]
        ),
        "step",
    ),
    "ReduceLROnPlateau on the host": (lambda o: L.ReduceLROnPlateau(o, factor=0.5, patience=0), "step"),
    "LambdaLR returning a tensor per step": (lambda o: L.LambdaLR(o, _ramp_then_decay), "step"),
}


def _fit_and_record_rates(strategy: str, case: str) -> tuple[list[list[float]], object]:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    make, interval = LIGHTNING_CASES[case]

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.head(torch.relu(self.body(x))), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(
                [{"params": self.body.parameters()}, {"params": self.head.parameters(), "lr": 0.02}], lr=0.1
            )
            scheduler = make(optimizer)
            if interval is None:
                return [optimizer], [scheduler]
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": interval, "monitor": "loss"},
            }

    class Rates(pl.Callback):
        def __init__(self) -> None:
            self.seen: list[list[float]] = []

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.seen.append([float(g["lr"]) for g in trainer.optimizers[0].param_groups])

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
    rates = Rates()
    trainer = pl.Trainer(
        strategy=strategy,
        max_steps=40,
        callbacks=[rates],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regression(), DataLoader(data, batch_size=4))
    return rates.seen, trainer.lr_scheduler_configs[0].scheduler


@pytest.mark.parametrize("case", LIGHTNING_CASES)
def test_lightning_project_trains_under_csx_with_torchs_rates(case):
    import cs_lightning  # noqa: F401  registers "csx"

    expected, _ = _fit_and_record_rates("auto", case)
    if "host" in case:
        with pytest.warns(HostSchedulerWarning, match="monitored metric"):
            got, scheduler = _fit_and_record_rates("csx", case)
        assert isinstance(scheduler, L.ReduceLROnPlateau)
        assert len(set(map(tuple, got))) > 1  # it did reduce the rates
    else:
        got, scheduler = _fit_and_record_rates("csx", case)
        assert not isinstance(scheduler, cs.Scheduler)  # the user's torch object, driven by:
        assert isinstance(closed_form_of(scheduler), cs.Scheduler)
    assert len(got) == len(expected) == 40
    _assert_relative(torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64))


def test_a_driven_torch_scheduler_writes_torchs_values_even_negative_ones():
    """torch's linear three-phase OneCycleLR gives a negative lr at step total_steps (Lightning steps
    there after a run's last step); driven by its closed form it gives the same, as under auto."""

    def run(driven):
        optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        scheduler = L.OneCycleLR(optimizer, max_lr=0.5, total_steps=30, three_phase=True, anneal_strategy="linear")
        if driven:
            assert drive(scheduler, strict=True)
        for _ in range(30):
            optimizer.step()
            scheduler.step()
        return optimizer.param_groups[0]["lr"]

    assert run(driven=False) < 0
    assert run(driven=True) == pytest.approx(run(driven=False), rel=1e-9)


def test_a_checkpoint_written_before_the_switch_to_csx_resumes(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    import cs_lightning  # noqa: F401  registers "csx"

    class Project(BoringModel):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [{"scheduler": L.StepLR(optimizer, step_size=2, gamma=0.5), "interval": "step"}]

    def trainer(strategy, steps):
        return pl.Trainer(
            strategy=strategy,
            max_steps=steps,
            logger=False,
            default_root_dir=tmp_path,
            enable_progress_bar=False,
            enable_model_summary=False,
        )

    before = trainer("auto", 5)
    before.fit(Project())
    before.save_checkpoint(tmp_path / "auto.ckpt")
    after = trainer("csx", 8)
    after.fit(Project(), ckpt_path=tmp_path / "auto.ckpt")
    assert isinstance(closed_form_of(after.lr_scheduler_configs[0].scheduler), cs.StepLR)
    assert after.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**4, rel=1e-6)


def test_strict_csx_stops_on_a_scheduler_without_closed_form():
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    from cs_lightning import CSXStrategy

    class PythonOnlyLambda(BoringModel):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": L.LambdaLR(optimizer, lambda k: 0.5 ** min(k, 3)), "interval": "step"},
            }

    trainer = pl.Trainer(
        strategy=CSXStrategy(strict_schedulers=True),
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(NotConvertible, match="LambdaLR is not converted.*tensor of steps"):
        trainer.fit(PythonOnlyLambda())


# -- laws ------------------------------------------------------------------------------

RANDOM_SCHEDULERS = {
    "StepLR": lambda o, r, n: L.StepLR(o, step_size=n, gamma=r),
    "ExponentialLR": lambda o, r, n: L.ExponentialLR(o, gamma=r),
    "LinearLR": lambda o, r, n: L.LinearLR(o, start_factor=r, total_iters=n),
    "MultiplicativeLR": lambda o, r, n: L.MultiplicativeLR(o, lambda k: r),
    "PolynomialLR": lambda o, r, n: L.PolynomialLR(o, total_iters=n, power=1 + r),
}


@given(
    name=st.sampled_from(sorted(RANDOM_SCHEDULERS)),
    lr=st.floats(1e-5, 1.0),
    ratio=st.floats(0.5, 0.999),
    length=st.integers(1, 60),
    steps=st.integers(1, 300),
)
def test_any_arguments_convert_to_torchs_schedule(name, lr, ratio, length, steps):
    make = RANDOM_SCHEDULERS[name]
    reference_opt, converted_opt = _optimizer(lr), _optimizer(lr)
    reference = make(reference_opt, ratio, length)
    converted = convert_scheduler(make(converted_opt, ratio, length), strict=True)
    expected = [reference_opt.param_groups[0]["lr"]]
    for _ in range(steps):
        reference_opt.step()
        reference.step()
        expected.append(reference_opt.param_groups[0]["lr"])
    expected = torch.tensor(expected, dtype=torch.float64)
    _assert_relative(converted.values(range(steps + 1))[:, 0], expected)


def test_group_scaled_resume_equals_uninterrupted():
    def run(interrupt_at: int | None) -> list[float]:
        optimizer = _optimizer(0.1, 0.03)
        scheduler = convert_scheduler(L.ExponentialLR(optimizer, gamma=0.9))
        seen = []
        for step in range(12):
            if step == interrupt_at:
                state = scheduler.state_dict()
                optimizer = _optimizer(0.1, 0.03)
                scheduler = convert_scheduler(L.ExponentialLR(optimizer, gamma=0.9))
                scheduler.load_state_dict(state)
            seen.append([g["lr"] for g in optimizer.param_groups])
            scheduler.step()
        return seen

    assert run(interrupt_at=5) == run(interrupt_at=None)


def test_arguments_the_catalogue_refuses_keep_torch_stepping():
    optimizer = _optimizer(0.1)
    refused = L.PolynomialLR(optimizer, total_iters=10, power=0.0)  # constant 0.1 until step 10
    sequence = L.SequentialLR(
        optimizer,
        [L.LinearLR(optimizer, 0.5, total_iters=4), L.ConstantLR(optimizer, factor=0.2, total_iters=5), refused],
        milestones=[4, 9],
    )
    with pytest.warns(HostSchedulerWarning, match="power"):
        assert convert_scheduler(sequence) is None
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)  # the children built first are undone


@pytest.mark.parametrize("name", CASES)
def test_resumes_from_the_torch_schedulers_state_dict(name):
    """A checkpoint written before the switch to csx holds torch's state dict: the step is read."""
    make = CASES[name]
    before_opt = _optimizer(0.1)
    before = make(before_opt)
    for _ in range(37):
        before_opt.step()
        before.step()
    converted_opt = _optimizer(0.1)
    converted = convert_scheduler(make(converted_opt), strict=True)
    converted.load_state_dict(before.state_dict())
    expected, got = [], []
    for _ in range(20):
        expected.append([float(g["lr"]) for g in before_opt.param_groups])
        got.append([float(g["lr"]) for g in converted_opt.param_groups])
        before_opt.step()
        before.step()
        converted.step()
    _assert_relative(torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64))
    with pytest.raises(ValueError, match="another scheduler class"):
        converted.load_state_dict({"last_epoch": 3})


EDITED_BEFORE_RESUMING = {  # (scheduler in the checkpoint, the code's after an edit, the code's learning rate)
    "CosineAnnealingLR T_max": (
        lambda o: L.CosineAnnealingLR(o, T_max=20),
        lambda o: L.CosineAnnealingLR(o, T_max=40),
        0.1,
    ),
    "StepLR step_size": (lambda o: L.StepLR(o, 4, 0.5), lambda o: L.StepLR(o, 8, 0.5), 0.1),
    "OneCycleLR total_steps": (
        lambda o: L.OneCycleLR(o, 0.5, total_steps=20),
        lambda o: L.OneCycleLR(o, 0.5, total_steps=40),
        0.1,
    ),
    "optimizer lr": (lambda o: L.ExponentialLR(o, 0.8), lambda o: L.ExponentialLR(o, 0.8), 0.05),
    "SequentialLR milestones": (
        lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.1, total_iters=4), L.ExponentialLR(o, 0.9)], milestones=[4]),
        lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.1, total_iters=8), L.ExponentialLR(o, 0.9)], milestones=[8]),
        0.1,
    ),
}


@pytest.mark.parametrize("name", EDITED_BEFORE_RESUMING)
def test_a_driven_scheduler_resumes_with_the_checkpoints_arguments_as_torch_does(name):
    """torch's load_state_dict takes the saved arguments and base learning rates, whatever the code
    says now (a resume after editing max_steps): the closed forms driving it must follow them."""
    saved, edited, edited_lr = EDITED_BEFORE_RESUMING[name]
    optimizer = _optimizer(0.1)
    scheduler = saved(optimizer)
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    checkpoint = (optimizer.state_dict(), scheduler.state_dict())

    def resumed(driven: bool) -> list[float]:
        optimizer = _optimizer(edited_lr)
        scheduler = edited(optimizer)
        assert not driven or drive(scheduler, strict=True)
        optimizer.load_state_dict(checkpoint[0])  # Lightning's order: the optimizers, then the schedulers
        scheduler.load_state_dict(checkpoint[1])
        seen = []
        for _ in range(8):  # OneCycleLR's 20 steps are then not over
            optimizer.step()
            scheduler.step()
            seen.append(float(optimizer.param_groups[0]["lr"]))
        return seen

    _assert_relative(torch.tensor(resumed(driven=True)), torch.tensor(resumed(driven=False)))


def test_a_nested_reason_says_which_child_as_structured_places():
    optimizer = _optimizer(0.1)
    first = L.MultiplicativeLR(optimizer, lambda k: 0.9 ** (k % 2 + 1))
    scheduler = L.SequentialLR(optimizer, [first, L.ConstantLR(optimizer, factor=0.5, total_iters=2)], milestones=[3])
    with pytest.raises(NotConvertible) as info:
        convert_scheduler(scheduler, strict=True)
    error = info.value
    assert error.where == ("torch SequentialLR is not converted to a closed form", "schedulers[0] (MultiplicativeLR)")
    assert error.reason.startswith("its factor changes with the step")
    assert str(error) == ": ".join((*error.where, error.reason))


def test_a_python_only_lambda_is_named_as_the_users_with_what_to_do():
    optimizer = _optimizer(0.1)
    line = inspect.currentframe().f_lineno + 1
    scheduler = L.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / 5))
    with pytest.raises(NotConvertible) as error:
        convert_scheduler(scheduler, strict=True)
    message = str(error.value)
    assert f"its lr_lambda, the lambda at {Path(__file__).name}:{line}, does not work on a tensor of steps" in message
    assert "cs_lightning scheduler" in message and "strict_schedulers=False" in message
    assert "_get_closed_form" not in message and "self.last_epoch" not in message


def _ramp_then_decay_float64(k):
    k = torch.as_tensor(k, dtype=torch.float64)
    return torch.where(k < 100, (k + 1) / 100, 0.999 ** (k - 99))


@pytest.mark.parametrize("lr_lambda", [_ramp_then_decay, _ramp_then_decay_float64], ids=["float32", "float64"])
@pytest.mark.parametrize("how", ["convert", "drive"])
def test_a_lambda_returning_a_tensor_leaves_torchs_tensor_lr(lr_lambda, how):
    """torch's LambdaLR writes ``base_lr * lr_lambda(k)`` as it comes: a tensor from a function returning one,
    filled in place from then on. Its closed form keeps that tensor (the same object, dtype and values) in the
    param groups and in the checkpoints, as torch's own stepping does."""

    def run(converted: bool):
        optimizer = _optimizer(0.1)
        scheduler = L.LambdaLR(optimizer, lr_lambda)
        if converted:
            scheduler = convert_scheduler(scheduler, strict=True) if how == "convert" else scheduler
            assert how == "convert" or drive(scheduler, strict=True)
        held = optimizer.param_groups[0]["lr"]
        seen = []
        for _ in range(150):
            assert optimizer.param_groups[0]["lr"] is held  # filled in place, never replaced
            seen.append(held.clone())
            optimizer.step()
            scheduler.step()
        return torch.stack(seen), optimizer.state_dict()["param_groups"][0]["lr"], scheduler

    expected, expected_saved, reference = run(converted=False)
    got, got_saved, converted = run(converted=True)
    assert expected.dtype == got.dtype == lr_lambda(0).dtype
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0.0)
    assert isinstance(got_saved, torch.Tensor) and got_saved.dtype == expected_saved.dtype
    torch.testing.assert_close(got_saved, expected_saved, rtol=1e-6, atol=0.0)
    if how == "drive":  # torch's state dict: its last learning rates are the same tensors too
        assert all(isinstance(lr, torch.Tensor) for lr in converted.state_dict()["_last_lr"])
        torch.testing.assert_close(converted.state_dict()["_last_lr"], reference.state_dict()["_last_lr"])


def test_a_torch_one_cycle_making_adams_beta1_one_is_not_converted_and_says_why():
    """torch's OneCycleLR writes max_momentum=1.0 into Adam's betas, whose step then raises ZeroDivisionError:
    its closed form refuses the value, so torch's own scheduler keeps running (as without csx), with the reason."""
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = L.OneCycleLR(optimizer, max_lr=0.5, total_steps=10, max_momentum=1.0)
    with pytest.raises(NotConvertible, match=r"OneCycleLR is not converted.*initial_val=1.0, which becomes beta1"):
        drive(scheduler, strict=True)
    with pytest.warns(HostSchedulerWarning, match="torch's Adam needs 0 <= beta1 < 1"):
        assert not drive(scheduler)
    assert optimizer.param_groups[0]["betas"] == (1.0, 0.999)  # torch's own values, untouched


def test_a_tensor_lr_of_the_users_own_is_filled_in_place_as_torchs_schedulers_fill_it():
    """torch's schedulers write into a tensor lr the optimizer holds; a conversion replaced it with a float."""

    def run(driven: bool):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=torch.tensor(0.1, dtype=torch.float64))
        held = optimizer.param_groups[0]["lr"]
        scheduler = L.StepLR(optimizer, step_size=2, gamma=0.5)
        assert not driven or drive(scheduler, strict=True)
        for _ in range(5):
            optimizer.step()
            scheduler.step()
        assert optimizer.param_groups[0]["lr"] is held
        return held, scheduler.state_dict()["_last_lr"]

    expected, got = run(driven=False), run(driven=True)
    assert got[0].dtype == torch.float64 and torch.equal(got[0], expected[0])
    assert torch.equal(got[1][0], expected[1][0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(
    "make",
    [
        lambda o: L.ExponentialLR(o, gamma=0.97),
        lambda o: L.StepLR(o, step_size=5, gamma=0.5),
        lambda o: L.CosineAnnealingLR(o, T_max=40),
    ],
    ids=["ExponentialLR", "StepLR", "CosineAnnealingLR"],
)
def test_a_low_precision_tensor_lr_stays_closed_form(make, dtype: torch.dtype) -> None:
    """torch's step computes in the tensor's dtype, a few units in its last place from the closed form's value
    rounded to it: that is no lr set from outside, and no reason to hand over to torch."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=torch.tensor(0.1, dtype=dtype))
    scheduler = make(optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostSchedulerWarning)
        assert drive(scheduler)
        for _ in range(30):
            optimizer.step()
            scheduler.step()
    assert closed_form_of(scheduler) is not None


def test_the_warning_for_a_scheduler_left_on_the_host_points_at_the_users_code():
    """At the call of convert_scheduler or drive; under the strategy, at configure_optimizers, which is off the
    stack by then (it pointed into cs_lightning)."""
    from lightning.pytorch.utilities.types import LRSchedulerConfig

    for convert in (convert_scheduler, drive):
        with pytest.warns(HostSchedulerWarning) as caught:
            convert(L.ReduceLROnPlateau(_optimizer(0.1)))
        assert (caught[0].filename, caught[0].lineno) == (__file__, inspect.currentframe().f_lineno - 1)
    with pytest.warns(HostSchedulerWarning) as caught:
        convert_lightning_configs([LRSchedulerConfig(L.ReduceLROnPlateau(_optimizer(0.1)))], site=("model.py", 12))
    assert (caught[0].filename, caught[0].lineno) == ("model.py", 12)
