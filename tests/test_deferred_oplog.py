"""The op log sits between the recorder and the replays: neither imports the other for its types. The ops' arguments
are kept flat, with the structure that rebuilds them."""

import ast
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import cs_lightning.deferred as deferred
from cs_lightning.deferred import deferred_init
from cs_lightning.deferred.arguments import flatten, unflatten
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


_values = st.one_of(
    st.none(), st.integers(), st.floats(allow_nan=False), st.just(torch.float16), st.just(torch.Size([2]))
)
_trees = st.recursive(
    _values,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=3), inner, max_size=4),
    ),
    max_leaves=12,
)


def _same(a: object, b: object) -> bool:
    """Equal, with the same container types all the way down (a list is not a tuple here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[key], b[key]) for key in a)  # type: ignore[index]
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    return a == b


@given(_trees)
def test_arguments_flatten_to_their_values_and_back(tree: object) -> None:
    values, structure = flatten(tree)
    assert not any(type(value) in (list, tuple, dict) for value in values)
    assert _same(unflatten(values, structure), tree)
    # the values come in the order the arguments are written in, and can be swapped one for one
    assert _same(unflatten(values, structure), unflatten(list(values), structure))
    with pytest.raises(AssertionError, match="more than"):  # a value too many is a bug, never dropped
        unflatten([*values, 0], structure)


def test_ops_returning_several_tensors_are_recorded() -> None:
    class Stats(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            table = torch.randn(6, 4)
            top = torch.max(table, dim=0)  # a named tuple of two tensors (aten.max.dim's plain tuple)
            halves = table.split(3)  # a tuple of views
            self.register_buffer("peak", top.values * 2)
            self.register_buffer("where", top.indices)
            self.register_buffer("low", halves[1].clone())

    torch.manual_seed(3)
    eager = Stats()
    torch.manual_seed(3)
    lazy = deferred_init(Stats)
    deferred.materialize(lazy)
    for name, value in eager.state_dict().items():
        assert torch.equal(lazy.state_dict()[name], value), name
