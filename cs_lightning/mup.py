"""Model Zoo's muP per-layer learning-rate scales -> ``param_groups:`` entries (for `convert`).

A Model Zoo optimizer's ``adjust_learning_rate: {layer tag: scale}`` scales the learning
rate of the parameters its tag names; Model Zoo finds them by parameter name, with rules
that are part of its model code and changed in release 2.3:

* before 2.3 (the legacy layout: releases 1.9 and 2.2), ``decoder_kernel`` is every
  parameter whose name contains ``weight`` and ``linear`` or ``dense``; ``embedding`` every
  one whose name contains ``embedding`` and ``weight``; any other tag matches nothing;
* from 2.3 (the Trainer layout), a model declares its groups as globs; the GPT-2-family
  models (GPT-2, GPT-3, Mixtral...), the ones its muP configs use, declare the groups below.
  Another model with its own groups is model code this converter does not have.

The entries keep Model Zoo's own parameter names as globs: a LightningModule whose names
differ edits them, and `fit` refuses an entry that matches none of its parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from cs_lightning.errors import ConfigError, KeyPath, format_key_path

# Before 2.3: substring tests on the name, written as globs (each order of the two words).
_BEFORE_2_3 = {
    "decoder_kernel": ["*linear*weight*", "*weight*linear*", "*dense*weight*", "*weight*dense*"],
    "embedding": ["*embedding*weight*", "*weight*embedding*"],
}

# From 2.3: GPT-2-family models' default lr_adjustment_groups (whole-name globs).
_FROM_2_3 = {
    "embedding": ["*embedding*weight"],
    "decoder_kernel": ["*decoder*dense*weight", "*decoder*linear*weight", "*decoder*linear*expert_weights"],
    "decoder_attention": ["*decoder*attn*dense*weight"],
    "decoder_input_ffn": ["*decoder*ffn.ffn.[!1]*weight", "*decoder*ffn.ffn.[!1]*expert_weights"],
    "decoder_output_ffn": ["*decoder*ffn.ffn.[1]*weight", "*decoder*ffn.ffn.[1]*expert_weights"],
}

# Model Zoo 2.3+ models whose lr adjustment groups are _FROM_2_3 (GPT-3 is GPT-2's model class).
_GPT2_FAMILY = ("gpt2", "gpt3")

_RULES = {
    "legacy": (_BEFORE_2_3, "Model Zoo before 2.3 scaled the parameters whose names match"),
    "trainer": (_FROM_2_3, "Model Zoo 2.3+'s GPT-2-family models scale the parameters whose names match"),
}


def param_group_entries(
    scales: Any, key: KeyPath, layout: str
) -> tuple[list[dict[str, Any]], list[str], list[KeyPath]]:
    """``adjust_learning_rate`` at ``key`` -> (``param_groups:`` entries, report notes, keys not converted).

    An entry of scale 1 is returned too (it overrides a scale the model derives) and needs no
    group of its own: the caller drops it.

    A tag the release's rule does not know is not converted, with a warning that says what
    Model Zoo did with it. A scale that is not a number >= 0 is refused.
    """
    if not isinstance(scales, Mapping):
        return (
            [],
            [f"warning: {format_key_path(key)}: {scales!r} is not a mapping of layer tag to scale; not converted"],
            [key],
        )
    rule, wording = _RULES[layout]
    entries, notes, skipped = [], [], []
    for tag, scale in scales.items():
        tag_key = (*key, tag)
        where = format_key_path(tag_key)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale < 0:
            raise ConfigError(
                tag_key,
                f"expected a learning-rate scale, a finite number >= 0, got {scale!r}; fix: write a number such as 0.5",
            )
        if str(tag) not in rule:
            notes.append(f"warning: {where}: {_unknown(layout, str(tag))}; not converted")
            skipped.append(tag_key)
        else:
            patterns = rule[str(tag)]
            entries.append({"tag": str(tag), "params": list(patterns), "adjust_learning_rate": scale})
            if scale == 1:
                notes.append(f"{where}: 1 changes no learning rate: no param group needed")
                continue
            notes.append(
                f"{where}: {scale} -> param_groups (tag {tag}): {wording} {patterns}; "
                "ScalePerParamLR multiplies the scale into their schedule; edit params: to your model's "
                "parameter names (fit refuses an entry whose globs all match none)"
            )
    return entries, notes, skipped


def derived_entries(model: Any, key: KeyPath) -> tuple[list[dict[str, Any]], list[str]]:
    """The scales a Model Zoo 2.3+ model derives from its muP base sizes (``mup_base_*`` in the
    model section at ``key``) -> (``param_groups:`` entries, report notes).

    A GPT-2-family model divides the learning rate of its attention and input FFN kernels by
    ``hidden_size / mup_base_hidden_size``, of its output FFN kernels by ``filter_size /
    mup_base_filter_size``. Another model's rule is its own code: a warning names the key.
    """
    if not isinstance(model, Mapping):
        return [], []
    bases = [str(name) for name in model if str(name).startswith("mup_base_") and model[name] is not None]
    if not bases:
        return [], []
    sizes = [model.get(name) for name in ("hidden_size", "mup_base_hidden_size", "filter_size", "mup_base_filter_size")]
    numbers = [size for size in sizes if _positive(size)]
    if model.get("name") not in _GPT2_FAMILY or len(numbers) < len(sizes):
        return [], [
            f"warning: {format_key_path((*key, bases[0]))}: Model Zoo's {model.get('name')!r} model derives "
            "per-layer learning-rate scales from its muP base sizes in its own code; not converted: add "
            "param_groups: entries with those scales and wrap the schedule in ScalePerParamLR"
        ]
    hidden, base_hidden, filter_size, base_filter = numbers
    # as Model Zoo computes them: one over the width multiplier
    by_hidden, by_filter = 1 / (hidden / base_hidden), 1 / (filter_size / base_filter)
    scales = {"decoder_attention": by_hidden, "decoder_input_ffn": by_hidden, "decoder_output_ffn": by_filter}
    entries = [
        {"tag": tag, "params": list(_FROM_2_3[tag]), "adjust_learning_rate": scale} for tag, scale in scales.items()
    ]
    sizes_key = f"{format_key_path((*key, 'mup_base_hidden_size'))}, mup_base_filter_size"
    if by_hidden == by_filter == 1:
        return entries, [
            f"{sizes_key}: the base sizes are the model's, "
            "so every per-layer learning-rate scale is 1: no param group needed"
        ]
    return entries, [
        f"{sizes_key} -> param_groups: Model Zoo's {model['name']} model "
        f"scales the learning rate of decoder_attention and decoder_input_ffn by {by_hidden} (1 / (hidden_size / "
        f"mup_base_hidden_size)) and of decoder_output_ffn by {by_filter} (1 / (filter_size / "
        "mup_base_filter_size)), the parameters whose names match their globs; edit params: to your model's "
        "parameter names. Its other muP changes (initializers, output logits) are model code: not converted"
    ]


def _positive(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _unknown(layout: str, tag: str) -> str:
    if layout == "legacy":
        return f"Model Zoo before 2.3 knew only {sorted(_BEFORE_2_3)} and scaled no parameter for {tag!r}"
    return (
        f"{tag!r} is no lr adjustment group of Model Zoo's GPT-2-family models ({sorted(_FROM_2_3)}); "
        "its parameters are named by that model's own code: add a param_groups: entry by hand"
    )
