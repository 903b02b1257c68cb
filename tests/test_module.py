"""CSXModule: the Cerebras Model Zoo Trainer's model/optimizer/schedulers callables as a LightningModule."""

import pytest
import torch
from lightning_models import Losses, trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cs_lightning import CSXModule
from cs_lightning.deferred import is_deferred
from cs_lightning.schedulers import LinearLR


class ReturnsLoss(nn.Module):
    """A Model Zoo style model: forward(batch) returns the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(12, 3)

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.cross_entropy(self.linear(inputs), targets)


def _data() -> DataLoader:
    generator = torch.Generator().manual_seed(3)
    return DataLoader(
        TensorDataset(torch.randn(48, 12, generator=generator), torch.randint(0, 3, (48,), generator=generator)),
        batch_size=8,
    )


def _module(**overrides: object) -> CSXModule:
    arguments = dict(
        model=lambda: nn.Linear(12, 3),
        optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        schedulers=[
            lambda optimizer: LinearLR(optimizer, initial_learning_rate=0.1, end_learning_rate=0.01, total_iters=10)
        ],
        loss=nn.functional.cross_entropy,
    )
    arguments.update(overrides)
    return CSXModule(**arguments)


def _train(module: CSXModule, strategy: str, steps: int = 12) -> tuple[list[torch.Tensor], object]:
    losses = Losses()
    run = trainer(strategy, max_steps=steps, callbacks=[losses])
    run.fit(module, _data())
    return losses.values, run


def test_the_defer_weight_initialization_snippet_trains_under_csx_as_under_auto() -> None:
    torch.manual_seed(0)
    eager, _ = _train(_module(), "auto")
    torch.manual_seed(0)
    csx, run = _train(_module(), "csx")
    assert len(csx) == 12 and all(torch.equal(a, b) for a, b in zip(eager, csx))
    optimizer = run.optimizers[0]
    expected = run.lr_scheduler_configs[0].scheduler.values([12])[0, 0].item()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected)  # stepped every optimizer step
    assert run.callback_metrics["train_loss"] == csx[-1]


def test_model_is_recorded_then_materialized_before_the_optimizer_is_built() -> None:
    seen = []

    def optimizer(model: nn.Module) -> torch.optim.Optimizer:
        seen.append(is_deferred(model))
        return torch.optim.SGD(model.parameters(), lr=0.1)

    _train(_module(optimizer=optimizer, schedulers=[]), "csx", steps=1)
    assert seen == [False]


def test_a_model_whose_forward_returns_the_loss_needs_no_loss_function() -> None:
    losses, _ = _train(_module(model=ReturnsLoss, loss=None), "csx", steps=4)
    assert len(losses) == 4 and losses[-1] < losses[0]


def test_a_built_model_and_optimizer_are_accepted() -> None:
    model = nn.Linear(12, 3)
    losses, _ = _train(
        _module(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), schedulers=[]), "csx", steps=2
    )
    assert len(losses) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(model=3), r"model=3\) must be callable"),
        (dict(schedulers=["LinearLR"]), r"schedulers=\['LinearLR'\]\) must be a list of callables"),
        (dict(schedulers=lambda optimizer: None), r"put the one you have in a list: schedulers=\[...\]"),
        (dict(schedulers=7), r"schedulers=7\) must be a list of callables"),
        (dict(optimizer=torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)), r"optimizer=<Optimizer instance>"),
    ],
)
def test_bad_arguments_name_the_argument_and_the_fix(arguments: dict, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        _module(**arguments)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            dict(model=lambda: None),
            r"CSXModule\(model=...\) returned None \(NoneType\) where a torch.nn.Module was expected; .*"
            r" model=lambda: MyNet",
        ),
        (
            dict(optimizer=lambda model: [model.parameters()]),
            r"CSXModule\(optimizer=...\) returned \[<generator .*\] \(list\) where a torch.optim.Optimizer was"
            r" expected; .* optimizer=lambda model: torch.optim",
        ),
    ],
)
def test_a_callable_returning_the_wrong_thing_is_named_as_fit_starts(arguments: dict, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        _train(_module(**arguments), "csx", steps=1)
