"""cs_lightning.errors: every refusal is a CSLightningError, and still the builtin that fits.

``except CSLightningError`` catches what cs_lightning refuses; ``except ValueError`` and
``except TypeError`` written before the family existed catch the same refusals as before.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from torch import nn
from torch.utils.data import IterableDataset

import cs_lightning
from cs_lightning import CSXAccelerator, CSXModule, CSXStrategy, ResumableDataLoader, TimeToFirstLoss, step_closure
from cs_lightning import schedulers as cs
from cs_lightning.deferred import deferred_init, materialize, mt19937
from cs_lightning.errors import CSLightningError, DeferredInitUsageError, UsageError, UsageTypeError
from cs_lightning.schedulers import registry

PACKAGE = Path(cs_lightning.__file__).parent
PLAIN = ("ValueError", "TypeError", "RuntimeError")

# Plain builtins raised on purpose, as (file, function, class). None refuses the user's input:
ALLOWED = {
    # Lightning's accelerator connector no longer has an attribute cs_lightning reads: this Lightning
    # cannot run cs_lightning, nothing in the user's code or config to fix; the traceback goes in a bug report.
    ("strategies/registration.py", "init_strategy", "RuntimeError"),
    # torch split a tensor's rows otherwise than torch.chunk, which sharded materialize relies on: this
    # torch broke an assumption of cs_lightning, not a user's mistake; the traceback goes in a bug report.
    ("deferred/sharded.py", "shard_rows", "RuntimeError"),
}


class _PlainBuiltins(ast.NodeVisitor):
    """Each ValueError/TypeError/RuntimeError made (``raise X(...)``, ``X(...)``) or raised bare
    (``raise X``) in a module, as (file, innermost function, class)."""

    def __init__(self, file: str) -> None:
        self.file, self.functions, self.found = file, ["<module>"], []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        self._note(node.func)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        if not isinstance(node.exc, ast.Call):
            self._note(node.exc)
        self.generic_visit(node)

    def _note(self, node: ast.expr | None) -> None:
        if isinstance(node, ast.Name) and node.id in PLAIN:
            self.found.append((self.file, self.functions[-1], node.id))


def _plain_builtins() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        file = path.relative_to(PACKAGE).as_posix()
        visitor = _PlainBuiltins(file)
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        found += visitor.found
    return found


def test_the_package_raises_no_plain_value_type_or_runtime_error() -> None:
    found = _plain_builtins()
    assert [raised for raised in found if raised not in ALLOWED] == []
    assert set(found) == ALLOWED  # each allowed one still exists: the list does not outlive its reasons


def test_the_usage_errors_are_the_family_and_the_builtin() -> None:
    assert issubclass(UsageError, CSLightningError) and issubclass(UsageError, ValueError)
    assert issubclass(UsageTypeError, CSLightningError) and issubclass(UsageTypeError, TypeError)
    assert issubclass(DeferredInitUsageError, UsageTypeError)


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=1.0)


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(3))


REFUSALS: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # (id, the call, the builtin it still is, text of its message)
    (
        "linear_lr_total_iters",
        lambda: cs.LinearLR(_optimizer(), 1.0, 0.0, total_iters=-1),
        ValueError,
        "LinearLR: got total_iters=-1; total_iters must be >= 0",
    ),
    (
        "cosine_lr_optimizer",
        lambda: cs.CosineDecayLR("sgd", 1.0, 0.0, total_iters=10),
        TypeError,
        "CosineDecayLR: got optimizer='sgd'; pass a torch.optim.Optimizer",
    ),
    (
        "values_negative_step",
        lambda: cs.ConstantLR(_optimizer(), 1.0).values([-1]),
        ValueError,
        "ConstantLR.values: got a negative step (-1); steps start at 0",
    ),
    (
        "sequential_milestones",
        lambda: cs.SequentialLR(_optimizer(), [cs.ConstantLR(_optimizer(), 1.0)] * 2, milestones=[]),
        ValueError,
        "SequentialLR: got 0 milestones for 2 schedulers; give one milestone fewer than schedulers",
    ),
    (
        "registry_build_optimizer",
        lambda: registry.build({"ConstantLR": {"learning_rate": 1.0}}, optimizer=None),
        TypeError,
        "build: got optimizer=None; pass a torch.optim.Optimizer",
    ),
    (
        "materialize_mode",
        lambda: materialize(deferred_init(nn.Linear, 2, 2), mode="bogus"),
        ValueError,
        "materialize: mode='bogus' is not one of ('exact', 'independent').",
    ),
    (
        "materialize_dtype",
        lambda: materialize(deferred_init(nn.Linear, 2, 2), dtype=torch.int64),
        TypeError,
        "materialize: dtype=torch.int64 must be a floating-point torch.dtype",
    ),
    (
        "mt19937_state",
        lambda: mt19937.advance(torch.zeros(3, dtype=torch.uint8), 1),
        ValueError,
        "mt19937.advance: not a CPU generator state: 3 torch.uint8 values, expected 5056 uint8.",
    ),
    (
        "csx_module_model",
        lambda: CSXModule(model=3, optimizer=lambda model: _optimizer()),
        TypeError,
        "CSXModule(model=3) must be callable",
    ),
    ("step_closure", lambda: step_closure(3), TypeError, "step_closure decorates a function, got 3"),
    (
        "time_to_first_loss",
        lambda: TimeToFirstLoss(log_metrics="yes"),
        TypeError,
        "TimeToFirstLoss: got log_metrics='yes'; pass True or False",
    ),
    (
        "accelerator_backing",
        lambda: CSXAccelerator("tpu"),
        ValueError,
        "CSXAccelerator(backing='tpu') is not supported",
    ),
    (
        "trainer_devices",
        lambda: Trainer(strategy=CSXStrategy(), devices=2, logger=False, enable_progress_bar=False),
        ValueError,
        "CSXStrategy emulates one system, but devices=2",
    ),
    (
        "resumable_loader_dataset",
        lambda: ResumableDataLoader(_Stream()),
        TypeError,
        "ResumableDataLoader: got dataset=_Stream, an IterableDataset",
    ),
]


@pytest.mark.parametrize("call,builtin,message", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_a_refusal_is_caught_as_a_cs_lightning_error_and_as_its_builtin(
    call: Callable[[], object], builtin: type[Exception], message: str
) -> None:
    try:
        call()
    except CSLightningError as error:
        caught = error
    else:
        pytest.fail("no error raised")
    assert isinstance(caught, builtin)
    assert message in str(caught)
