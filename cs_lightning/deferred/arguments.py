"""An op's arguments as one flat list and the structure to rebuild them from it.

The recorder looks at every argument of every aten op a constructor runs (which ones are recorded
tensors, which are real ones) and the replay rebuilds the calls from the log. torch's pytree does the
same for any registered container, at a cost that made up about 40% of recording a model: aten ops
take nothing but tuples, lists and a dict of keyword arguments around their values. Everything else
(None, a torch.Size, a generator) is one value here. Their outputs are one tensor, or a plain tuple or
list of them (torch wraps ``torch.max(x, 0)``'s in a named tuple only after the aten op returned).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeAlias

__all__ = ["Structure", "flatten", "unflatten"]

# (tuple or list, the items' structures); (dict, the keys, the values' structures); None for one value
Structure: TypeAlias = "tuple[type, tuple[Structure, ...]] | tuple[type, tuple[Any, ...], tuple[Structure, ...]] | None"


def flatten(tree: Any) -> tuple[list[Any], Structure]:
    """The values in ``tree``, in order, and its structure: ``unflatten(*flatten(tree)) == tree``."""
    values: list[Any] = []
    return values, _take(tree, values)


def _take(node: Any, values: list[Any]) -> Structure:
    kind = type(node)
    if kind is tuple or kind is list:
        return kind, tuple([_take(item, values) for item in node])
    if kind is dict:
        return dict, tuple(node), tuple([_take(item, values) for item in node.values()])
    values.append(node)
    return None


def unflatten(values: list[Any], structure: Structure) -> Any:
    """The tree of ``structure`` holding ``values`` (as many as ``flatten`` gave)."""
    remaining = iter(values)
    tree = _build(structure, remaining)
    if next(remaining, _END) is not _END:
        raise AssertionError(f"unflatten: {len(values)} values, more than the structure holds")  # a caller's bug
    return tree


_END = object()


def _build(structure: Structure, values: Iterator[Any]) -> Any:
    if structure is None:
        return next(values)
    if len(structure) == 3:  # a dict
        _, keys, items = structure
        return {key: _build(item, values) for key, item in zip(keys, items)}
    kind, entries = structure
    return kind([_build(entry, values) for entry in entries])
