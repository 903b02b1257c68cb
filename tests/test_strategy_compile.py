"""compile=True: forward and update compiled once; a changing closed-form schedule causes no recompile."""

import re
import subprocess
import sys

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from lightning_models import Regressor, fit
from torch._dynamo.backends.registry import lookup_backend

from cs_lightning import CSXDDPStrategy, CSXFSDPStrategy, CSXStrategy
from cs_lightning.schedulers import LinearLR


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
    lr = run.optimizers[0].param_groups[0]["lr"]  # the update read a tensor filled in place (no recompile)
    assert type(lr) is float and lr == float(scheduler.values([200])[0, 0])  # the schedule's float, as it wrote it
    assert scheduler.values([0])[0, 0] != lr  # the schedule did change


class RatesSeen(Callback):
    """The learning rate each batch starts with, as LearningRateMonitor reads it."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    def on_train_batch_start(self, trainer: Trainer, *args: object) -> None:
        self.seen.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_compiled_updates_leave_the_learning_rate_a_float_for_loggers_checkpoints_and_the_user(tmp_path) -> None:
    """The tensor the compiled update reads is its own: loggers saw float32 roundings (0.009999999776482582 for
    0.01), and checkpoints carried a tensor lr, which plain Lightning then kept, and json could not write."""
    seen = {}
    for strategy in ("auto", CSXStrategy(compile=True, compile_backend="eager")):
        rates = RatesSeen()
        torch.manual_seed(0)
        run, _ = fit(WithTorchStepLR(), strategy, steps=4, callbacks=[rates])
        run.save_checkpoint(tmp_path / "saved.ckpt")
        saved = torch.load(tmp_path / "saved.ckpt", weights_only=False)
        seen[str(strategy)] = rates.seen, saved["optimizer_states"][0]["param_groups"][0]["lr"]
        assert type(run.optimizers[0].param_groups[0]["lr"]) is float
    (auto,) = [value for name, value in seen.items() if name == "auto"]
    (csx,) = [value for name, value in seen.items() if name != "auto"]
    assert csx == auto == ([0.1, 0.05, 0.025, 0.0125], 0.00625)


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


def test_a_backend_given_without_compile_warns_that_it_does_nothing() -> None:
    with pytest.warns(UserWarning, match=r"^compile_backend='eager' has no effect without compile=True; fix: add"):
        CSXStrategy(compile_backend="eager")


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


class HandedOver(WithTorchStepLR):
    """The user halves the lr from outside at step 3: torch's own steps take over from the closed form."""

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        if self.global_step == 3:
            group = self.trainer.optimizers[0].param_groups[0]
            group["lr"] = group["lr"] * 0.5


class Manual(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def configure_optimizers(self) -> tuple:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [LinearLR(optimizer, initial_learning_rate=0.1, end_learning_rate=0.01, total_iters=50)]

    def training_step(self, batch: object, batch_idx: int) -> torch.Tensor:
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        loss = super().training_step(batch, batch_idx)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        scheduler.step()
        return loss


@pytest.mark.parametrize("model", [HandedOver, Manual])
def test_a_learning_rate_changed_on_the_host_or_under_manual_optimization_compiles_no_more(model: type) -> None:
    backend = CountingBackend()
    run, losses = fit(model(), CSXStrategy(compile=True, compile_backend=backend), steps=20)
    assert len(losses.values) == 20
    assert backend.compiled == 2  # the forward and the update
    assert type(run.optimizers[0].param_groups[0]["lr"]) is float
