"""Model Zoo's muP per-layer scales -> param_groups: entries that select the parameters Model Zoo did."""

from __future__ import annotations

import pytest
import torch

from cs_lightning import mup, param_groups
from cs_lightning.errors import ConfigError

# Parameter names of Model Zoo's GPT-2-family models (one decoder layer), and the tag each
# release's rule gives them.
BEFORE_2_3 = {
    "embedding_layer.word_embeddings.weight": "embedding",
    "transformer_decoder.layers.0.self_attn.proj_q_dense_layer.weight": "decoder_kernel",
    "transformer_decoder.layers.0.self_attn.proj_q_dense_layer.bias": None,
    "transformer_decoder.layers.0.ffn.ffn.0.linear_layer.weight": "decoder_kernel",
    "transformer_decoder.layers.0.norm1.weight": None,
    "lm_head.weight": None,
}
FROM_2_3 = {
    "embedding_layer.word_embeddings.weight": "embedding",
    "transformer_decoder.layers.0.self_attn.proj_output_dense_layer.weight": "decoder_attention",
    "transformer_decoder.layers.0.ffn.ffn.0.linear_layer.weight": "decoder_input_ffn",
    "transformer_decoder.layers.0.ffn.ffn.1.linear_layer.weight": "decoder_output_ffn",
    "transformer_decoder.layers.0.ffn.ffn.1.linear_layer.bias": None,
    "transformer_decoder.layers.0.norm1.weight": None,
}


def _grouped(names: list[str], entries: list[dict]) -> dict[str, str | None]:
    """name -> tag of the group `split` puts it in (None: the untagged rest)."""
    params = {name: torch.nn.Parameter(torch.zeros(1)) for name in names}
    groups = param_groups.split(params.items(), param_groups.parse(entries))
    owner = {id(p): next(iter(group.get("tags", {None}))) for group in groups for p in group["params"]}
    return {name: owner[id(p)] for name, p in params.items()}


def test_before_2_3_a_tag_selects_names_holding_its_words() -> None:
    entries, notes, skipped = mup.param_group_entries(
        {"decoder_kernel": 0.25, "embedding": 10.0}, ("optimizer", "adjust_learning_rate"), "legacy"
    )
    assert [(e["tag"], e["adjust_learning_rate"]) for e in entries] == [("decoder_kernel", 0.25), ("embedding", 10.0)]
    assert skipped == [] and len(notes) == 2
    assert _grouped(list(BEFORE_2_3), entries) == BEFORE_2_3


def test_from_2_3_the_gpt2_family_groups_are_whole_name_globs() -> None:
    scales = {"embedding": 10.0, "decoder_attention": 0.5, "decoder_input_ffn": 0.5, "decoder_output_ffn": 0.25}
    entries, _, skipped = mup.param_group_entries(
        scales, ("trainer", "init", "optimizer", "AdamW", "adjust_learning_rate"), "trainer"
    )
    assert skipped == []
    assert _grouped(list(FROM_2_3), entries) == FROM_2_3


def test_a_tag_the_release_did_not_know_is_not_converted_with_a_warning() -> None:
    key = "optimizer.adjust_learning_rate"
    entries, notes, skipped = mup.param_group_entries(
        {"output_layer": 0.5}, ("optimizer", "adjust_learning_rate"), "legacy"
    )
    assert entries == [] and skipped == [("optimizer", "adjust_learning_rate", "output_layer")]
    assert notes == [
        f"warning: {key}.output_layer: Model Zoo before 2.3 knew only ['decoder_kernel', 'embedding'] and "
        "scaled no parameter for 'output_layer'; not converted",
    ]


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -1, "half", True])
def test_a_scale_that_is_not_a_finite_number_at_least_0_is_refused(scale: object) -> None:
    """It was a warning, and the converted run trained every layer at the unscaled rate."""
    with pytest.raises(ConfigError) as err:
        mup.param_group_entries({"decoder_kernel": scale}, ("optimizer", "adjust_learning_rate"), "legacy")
    assert str(err.value) == (
        f"optimizer.adjust_learning_rate.decoder_kernel: expected a learning-rate scale, a finite number >= 0, "
        f"got {scale!r}; fix: write a number such as 0.5"
    )


def test_a_gpt3_models_base_sizes_give_its_scales() -> None:
    """Model Zoo's GPT-2 model: attention and input FFN by 1 / (hidden / base), output FFN by 1 / (filter / base)."""
    model = {"name": "gpt3", "hidden_size": 768, "filter_size": 3072, "mup_base_hidden_size": 256}
    entries, notes = mup.derived_entries({**model, "mup_base_filter_size": 1024}, ("trainer", "init", "model"))
    assert [(e["tag"], e["adjust_learning_rate"]) for e in entries] == [
        ("decoder_attention", 1 / 3),
        ("decoder_input_ffn", 1 / 3),
        ("decoder_output_ffn", 1 / 3),
    ]
    assert notes[0].startswith("trainer.init.model.mup_base_hidden_size, mup_base_filter_size -> param_groups")
    entries, _ = mup.derived_entries({**model, "mup_base_filter_size": 512}, ("trainer", "init", "model"))
    assert entries[2]["adjust_learning_rate"] == pytest.approx(1 / 6)


def test_base_sizes_equal_to_the_models_need_no_group() -> None:
    model = {"name": "gpt2", "hidden_size": 256, "filter_size": 1024}
    entries, notes = mup.derived_entries({**model, "mup_base_hidden_size": 256, "mup_base_filter_size": 1024}, ("m",))
    assert {e["adjust_learning_rate"] for e in entries} == {1.0}
    assert notes == [
        "m.mup_base_hidden_size, mup_base_filter_size: the base sizes are the model's, so every per-layer "
        "learning-rate scale is 1: no param group needed"
    ]


@pytest.mark.parametrize(
    "model, key",
    [
        ({"name": "t5", "d_model": 1024, "mup_base_d_model": 512}, "m.mup_base_d_model"),
        ({"name": "gpt3", "hidden_size": 768, "mup_base_hidden_size": 256}, "m.mup_base_hidden_size"),
    ],
)
def test_a_model_whose_rule_is_its_own_code_gets_a_warning_naming_the_key(model: dict, key: str) -> None:
    entries, notes = mup.derived_entries(model, ("m",))
    assert entries == []
    assert notes == [
        f"warning: {key}: Model Zoo's {model['name']!r} model derives per-layer learning-rate scales from its muP "
        "base sizes in its own code; not converted: add param_groups: entries with those scales and wrap the "
        "schedule in ScalePerParamLR"
    ]
