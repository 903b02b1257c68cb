"""step_closure: host reads deferred to the end of the step, run once, in order."""

from typing import Any

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger
from lightning_models import Regressor, data, fit
from torch.overrides import TorchFunctionMode

from cs_lightning import StepClosureCallback, step_closure
from cs_lightning.step_closure import deferred_to_step_end


def test_outside_a_step_the_call_runs_at_once() -> None:
    @step_closure
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert torch.equal(double(torch.tensor(3.0)), torch.tensor(6.0))


def test_inside_a_step_calls_wait_for_its_end_and_keep_their_order() -> None:
    seen: list[tuple[str, float]] = []

    @step_closure
    def record(name: str, value: torch.Tensor) -> None:
        seen.append((name, value.item()))

    with deferred_to_step_end():
        assert record("a", torch.tensor(1.0)) is None
        record(name="b", value=torch.tensor(2.0))
        assert seen == []
    assert seen == [("a", 1.0), ("b", 2.0)]


def test_a_failed_step_drops_its_closures_and_restores_the_state() -> None:
    seen = []
    record = step_closure(seen.append)
    with pytest.raises(KeyError), deferred_to_step_end():
        record(torch.tensor(1.0))
        raise KeyError("step failed")
    assert seen == []
    record(torch.tensor(2.0))  # no step open any more: runs at once
    assert seen == [torch.tensor(2.0)]


def test_tensors_reach_the_closure_on_the_host() -> None:
    seen = []
    record = step_closure(lambda tree: seen.append(tree))
    with deferred_to_step_end():
        record({"loss": torch.tensor(1.0, requires_grad=True) * 2, "n": 3})
    assert seen[0]["n"] == 3
    assert seen[0]["loss"].device.type == "cpu" and not seen[0]["loss"].requires_grad


def test_not_a_function_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"step_closure decorates a function, got 3"):
        step_closure(3)


class _ClosureModel(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.updated_before_closure: list[bool] = []
        self.closures_run_when_step_returns: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self._check(self.net[0].weight.detach().clone())
        self.closures_run_when_step_returns.append(len(self.updated_before_closure))
        return loss

    @step_closure
    def _check(self, weight_during_step: torch.Tensor) -> None:
        self.updated_before_closure.append(not torch.equal(weight_during_step, self.net[0].weight))


@pytest.mark.parametrize("strategy", ["csx", "auto"])
def test_in_training_closures_run_after_the_optimizer_step(strategy: str) -> None:
    callbacks = [] if strategy == "csx" else [StepClosureCallback()]
    model = _ClosureModel()
    fit(model, strategy, steps=3, callbacks=callbacks)
    assert model.closures_run_when_step_returns == [0, 1, 2]  # queued, not run, inside the step
    assert model.updated_before_closure == [True, True, True]  # ran once the update was applied


def test_a_training_step_that_raises_leaves_no_step_open_and_drops_its_closures() -> None:
    seen: list[int] = []
    record = step_closure(seen.append)

    class Fails(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            record(batch_idx)
            if batch_idx == 1:
                raise KeyError("step failed")
            return super().training_step(batch, batch_idx)

    model = Fails()
    with pytest.raises(KeyError):
        fit(model, "csx", steps=4)
    assert seen == [0]  # the failed step's closure was dropped
    record(7)
    assert seen == [0, 7]  # no step left open: runs at once
    assert "forward" not in model.__dict__ and "forward" not in model.net.__dict__  # trace patches undone


def test_accumulated_batches_share_one_step_whose_closures_run_after_the_update() -> None:
    model = _ClosureModel()
    fit(model, "csx", steps=3, accumulate_grad_batches=2)
    assert model.closures_run_when_step_returns == [0, 0, 2, 2, 4, 4]
    assert model.updated_before_closure == [True] * 6


class _ValidatesBetweenAccumulatedBatches(Regressor):
    """Validation after every batch: with two batches a step, it runs inside the open training step."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []
        self.at_validation_end: list[int] = []

    @step_closure
    def record(self, batch_idx: int) -> None:
        self.seen.append(batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.record(batch_idx)

    def on_validation_epoch_end(self) -> None:
        self.at_validation_end.append(len(self.seen))
        self.seen.clear()


@pytest.mark.parametrize("strategy", ["auto", "csx"])
def test_closures_called_in_validation_inside_an_accumulating_step_run_at_once(strategy: str) -> None:
    """Under csx they waited for the open training step, and counted toward the next validation."""
    model = _ValidatesBetweenAccumulatedBatches()
    trainer = Trainer(
        strategy=strategy,
        max_steps=2,
        accumulate_grad_batches=2,
        val_check_interval=1,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, data(), data())
    assert model.at_validation_end == [2, 2, 2, 2]


class _TwoOptimizers(Regressor):
    """Manual optimization: the first layer and the last one each have their own optimizer."""

    def __init__(self) -> None:
        super().__init__(optimizer="sgd")
        self.automatic_optimization = False
        self.last_updated_before_closure: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        for optimizer in self.optimizers():
            optimizer.zero_grad()
        self.manual_backward(loss)
        self._check(self.net[-1].weight.detach().clone())
        for optimizer in self.optimizers():
            optimizer.step()
        return loss

    @step_closure
    def _check(self, weight_during_step: torch.Tensor) -> None:
        self.last_updated_before_closure.append(not torch.equal(weight_during_step, self.net[-1].weight))

    def configure_optimizers(self) -> Any:
        first, last = self.net[0].parameters(), self.net[-1].parameters()
        return torch.optim.SGD(first, lr=0.1), torch.optim.SGD(last, lr=0.1)


def test_under_manual_optimization_closures_run_after_every_optimizer_of_the_step() -> None:
    model = _TwoOptimizers()
    fit(model, "csx", steps=6)  # two optimizer steps per batch
    assert model.last_updated_before_closure == [True, True, True]


class _HostReads(TorchFunctionMode):
    """Counts reads of tensor values to the host (item, float, bool, tolist, numpy, cpu)."""

    READS = {"item", "__float__", "__int__", "__bool__", "tolist", "numpy", "cpu"}

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += getattr(func, "__name__", "") in self.READS
        return func(*args, **(kwargs or {}))


def test_logging_adds_no_host_read_on_steps_that_do_not_log() -> None:
    reads_per_step: list[int] = []

    class Counting(Regressor):
        """Counts host reads from one batch start to the next (logging happens after the batch end hook)."""

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            self._stop_counting()
            self._mode = _HostReads().__enter__()

        def on_train_end(self) -> None:
            self._stop_counting()

        def _stop_counting(self) -> None:
            if getattr(self, "_mode", None) is not None:
                self._mode.__exit__(None, None, None)
                reads_per_step.append(self._mode.count)
                self._mode = None

    # SGD: no step counter for the optimizer itself to read
    fit(Counting(optimizer="sgd"), "csx", steps=8, log_every_n_steps=4, logger=CSVLogger("logs"))
    # step 0 reads the first loss (time to first loss); steps 3 and 7 write the log
    quiet = [count for step, count in enumerate(reads_per_step) if step not in (0, 3, 7)]
    assert quiet == [0] * 5
    assert reads_per_step[0] >= 1 and reads_per_step[3] >= 1 and reads_per_step[7] >= 1
