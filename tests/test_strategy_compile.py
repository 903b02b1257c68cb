"""compile=True: forward and update compiled once; a changing closed-form schedule causes no recompile."""

import pytest
import torch
from lightning_models import Regressor, fit
from torch._dynamo.backends.registry import lookup_backend

from cs_lightning import CSXStrategy


class CountingBackend:
    """A torch.compile backend that counts the graphs it is asked to compile (each recompile is one more)."""

    def __init__(self) -> None:
        self.compiled = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> object:
        self.compiled += 1
        return lookup_backend("eager")(graph, example_inputs)


def test_200_steps_of_a_changing_schedule_compile_forward_and_update_once() -> None:
    backend = CountingBackend()
    model = Regressor(scheduler=True)
    run, losses = fit(model, CSXStrategy(compile=True, compile_backend=backend), steps=200)
    assert len(losses.values) == 200 and all(torch.isfinite(v) for v in losses.values)
    assert backend.compiled == 2  # the forward graph and the optimizer-update graph, never again
    scheduler = run.lr_scheduler_configs[0].scheduler
    lr = run.optimizers[0].param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.dim() == 0  # held as a tensor, updated in place
    assert torch.equal(lr, scheduler.values([200])[0, 0])
    assert scheduler.values([0])[0, 0] != lr  # the schedule did change


def test_a_new_fit_compiles_afresh_instead_of_piling_up_recompiles() -> None:
    backends = [CountingBackend() for _ in range(3)]
    for backend in backends:
        fit(Regressor(scheduler=True), CSXStrategy(compile=True, compile_backend=backend), steps=3)
    assert [b.compiled for b in backends] == [2, 2, 2]


class SamplesAtTheEnd(Regressor):
    """Calls the model outside the training step, at ten batch sizes, as a sampling hook does."""

    def on_train_end(self) -> None:
        torch.manual_seed(0)
        self.sampled = [self(torch.randn(n, 6)) for n in range(1, 11)]


def test_only_the_training_step_runs_compiled_calls_in_hooks_run_eagerly() -> None:
    backend = CountingBackend()
    model = SamplesAtTheEnd()
    fit(model, CSXStrategy(compile=True, compile_backend=backend), steps=3)
    assert backend.compiled == 2  # ten new shapes in on_train_end: no capture, no recompile limit
    torch.manual_seed(0)
    eager = [model(torch.randn(n, 6)) for n in range(1, 11)]
    assert all(torch.equal(a, b) for a, b in zip(model.sampled, eager))


def test_a_misspelled_backend_is_named_with_the_closest_one() -> None:
    model = Regressor()
    with pytest.raises(
        ValueError, match=r"compile_backend='indcutor' is not a torch.compile backend; did you mean 'inductor'"
    ):
        fit(model, CSXStrategy(compile=True, compile_backend="indcutor"), steps=1)
    assert "forward" not in model.__dict__ and "forward" not in model.net.__dict__
