"""The op log sits between the recorder and the replays: neither imports the other for its types."""

import ast
from pathlib import Path

import torch

import cs_lightning.deferred as deferred
from cs_lightning.deferred import deferred_init
from cs_lightning.deferred.oplog import Op, Recording, Ref

PACKAGE = Path(deferred.__file__).parent


def _runtime_imports(name: str) -> set[str]:
    """The modules ``deferred/<name>.py`` imports when it runs (``if TYPE_CHECKING:`` blocks left out)."""
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_replays_and_the_op_log_do_not_import_the_recorder() -> None:
    for name in ("oplog", "replay", "row_replay", "independent"):
        assert "cs_lightning.deferred.recorder" not in _runtime_imports(name), name
    # the op log is a leaf: of the package it needs only the error classes, which import nothing of it
    assert {m for m in _runtime_imports("oplog") if m.startswith("cs_lightning")} <= {"cs_lightning.errors"}


def test_a_recorded_module_holds_its_recording_and_its_ops() -> None:
    torch.manual_seed(0)
    lazy = deferred_init(torch.nn.Linear, 4, 3)
    recording = lazy.weight._cs_recording
    assert isinstance(recording, Recording) and recording is lazy.bias._cs_recording
    assert all(isinstance(op, Op) for op in recording.ops) and recording.pending() == list(range(len(recording.ops)))
    weight = recording.ref(lazy.weight)
    assert isinstance(weight, Ref) and (weight.size, weight.numel, weight.dtype) == ((3, 4), 12, torch.float32)
    assert any(weight.sid in op.writes and op.random for op in recording.ops)  # kaiming_uniform_'s draw
