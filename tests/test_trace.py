"""The trace check: one graph or an early error naming the user's file and line."""

import inspect
import re
import sys

import pytest
import torch
import torchmetrics
from lightning.pytorch import LightningModule
from lightning_models import SkipsFirst, fit, trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cs_lightning import CSXStrategy, GraphBreakError
from cs_lightning.trace import captured, lazy_trace


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if y.sum() > 0:
            y = y * 2
        return y


class Reads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.linear(x).abs().max().item()
        return self.linear(x) / scale


class Wrapper(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) + 1


def _line_of(cls: type, text: str) -> int:
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_data_dependent_branch_is_rejected_with_file_and_line() -> None:
    model = Branchy()
    with pytest.raises(GraphBreakError) as error, captured([model]):
        model(torch.randn(2, 4))
    message = str(error.value)
    assert f'File "{__file__}", line {_line_of(Branchy, "if y.sum() > 0:")}' in message
    assert "if y.sum() > 0:" in message
    assert "CSXStrategy(trace_check=False)" in message
    assert "torch.where" in message or "torch.cond" in message


def test_item_in_forward_is_rejected_with_its_line() -> None:
    model = Reads()
    with pytest.raises(GraphBreakError, match=rf"line {_line_of(Reads, '.item()')}"), captured([model]):
        model(torch.randn(2, 4))


def test_a_read_captured_into_the_graph_gets_the_step_checks_message() -> None:
    """With capture_scalar_outputs TorchDynamo puts `.item()` in the graph instead of breaking it there: the
    capture refuses that graph in the words of the step check, its fix (self.log too) and disable hint included."""
    model = Reads()
    with (
        torch._dynamo.config.patch(capture_scalar_outputs=True),
        pytest.raises(GraphBreakError) as error,
        captured([model]),
    ):
        model(torch.randn(2, 4))
    first, *_, fix, disable = str(error.value).splitlines()
    assert first == (
        "The training step reads a tensor's value to the host with `.item()`, which a CS-X system cannot do inside"
        " a step:"
    )
    assert f'File "{__file__}", line {_line_of(Reads, ".item()")}, in forward' in str(error.value)
    assert fix == (
        "Fix: keep the value a tensor (torch ops, torch.where), or read it after the step with"
        " cs_lightning.step_closure or self.log."
    )
    assert disable == (
        "To train without the check, pass `trace_check=False` to the strategy (`CSXStrategy(trace_check=False)`,"
        " likewise CSXDDPStrategy and CSXFSDPStrategy; in the CLI `--trainer.strategy cs_lightning.CSXStrategy"
        " --trainer.strategy.trace_check false`)."
    )


class Masks(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0].sum() + x


class NonZero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x).sum() + x


@pytest.mark.parametrize(("model", "op", "text"), [(Masks, "x[mask]", "x[x > 0]"), (NonZero, "nonzero", "nonzero")])
def test_a_value_dependent_shape_captured_into_the_graph_is_refused_at_the_users_line(
    model: type, op: str, text: str
) -> None:
    """torch 2.13 captures x[mask] and nonzero with an unbacked size instead of breaking the graph there."""
    module = model()
    with pytest.raises(GraphBreakError) as error, captured([module]):
        module(torch.randn(2, 4))
    lines = str(error.value).splitlines()
    assert lines[0].startswith(f"The training step calls `{op}`, whose output shape depends on the values")
    assert lines[1] == f'  File "{__file__}", line {_line_of(model, text)}, in forward'
    assert "cs_lightning" not in "\n".join(lines[1:3])


def test_a_captured_value_dependent_shape_inside_another_installed_library_passes_as_without_compile(
    tmp_path, monkeypatch
) -> None:
    installed = tmp_path / "site-packages"
    installed.mkdir()
    (installed / "their_stats.py").write_text("def positive_mean(y):\n    return y[y > 0].sum() / y.numel()\n")
    monkeypatch.syspath_prepend(str(installed))
    import their_stats

    class UsesStats(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return their_stats.positive_mean(super().forward(x))

    model, x = UsesStats(4, 4), torch.randn(2, 4)
    with lazy_trace(model):
        eager = model(x)
    with captured([model]):
        assert torch.equal(model(x), eager)
    sys.modules.pop("their_stats")


def test_nested_module_is_part_of_the_outer_graph_and_errors_point_inside_it() -> None:
    model = Wrapper(Branchy())
    with pytest.raises(GraphBreakError, match=rf"line {_line_of(Branchy, 'if y.sum() > 0:')}"):
        with captured([model, model.inner]):
            model(torch.randn(2, 4))


def test_captured_forward_is_bit_identical_to_eager_forward_and_backward() -> None:
    model = Wrapper(nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.Dropout(0.5), nn.Linear(16, 4)))
    x = torch.randn(8, 4)
    torch.manual_seed(1)
    eager = model(x)
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(1)
    with captured([model]):
        traced = model(x)
    traced.sum().backward()
    assert torch.equal(eager, traced)
    assert all(torch.equal(a, p.grad) for a, p in zip(eager_grads, model.parameters()))
    assert torch.equal(torch.get_rng_state(), _rng_after_one_eager_call(model, x))


def _rng_after_one_eager_call(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(1)
    model(x)
    return torch.get_rng_state()


def test_forward_is_restored_after_the_block_even_on_error() -> None:
    model = Branchy()
    with pytest.raises(GraphBreakError), captured([model]):
        model(torch.randn(2, 4))
    assert "forward" not in model.__dict__
    assert model.forward.__func__ is Branchy.forward


def test_first_call_time_is_reported_once() -> None:
    seconds = []
    model = Wrapper(nn.Linear(4, 4))
    with captured([model], on_first_call=seconds.append):
        model(torch.randn(2, 4))
        model(torch.randn(2, 4))
    assert len(seconds) == 1 and seconds[0] > 0


class BranchyLightning(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.body = Branchy()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.body(batch[0]).sum()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(strategy: CSXStrategy) -> BranchyLightning:
    model = BranchyLightning()
    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer(strategy, max_steps=2).fit(model, data)
    return model


def test_csx_rejects_the_step_before_training_and_trains_with_the_check_off() -> None:
    with pytest.raises(GraphBreakError, match=rf'{__file__}", line {_line_of(Branchy, "if y.sum() > 0:")}'):
        _fit(CSXStrategy())
    model = _fit(CSXStrategy(trace_check=False))
    assert model.trainer.global_step == 2


def test_a_float_attribute_changed_since_an_earlier_capture_is_not_taken_for_a_host_read() -> None:
    # Dropout's p differs from the earlier capture of the same code: no `.item()` may be blamed on it
    for p in (0.1, 0.3):
        model = Wrapper(nn.Sequential(nn.Linear(4, 4), nn.Dropout(p)))
        with captured([model]):
            out = model(torch.randn(2, 4))
        assert out.shape == (2, 4)


class ShapeBug(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x[:, :3])


def test_a_bug_in_forward_surfaces_as_its_own_error_not_as_a_graph_break() -> None:
    model = ShapeBug()
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied") as error, captured([model]):
        model(torch.randn(2, 4))
    assert not isinstance(error.value, GraphBreakError)


def test_many_captures_of_a_torch_defined_forward_stay_under_dynamos_recompile_limit() -> None:
    # nn.Sequential.forward lives in torch; captured directly, all its captures would share one
    # TorchDynamo cache and the ninth model in a process (a sweep, a notebook) would fail.
    for width in range(2, 14):
        model = nn.Sequential(nn.Linear(4, width), nn.Dropout(0.1 * (width % 3)), nn.Linear(width, 1))
        x = torch.randn(3, 4)
        torch.manual_seed(width)
        expected = model(x)
        torch.manual_seed(width)
        with captured([model]):
            assert torch.equal(model(x), expected)


class HostSyncInStep(LightningModule):
    """A model whose forward is fine and whose training_step reads the loss to the host."""

    def __init__(self, read: str) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.read = read
        self.accuracy = torchmetrics.MeanSquaredError()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        prediction = self.layer(x)
        loss = nn.functional.mse_loss(prediction, y)
        self.accuracy(prediction, y)  # a library's own host reads are bookkeeping, not the user's
        self.log("loss", loss)
        if self.read == "item":
            print(loss.item())  # the host read
        elif self.read == "if":
            if loss > 100:  # the host read
                loss = loss * 0
        elif self.read == "mask":
            loss = loss + prediction[prediction > 0].sum()  # a value-dependent shape
        elif self.read == "self.print":
            self.print("loss", loss)  # the host read, made by Lightning for the user
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _batches() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)


@pytest.mark.parametrize(
    ("read", "line", "fix"),
    [
        ("item", "print(loss.item())", "step_closure"),
        ("if", "if loss > 100:", "step_closure"),
        ("mask", "prediction[prediction > 0]", "keep shapes static"),
    ],
)
def test_a_host_read_in_training_step_is_refused_before_any_update(
    read: str, line: str, fix: str, progress_bar: bool = False
) -> None:
    model = HostSyncInStep(read)
    before = [p.detach().clone() for p in model.parameters()]
    run = trainer("csx", max_steps=2, enable_progress_bar=progress_bar)
    with pytest.raises(GraphBreakError) as error:
        run.fit(model, _batches())
    message = str(error.value)
    assert f'File "{__file__}", line {_line_of(HostSyncInStep, line)}, in training_step' in message
    assert line in message and fix in message and "trace_check=False" in message
    chained = error.value.__cause__ or (None if error.value.__suppress_context__ else error.value.__context__)
    assert chained is None  # no TorchDynamo traceback in front of the message
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # no update was applied
    assert run.global_step == 0


class CatchesTheRefusal(HostSyncInStep):
    """A "safe logging" habit: a broad except around a read, which only the check makes raise."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        try:
            value = loss.item()
        except Exception:
            value = -1.0
        self.log("value", value)
        return loss


def test_a_refusal_the_steps_own_code_catches_still_fails_the_check(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CS_LIGHTNING_CACHE_DIR", str(tmp_path))
    model = CatchesTheRefusal("none")
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(GraphBreakError, match=r"(?s)`\.item\(\)`.*caught this error, in an `except`") as error:
        trainer("csx", max_steps=2).fit(model, _batches())
    assert f"line {_line_of(CatchesTheRefusal, 'value = loss.item()')}, in training_step" in str(error.value)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # no update was applied
    assert not [f for f in tmp_path.rglob("*") if f.is_file()]  # no verdict cached: the next run checks again


@pytest.mark.parametrize("progress_bar", [False, True])
def test_self_print_of_a_tensor_is_a_host_read_as_print_is(progress_bar: bool) -> None:
    """Lightning formats the tensor (in LightningModule.print, or the progress bar's print): it passed."""
    test_a_host_read_in_training_step_is_refused_before_any_update(
        "self.print", 'self.print("loss", loss)', "step_closure", progress_bar
    )


def test_a_step_without_host_reads_trains_with_logging_and_metrics() -> None:
    model = HostSyncInStep("none")
    run = trainer("csx", max_steps=2)
    run.fit(model, _batches())
    assert run.global_step == 2 and "loss" in run.callback_metrics


@pytest.mark.parametrize(
    "read",
    [
        "loss.item()",
        "float(loss)",
        "f'{loss:.3f}'",
        "print(loss)",
        "loss.tolist()",
        "loss.numpy()",
        "numpy.asarray(loss)",
        "0.5 in loss",
        "torch.equal(loss, loss)",
        "loss.allclose(loss)",
        "[1, 2][loss.long()]",
    ],
)
def test_every_kind_of_host_read_in_the_users_code_is_refused(read: str) -> None:
    import numpy

    loss = torch.tensor(0.25)
    with pytest.raises(GraphBreakError, match=r'File "<string>", line 1'), lazy_trace():
        eval(read, {"torch": torch, "numpy": numpy, "loss": loss})  # user code, as eval's <string>


def test_reads_made_by_torch_and_libraries_pass() -> None:
    parameter = nn.Parameter(torch.randn(3))
    parameter.grad = torch.randn(3)
    accuracy = torchmetrics.classification.BinaryAccuracy()  # checks its inputs on the host
    with lazy_trace():
        torch.nn.utils.clip_grad_norm_([parameter], 1.0, error_if_nonfinite=True)  # torch's own read
        accuracy(torch.rand(16), torch.randint(0, 2, (16,)))
    assert 0.0 <= float(accuracy.compute()) <= 1.0


@pytest.mark.parametrize(
    ("op", "called"),
    [
        ("x[x > 0]", "x[mask]"),
        ("x.nonzero()", "nonzero"),
        ("torch.argwhere(x)", "argwhere"),
        ("torch.unique(x)", "unique"),  # not its kernel, _unique2
        ("torch.masked_select(x, x > 0)", "masked_select"),
        ("torch.repeat_interleave(x, i)", "repeat_interleave"),
        ("torch.bincount(i)", "bincount"),
        (
            "nn.utils.rnn.pack_padded_sequence(x.view(2, 3), torch.tensor([3, 1]), batch_first=True)",
            "_pack_padded_sequence",
        ),
        ("nn.functional.one_hot(i)", "one_hot"),  # counts the classes: its input's max, read in C++
    ],
)
def test_every_value_dependent_shape_in_the_users_code_is_refused(op: str, called: str) -> None:
    x, i = torch.randn(6), torch.tensor([0, 2, 1, 0, 1, 2])
    with (
        pytest.raises(
            GraphBreakError,
            match=rf'^The training step calls `{re.escape(called)}`, whose output shape depends on the values(.|\n)*File "<string>", line 1',
        ),
        lazy_trace(),
    ):
        eval(op, {"torch": torch, "nn": nn, "x": x, "i": i})  # user code, as eval's <string>


@pytest.mark.parametrize(
    "op",
    [
        "x[i]",
        "x[:, 1:]",
        "nn.functional.one_hot(i, 3)",
        "x.masked_fill(x > 0, 0)",
        "torch.where(x > 0, x, 0)",
        "x.index_put_((x > 0,), torch.tensor(0.0))",
        "torch.repeat_interleave(x, 2, dim=0)",
        "torch.repeat_interleave(x, i, dim=0, output_size=6)",
    ],
)
def test_static_shapes_pass_and_compute_as_without_the_check(op: str) -> None:
    x, i = torch.randn(6, 4), torch.tensor([0, 2, 1, 0, 1, 2])
    expected = eval(op, {"torch": torch, "nn": nn, "x": x.clone(), "i": i})
    with lazy_trace():
        got = eval(op, {"torch": torch, "nn": nn, "x": x.clone(), "i": i})
    assert torch.equal(got, expected)


def test_value_dependent_shapes_inside_a_library_pass() -> None:
    accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=3)  # counts classes with bincount
    with lazy_trace():
        accuracy(torch.randn(16, 3), torch.randint(0, 3, (16,)))
    assert 0.0 <= float(accuracy.compute()) <= 1.0


@pytest.mark.parametrize("read", ["torch.zeros(n)", "torch.arange(n)", "x[:n]", "x.narrow(0, 0, n)"])
def test_a_value_read_inside_torch_for_the_users_call_is_refused(read: str) -> None:
    x, n, i = torch.randn(6), torch.tensor(3), torch.tensor([0, 2, 1])
    with pytest.raises(GraphBreakError, match=r'to the host(.|\n)*File "<string>", line 1'), lazy_trace():
        eval(read, {"torch": torch, "nn": nn, "x": x, "n": n, "i": i})  # user code, as eval's <string>


def test_torch_functions_with_static_results_pass() -> None:
    v, i = torch.arange(5.0), torch.tensor([0, 2, 1])
    with lazy_trace():
        pairs = torch.combinations(v, 2)  # computes through masked_select
        hot = nn.functional.one_hot(i, 3)  # reads i's range to validate it
    assert pairs.shape == (10, 2) and torch.equal(hot.argmax(1), i)


def test_the_models_own_package_is_checked_wherever_it_is_installed(tmp_path, monkeypatch) -> None:
    installed = tmp_path / "site-packages"
    (installed / "their_model").mkdir(parents=True)
    (installed / "their_model" / "__init__.py").write_text(
        "import torch\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.linear = torch.nn.Linear(2, 2)\n\n    def forward(self, x):\n"
        "        return self.linear(x) * self.linear(x).max().item()\n"
    )
    (installed / "their_logging.py").write_text("def record(loss):\n    return loss.item()\n")
    monkeypatch.syspath_prepend(str(installed))
    from their_logging import record
    from their_model import Net

    model, x = Net(), torch.randn(3, 2)
    # a refusal caught inside the block (here by pytest) fails the block as it ends all the same
    with pytest.raises(GraphBreakError, match="caught this error"), lazy_trace(model):
        record(x.sum())  # another installed library's bookkeeping read passes
        with pytest.raises(GraphBreakError, match=r"their_model.__init__.py\", line 9") as refused:
            model(x)
    # the fix for one's own code, and the ways around a line of a library one cannot change
    assert "Fix: keep the value a tensor" in str(refused.value)
    assert "`their_model` is an installed package, if it is not yours to change" in str(refused.value)
    assert "check the step with `compile=True` instead" in str(refused.value)


def test_the_check_leaves_no_mode_behind_and_changes_no_number() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 1)), torch.randn(4, 8)
    plain = model(x).square().mean()
    plain.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with lazy_trace(model):
        checked = model(x).square().mean()
    checked.backward()
    assert torch.equal(checked, plain)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), expected))
    with pytest.raises(GraphBreakError), lazy_trace(model):
        checked.item()
    assert torch._C._len_torch_function_stack() == 0 and torch._C._len_torch_dispatch_stack() == 0


class ManualReads(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.manual_backward(loss)
        if loss > 0:  # the host read, before this step's update
            optimizer.step()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_under_manual_optimization_a_read_before_the_update_is_refused_before_it() -> None:
    model = ManualReads()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(GraphBreakError, match=rf"line {_line_of(ManualReads, 'if loss > 0:')}"):
        trainer("csx", max_steps=2).fit(model, _batches())
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


class ManualWithHooks(LightningModule):
    """Manual optimization whose hooks, which run inside its training_step, read values (a grad-norm logger)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer = nn.Linear(4, 1)
        self.read: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.read.append(loss.item())

    def on_after_backward(self) -> None:
        self.read.append(self.layer.weight.grad.norm().item())

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.read.append(float(self.layer.weight.grad.sum()))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_under_manual_optimization_the_hooks_the_step_runs_are_not_checked_as_under_automatic() -> None:
    """README: hooks that run inside the step are not checked; under manual optimization they run inside
    training_step (manual_backward, the optimizer's step), and were refused."""
    reads = {}
    for strategy in ("auto", "csx"):
        torch.manual_seed(0)
        model = ManualWithHooks()
        trainer(strategy, max_steps=2).fit(model, _batches())
        reads[strategy] = model.read
    assert len(reads["csx"]) == 6 and reads["csx"] == reads["auto"]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_skipped_first_step_is_no_verdict_the_next_step_is_refused_before_its_update(accumulate: int) -> None:
    """The first step returns None (skipped) before the host read the later ones make: the check
    goes on to the first step that returns a loss (it used to pass the skipped step and check no more)."""
    model = SkipsFirst(reads=True)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(GraphBreakError, match=rf'lightning_models.py", line {_line_of(SkipsFirst, "loss.item()")}'):
        fit(model, "csx", steps=4, accumulate_grad_batches=accumulate)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_an_unknown_backend_is_refused_and_no_forward_is_touched() -> None:
    model = Wrapper(nn.Linear(4, 4))
    with (
        pytest.raises(torch._dynamo.exc.InvalidBackend, match="indcutor"),
        captured([model, model.inner], backend="indcutor"),
    ):
        pass
    assert "forward" not in model.__dict__ and "forward" not in model.inner.__dict__
