"""TimeToFirstLoss: one log line and ttfl/* metrics at the first loss, with any strategy."""

import csv
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import LearningRateFinder
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.tuner import Tuner
from lightning_models import Losses, Regressor, SkipsFirst, data, fit, trainer
from torch.utils.data import DataLoader

from cs_lightning import TimeToFirstLoss


def test_with_the_default_strategy(caplog: pytest.LogCaptureFixture) -> None:
    clock = TimeToFirstLoss()
    with caplog.at_level(logging.INFO):
        _, losses = fit(Regressor(), "auto", steps=3, callbacks=[clock], logger=CSVLogger("logs"))
    assert set(clock.metrics) == {"ttfl/total", "ttfl/setup", "ttfl/first_step", "ttfl/loss"}
    assert clock.metrics["ttfl/loss"] == losses.values[0].item()
    assert clock.metrics["ttfl/total"] == pytest.approx(clock.metrics["ttfl/setup"] + clock.metrics["ttfl/first_step"])
    assert all(value > 0 for name, value in clock.metrics.items() if name != "ttfl/loss")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss")]
    assert len(lines) == 1 and f"first loss {losses.values[0].item():.6g}" in lines[0]
    rows = list(csv.DictReader(Path("logs/lightning_logs/version_0/metrics.csv").open()))
    assert float(rows[0]["ttfl/total"]) == pytest.approx(clock.metrics["ttfl/total"])
    # the first batch's row, as `self.log` writes it (was step 1, no epoch)
    assert (rows[0]["epoch"], rows[0]["step"]) == ("0", "0")


def test_phases_a_strategy_adds_are_reported_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = TimeToFirstLoss()
    clock.add_phase("materialize", 0.25)
    clock.add_phase("materialize", 0.25)
    with caplog.at_level(logging.INFO):
        fit(Regressor(), "auto", steps=1, callbacks=[clock])
    assert clock.metrics["ttfl/materialize"] == 0.5
    assert any("materialize 0.50 s" in record.getMessage() for record in caplog.records)


def test_each_phase_is_said_within_the_part_it_fell_in(caplog: pytest.LogCaptureFixture) -> None:
    """Listed after both parts, the phases read as if they added up to them."""
    clock = TimeToFirstLoss()

    class InTheStep(Callback):
        def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
            clock.add_phase("trace", 0.125)

    clock.add_phase("construct", 0.25)
    clock.add_phase("materialize", 0.5)
    with caplog.at_level(logging.INFO):
        fit(Regressor(), "auto", steps=1, callbacks=[clock, InTheStep()])
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss")]
    m = clock.metrics
    assert line == (
        f"Time to first loss: {m['ttfl/total']:.2f} s (setup {m['ttfl/setup']:.2f} s, of which construct 0.25 s and"
        f" materialize 0.50 s; first step {m['ttfl/first_step']:.2f} s, of which trace 0.12 s); first loss"
        f" {m['ttfl/loss']:.6g}"
    )


@pytest.mark.parametrize("strategy", ["auto", "csx"])
def test_the_clock_starts_once_and_reports_once_per_fit(strategy: str, caplog: pytest.LogCaptureFixture) -> None:
    """A second fit with the same callback reported nothing (its clock had reported once)."""
    clock = TimeToFirstLoss()
    clock.start(at=0.0)
    clock.start()  # already running: ignored
    before = time.perf_counter()
    with caplog.at_level(logging.INFO):
        fit(Regressor(), strategy, steps=3, callbacks=[clock])
        first = dict(clock.metrics)
        assert first["ttfl/setup"] > before  # measured from the given start, 0.0
        fit(Regressor(), strategy, steps=2, callbacks=[clock])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss")]
    assert len(lines) == 2
    assert 0 < clock.metrics["ttfl/setup"] < first["ttfl/setup"]  # the second fit's own clock


class FailsFirst(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.fail:
            raise RuntimeError("a bug, fixed before the next fit")
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("strategy", ["auto", "csx"])
def test_a_fit_that_failed_before_its_first_loss_leaves_no_time_to_the_next(strategy: str) -> None:
    """The next fit kept the failed one's start: its time to first loss counted the pause in between."""
    clock, model = TimeToFirstLoss(log_metrics=False), FailsFirst()
    with pytest.raises(RuntimeError, match="a bug"):
        fit(model, strategy, steps=1, callbacks=[clock])
    time.sleep(1.0)
    model.fail = False
    started = time.perf_counter()
    fit(model, strategy, steps=1, callbacks=[clock])
    assert clock.metrics["ttfl/total"] <= time.perf_counter() - started


def test_csx_reports_without_being_asked(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        fit(Regressor(), "csx", steps=1)
    assert sum(r.getMessage().startswith("Time to first loss") for r in caplog.records) == 1


def test_negative_phase_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"seconds=-1"):
        TimeToFirstLoss().add_phase("trace", -1)


class Returned(Regressor):
    """Keeps every loss its training_step returned, before Lightning divides it by accumulate_grad_batches."""

    def __init__(self) -> None:
        super().__init__()
        self.returned: list[torch.Tensor] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.returned.append(loss.detach().clone())  # read after the step: no host read in it
        return loss


@pytest.mark.parametrize("accumulate", [1, 3])
@pytest.mark.parametrize("strategy", ["auto", "csx"])
def test_the_callback_reports_the_loss_training_step_returned(strategy: str, accumulate: int) -> None:
    clock, model = TimeToFirstLoss(), Returned()
    fit(model, strategy, steps=2, callbacks=[clock], accumulate_grad_batches=accumulate)
    assert clock.metrics["ttfl/loss"] == pytest.approx(model.returned[0].item(), rel=1e-6, abs=0)


@pytest.mark.parametrize("accumulate", [1, 3])
def test_csx_prints_the_loss_training_step_returned(caplog: pytest.LogCaptureFixture, accumulate: int) -> None:
    model = Returned()
    with caplog.at_level(logging.INFO):
        fit(model, "csx", steps=2, accumulate_grad_batches=accumulate)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss")]
    assert len(lines) == 1 and lines[0].endswith(f"first loss {model.returned[0].item():.6g}")


class SlowSkip(SkipsFirst):
    """Takes 0.2 s over the batch it skips: time before the first loss."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        if batch_idx == 0:
            time.sleep(0.2)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize(("strategy", "callback"), [("auto", True), ("csx", True), ("csx", False)])
def test_a_skipped_first_batch_is_no_loss_the_clock_runs_to_the_next_one(
    strategy: str, callback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    _, auto = fit(SkipsFirst(), "auto", steps=3)
    first_loss = auto.values[0].item()  # the second batch's: the first returned None
    clock = TimeToFirstLoss()
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO):
        fit(SlowSkip(), strategy, steps=3, callbacks=[clock] if callback else [])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss")]
    assert len(lines) == 1 and lines[0].endswith(f"first loss {first_loss:.6g}")
    if callback:
        assert clock.metrics["ttfl/loss"] == first_loss
        assert clock.metrics["ttfl/first_step"] >= 0.2  # the skipped batch counts
        assert clock.metrics["ttfl/total"] == pytest.approx(
            clock.metrics["ttfl/setup"] + clock.metrics["ttfl/first_step"]
        )


def test_the_line_is_not_written_onto_the_progress_bar(tmp_path: Path) -> None:
    """Lightning draws its bar on stdout, the line goes to stderr: a terminal shows both in one stream,
    where the line must start a line of its own, not continue the bar's."""
    script = (
        "from lightning.pytorch import Trainer; from lightning_models import Regressor, data; "
        "Trainer(strategy='csx', max_steps=3, logger=False, enable_checkpointing=False,"
        " enable_model_summary=False).fit(Regressor(), data())"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout
    before, line, _ = done.stdout.partition("Time to first loss:")
    assert line and "Epoch 0:" in before  # the bar was drawn before the line was written
    assert re.split(r"[\r\n]", before)[-1].strip() == ""  # ... and cleared: the line starts the row


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss")]


class Batched(Regressor):
    """Its loader's batch size is an attribute, for Tuner.scale_batch_size."""

    def __init__(self) -> None:
        super().__init__(build_in="configure_model")
        self.batch_size = 2

    def train_dataloader(self) -> DataLoader:
        return data(batch_size=self.batch_size)


def _find_lr(tuner: Tuner, model: Batched) -> None:
    tuner.lr_find(model, num_training=8, update_attr=False)


def _scale_batch_size(tuner: Tuner, model: Batched) -> None:
    tuner.scale_batch_size(model, mode="power", steps_per_trial=2, max_trials=3)


@pytest.mark.parametrize("tune", [_find_lr, _scale_batch_size])
@pytest.mark.parametrize(("strategy", "callback"), [("auto", True), ("csx", True), ("csx", False)])
def test_a_tuner_reports_nothing_and_the_fit_after_it_one_line(
    tune: Callable[[Tuner, Batched], None], strategy: str, callback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Under csx the trial steps of Tuner.lr_find and Tuner.scale_batch_size printed a line of their own: two
    lines for one fit. They run on a state restored afterwards, not the training's; a TimeToFirstLoss callback
    never saw them."""
    losses = Losses()
    run = trainer(strategy, max_steps=3, callbacks=[TimeToFirstLoss(), losses] if callback else [losses])
    model = Batched()
    with caplog.at_level(logging.INFO):
        tune(Tuner(run), model)
        assert _lines(caplog) == []
        run.fit(model)
    lines = _lines(caplog)
    assert len(lines) == 1 and lines[0].endswith(f"first loss {losses.values[0].item():.6g}")


@pytest.mark.parametrize(("strategy", "callback"), [("auto", True), ("csx", True), ("csx", False)])
def test_a_learning_rate_finder_callback_the_line_comes_at_the_first_step_after_its_search(
    strategy: str, callback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A LearningRateFinder searches as the fit starts, then the training runs, in the same fit: under csx the line
    came at the search's first trial step."""
    losses = Losses()
    finder = LearningRateFinder(num_training_steps=8, update_attr=False)
    with caplog.at_level(logging.INFO):
        fit(Regressor(), strategy, steps=3, callbacks=[finder, losses, *([TimeToFirstLoss()] if callback else [])])
    messages = [r.getMessage() for r in caplog.records]
    restored = next(k for k, message in enumerate(messages) if message.startswith("Restored all states"))
    lines = _lines(caplog)
    assert len(lines) == 1 and messages.index(lines[0]) > restored  # after the search's state was put back
    assert lines[0].endswith(f"first loss {losses.values[0].item():.6g}")
