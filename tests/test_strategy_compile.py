"""compile=True: forward and update compiled once; a changing closed-form schedule causes no recompile."""

import re
import subprocess
import sys

import pytest
import torch
from lightning_models import Regressor, fit
from torch._dynamo.backends.registry import lookup_backend

from cs_lightning import CSXDDPStrategy, CSXFSDPStrategy, CSXStrategy


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


class WithTorchStepLR(Regressor):
    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def test_the_compiled_update_leaves_a_torch_schedulers_step_wrapper_in_place(recwarn) -> None:
    """torch's LRScheduler wraps optimizer.step in an instance attribute and warns when it is gone: the
    compiled update shadowed it, then deleted it, and every later scheduler step warned."""
    model = WithTorchStepLR()
    run, losses = fit(model, CSXStrategy(compile=True, compile_backend="eager"), steps=3)
    optimizer = run.optimizers[0]
    assert "step" in optimizer.__dict__  # the wrapper is back
    assert not [w for w in recwarn if "overridden after learning rate scheduler" in str(w.message)]
    assert len(losses.values) == 3


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


BACKEND_CHOICES = (
    r"pass one of \['cudagraphs', 'inductor', 'openxla', 'tvm'\] \(torch._dynamo.list_backends\(\); its debug backends"
    r" such as 'eager' and 'aot_eager' work too\) or a backend callable\.$"
)


@pytest.mark.parametrize("cls", [CSXStrategy, CSXDDPStrategy, CSXFSDPStrategy])
def test_a_misspelled_backend_is_refused_as_the_strategy_is_built_naming_the_closest_one(cls: type) -> None:
    """It was refused only at setup, after Lightning had written the run's log folder."""
    with pytest.raises(
        ValueError,
        match=r"^compile_backend='indcutor' is not a torch.compile backend; did you mean 'inductor'\? "
        + BACKEND_CHOICES,
    ):
        cls(compile=True, compile_backend="indcutor")


@pytest.mark.parametrize("backend", [3, None, ["eager"]])
def test_a_backend_neither_a_name_nor_a_callable_is_refused_as_the_strategy_is_built(backend: object) -> None:
    """It reached torch.compile, whose TorchDynamo error came at the first step."""
    with pytest.raises(
        TypeError,
        match=rf"^compile_backend={re.escape(repr(backend))} is neither a backend name nor a callable; "
        + BACKEND_CHOICES,
    ):
        CSXStrategy(compile=True, compile_backend=backend)


def test_backend_names_torch_knows_and_callables_are_taken() -> None:
    backend = CountingBackend()
    assert CSXStrategy(compile=True, compile_backend=backend).compile_backend is backend
    for name in ("eager", "aot_eager", "inductor"):
        assert CSXStrategy(compile=True, compile_backend=name).compile_backend == name


def test_the_default_backend_is_not_looked_up() -> None:
    """Looking a name up imports every backend torch registers (0.2-0.4 s): a strategy built with the
    default, compiling or not, does not pay it."""
    code = (
        "import sys, cs_lightning\n"
        "cs_lightning.CSXStrategy(); cs_lightning.CSXStrategy(compile=True)\n"
        "print('torch._dynamo.backends.debugging' in sys.modules)\n"
        "cs_lightning.CSXStrategy(compile_backend='eager')\n"
        "print('torch._dynamo.backends.debugging' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]  # the second: the check itself is what imports them
