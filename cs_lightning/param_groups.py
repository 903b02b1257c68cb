"""Param groups by tag from YAML: per-layer learning-rate scales (muP) without model code.

A run.yaml may list, next to ``optimizer:``, parameters that get a param group of their own::

    param_groups:
    - tag: decoder_kernel
      params: ["*dense*weight*", "*linear*weight*"]  # globs on model.named_parameters() names
      adjust_learning_rate: 0.25

The optimizer then gets one group per entry, holding the trainable parameters whose name
matches one of its globs (whole name, case-sensitive: cerebras.pytorch's param filters),
with ``tags: {tag}`` and ``adjust_learning_rate``, after one untagged group with every other
parameter. ``ScalePerParamLR`` multiplies each group's ``adjust_learning_rate`` into
the schedule (group lr = scale x schedule value), which is how Cerebras Model Zoo applies
muP's per-layer scales: its ``configure_param_groups`` puts each tagged layer's parameters,
found by name, in a group holding the scale.

Names are the model's own, so an entry that matches no parameter, or a parameter that two
entries match, is refused with the key path: a misspelt glob would otherwise train those
layers at the unscaled rate without a word.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cs_lightning.errors import ConfigError, KeyPath, format_key_path

KEY: KeyPath = ("param_groups",)
_ENTRY_KEYS = ("tag", "params", "adjust_learning_rate")
# What an entry looks like, in the error lines about one (here and in the CLI's)
ENTRY_EXAMPLE = "{tag: decoder_kernel, params: ['*dense*weight*'], adjust_learning_rate: 0.25}"


@dataclass(frozen=True)
class TaggedGroup:
    """One ``param_groups:`` entry: the parameters its globs name get ``scale`` and ``tag``."""

    tag: str
    patterns: tuple[str, ...]
    scale: float
    key: KeyPath  # where it sits in the YAML, for errors

    def matches(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)

    def group(self, params: list[torch.nn.Parameter]) -> dict[str, Any]:
        return {"params": params, "tags": {self.tag}, "adjust_learning_rate": self.scale}


def parse(spec: Any, key: KeyPath = KEY) -> list[TaggedGroup]:
    """Check a ``param_groups:`` block completely; an absent or empty one is ``[]``."""
    if spec is None:
        return []
    if not isinstance(spec, list):
        raise ConfigError(key, f"expected a list of entries such as [{ENTRY_EXAMPLE}], got {spec!r}")
    entries = [_entry(item, (*key, i)) for i, item in enumerate(spec)]
    seen: dict[str, KeyPath] = {}
    for entry in entries:
        if entry.tag in seen:
            raise ConfigError(
                (*entry.key, "tag"),
                f"tag {entry.tag!r} is also {format_key_path((*seen[entry.tag], 'tag'))}; "
                "fix: give each entry its own tag",
            )
        seen[entry.tag] = entry.key
    every = next((entry for entry in entries if tags_every_parameter([entry])), None)
    if every is not None and len(entries) > 1:  # any parameter another entry names would be in two
        other = next(entry for entry in entries if entry is not every)
        raise ConfigError(
            (*every.key, "params"),
            f"a glob of stars only puts every parameter in group {every.tag!r}, so {format_key_path(other.key)} "
            f"(tag {other.tag!r}) could only name parameters already there; fix: narrow this entry's globs or drop "
            "the other entries",
        )
    return entries


def _entry(item: Any, key: KeyPath) -> TaggedGroup:
    if not isinstance(item, Mapping):
        raise ConfigError(key, f"expected a mapping such as {ENTRY_EXAMPLE}, got {item!r}")
    unknown = sorted(set(map(str, item)) - set(_ENTRY_KEYS))
    if unknown:
        raise ConfigError((*key, unknown[0]), f"unknown key; fix: an entry takes {', '.join(_ENTRY_KEYS)}")
    missing = [name for name in _ENTRY_KEYS if name not in item]
    if missing:
        raise ConfigError(key, f"missing {', '.join(missing)}; fix: write {ENTRY_EXAMPLE}")
    tag, patterns, scale = item["tag"], item["params"], item["adjust_learning_rate"]
    if not isinstance(tag, str) or not tag:
        raise ConfigError((*key, "tag"), f"expected a non-empty string, got {tag!r}")
    patterns = [patterns] if isinstance(patterns, str) else patterns
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise ConfigError(
            (*key, "params"),
            f"expected a glob or a non-empty list of globs on parameter names, got {item['params']!r}; "
            "fix: write params: ['*dense*weight*']",
        )
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale < 0:
        raise ConfigError(
            (*key, "adjust_learning_rate"),
            f"expected a finite number >= 0 (the group's learning rate is this times the schedule), got {scale!r};"
            " fix: write a number such as 0.5 (1 keeps the schedule's rate)",
        )
    return TaggedGroup(tag, tuple(patterns), float(scale), key)


def trainable(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters an optimizer gets, by name: those that require gradients."""
    return [(name, param) for name, param in module.named_parameters() if param.requires_grad]


def split(named_parameters: Iterable[tuple[str, torch.nn.Parameter]], entries: Sequence[TaggedGroup]) -> list:
    """Torch param groups: the untagged rest first (if any), then one per entry, in the order given.

    Refuses an entry that matches no parameter and a parameter that two entries match (torch
    refuses a parameter in two groups; Model Zoo put it in both).
    """
    named = list(named_parameters)
    chosen: dict[str, list[torch.nn.Parameter]] = {entry.tag: [] for entry in entries}
    rest = []
    for name, param in named:
        found = [entry for entry in entries if entry.matches(name)]
        if len(found) > 1:
            raise ConfigError(
                (*found[1].key, "params"),
                f"parameter {name!r} matches both {format_key_path(found[0].key)} ({found[0].tag}) and "
                f"{format_key_path(found[1].key)} "
                f"({found[1].tag}); fix: narrow the globs so each parameter is in one entry",
            )
        if found:
            chosen[found[0].tag].append(param)
        else:
            rest.append(param)
    for entry in entries:
        if not chosen[entry.tag]:
            raise ConfigError(
                (*entry.key, "params"),
                f"{list(entry.patterns)} match no trainable parameter of the model ({_some_names(named, entry)}); "
                "fix: give globs of the model's parameter names, as model.named_parameters() lists them once built",
            )
    return ([{"params": rest}] if rest else []) + [entry.group(chosen[entry.tag]) for entry in entries]


def _some_names(named: list[tuple[str, torch.nn.Parameter]], entry: TaggedGroup) -> str:
    """The model's parameter names most like the entry's globs (a typo's fix is among them), or all of few."""
    names = [name for name, _ in named]
    if not names:
        return "it has none"
    if len(names) <= 4:
        return f"its names: {', '.join(names)}"
    wanted = " ".join(pattern.replace("*", "") for pattern in entry.patterns)
    closest = difflib.get_close_matches(wanted, names, n=4, cutoff=0.0)
    return f"the names most like them: {', '.join(closest)}, of {len(names)} in all"


def probe(entries: Sequence[TaggedGroup], extra_tags: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """Throwaway param groups shaped like ``split``'s, to check and draw schedules without a
    model: the untagged rest (unless ``tags_every_parameter``), one per entry, and one per
    other tag in ``extra_tags`` (a scheduler may target it)."""
    own = {entry.tag for entry in entries}
    rest = [] if tags_every_parameter(entries) else [{"params": [_placeholder()]}]
    groups = rest + [entry.group([_placeholder()]) for entry in entries]
    return groups + [{"params": [_placeholder()], "tags": {tag}} for tag in extra_tags if tag not in own]


def tags_every_parameter(entries: Sequence[TaggedGroup]) -> bool:
    """Whether no parameter of any model is left untagged, known without the model: an entry
    has a glob of stars only, which matches every name (``split`` then has no untagged rest)."""
    return any(set(pattern) == {"*"} for entry in entries for pattern in entry.patterns)


def _placeholder() -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.zeros(1))


def scaled_entry(entries: Sequence[TaggedGroup]) -> TaggedGroup | None:
    """The first entry whose scale a schedule must multiply in (one not equal to 1), if any."""
    return next((entry for entry in entries if entry.scale != 1.0), None)
