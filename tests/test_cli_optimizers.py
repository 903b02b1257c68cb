"""The optimizer block: both spellings build the same optimizer, later; mistakes name the key."""

import copy
import warnings
from typing import Any

import pytest
import torch

from cs_lightning.errors import ConfigError
from cs_lightning.optimizers import merge_optimizer_blocks, optimizer_factory, resolve_optimizer


def test_both_spellings_build_the_same_optimizer_on_the_parameters_given_later() -> None:
    cerebras = optimizer_factory({"AdamW": {"lr": 3e-4, "weight_decay": 0.1, "betas": [0.9, 0.95]}})
    lightning = optimizer_factory(
        {"class_path": "torch.optim.AdamW", "init_args": {"lr": 3e-4, "weight_decay": 0.1, "betas": [0.9, 0.95]}}
    )
    params = [torch.nn.Parameter(torch.ones(3))]
    a, b = cerebras(params), lightning(params)
    assert type(a) is type(b) is torch.optim.AdamW
    assert a.param_groups[0]["params"][0] is params[0]
    for key in ("lr", "weight_decay", "betas"):
        assert a.param_groups[0][key] == b.param_groups[0][key]
    assert a.param_groups[0]["lr"] == 3e-4 and tuple(a.param_groups[0]["betas"]) == (0.9, 0.95)


def test_names_resolve_case_insensitively_and_by_dotted_path() -> None:
    assert resolve_optimizer("adamw") is torch.optim.AdamW
    assert resolve_optimizer("SGD") is torch.optim.SGD
    assert resolve_optimizer("torch.optim.RMSprop") is torch.optim.RMSprop
    assert isinstance(optimizer_factory("Adam")([torch.nn.Parameter(torch.ones(1))]), torch.optim.Adam)


@pytest.mark.parametrize(
    ("spec", "key", "words"),
    [
        ({"AdamWW": {"lr": 0.1}}, "optimizer", "did you mean AdamW"),
        ({"AdamW": {"lrr": 0.1}}, "optimizer.AdamW.lrr", "did you mean lr"),
        ({"AdamW": {"lr": -1.0}}, "optimizer.AdamW", "Invalid learning rate"),
        ({"AdamW": 0.1}, "optimizer.AdamW", "mapping of arguments"),
        ({"AdamW": {}, "SGD": {}}, "optimizer", "exactly one optimizer name"),
        ({"class_path": "torch.optim.NoSuch"}, "optimizer", "cannot import"),
        ({"class_path": "torch.nn.Linear"}, "optimizer", "not a torch.optim.Optimizer"),
        ({"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}, "extra": 1}, "optimizer.extra", "class_path"),
        ([1, 2], "optimizer", "expected a mapping"),
        ({"init_args": {"lr": 0.1}}, "optimizer", "init_args with no class_path, and no optimizer given before"),
        ({"AdamW": {"lr": True}}, "optimizer.AdamW.lr", "expected a number, got True; fix: write a number such as"),
        ({"AdamW": {"lr": "3.0e-3"}}, "optimizer.AdamW.lr", "got '3.0e-3'; fix: write it without quotes: 3.0e-3"),
        ({"SGD": {"lr": 0.1, "momentum": [0.9]}}, "optimizer.SGD.momentum", "expected a number, got [0.9]"),
        ({"AdamW": {"lr": float("inf")}}, "optimizer.AdamW.lr", "expected a finite number, got inf; fix: write a"),
        ({"SGD": {"lr": 0.1, "weight_decay": float("nan")}}, "optimizer.SGD.weight_decay", "a finite number, got nan"),
        ({"AdamW": {"betas": 0.9}}, "optimizer.AdamW.betas", "expected 2 numbers, got 0.9; fix: write a list such as"),
        ({"Adam": {"betas": [0.9, "0.95"]}}, "optimizer.Adam.betas", "expected 2 numbers, got [0.9, '0.95']"),
        ({"Adam": {"betas": "0.9, 0.95"}}, "optimizer.Adam.betas", "expected 2 numbers"),
    ],
)
def test_mistakes_name_the_key_path_and_the_fix(spec, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        optimizer_factory(spec)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ")
    assert words in str(info.value) and "fix:" in str(info.value)


def test_only_nan_and_an_infinite_lr_are_refused_as_not_finite() -> None:
    """An int is finite however large (math.isfinite overflowed on it); ASGD's t0: .inf means never average."""
    optimizer_factory({"AdamW": {"lr": 10**400}})
    optimizer_factory({"ASGD": {"lr": 0.01, "t0": float("inf")}})


ADAMW = {"AdamW": {"lr": 0.003, "weight_decay": 0.2}}


class KwargsSGD(torch.optim.SGD):
    """Takes any argument on to SGD: another optimizer's earlier arguments all carry over to it."""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)


class RateSGD(torch.optim.SGD):
    """Names its rate as Model Zoo does: an earlier `lr` carries over as `learning_rate`."""

    def __init__(self, params: Any, learning_rate: float = 0.1) -> None:
        super().__init__(params, lr=learning_rate)


@pytest.mark.parametrize(
    ("earlier", "later", "merged"),
    [
        (ADAMW, {"AdamW": {"lr": 0.001}}, {"AdamW": {"lr": 0.001, "weight_decay": 0.2}}),
        (ADAMW, {"adamw": {"amsgrad": True}}, {"adamw": {"lr": 0.003, "weight_decay": 0.2, "amsgrad": True}}),
        (
            ADAMW,
            {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.001}},
            {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.001, "weight_decay": 0.2}},
        ),
        (ADAMW, {"init_args": {"lr": 0.001}}, {"AdamW": {"lr": 0.001, "weight_decay": 0.2}}),
        (ADAMW, "AdamW", ADAMW),
        # another optimizer keeps the earlier arguments it takes, as LightningCLI does
        (ADAMW, {"SGD": {"lr": 0.5}}, {"SGD": {"lr": 0.5, "weight_decay": 0.2}}),
        (
            ADAMW,
            {"class_path": "torch.optim.SGD"},
            {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.003, "weight_decay": 0.2}},
        ),
        ({"AdamW": {"lr": 0.003, "betas": [0.8, 0.9]}}, "SGD", {"SGD": {"lr": 0.003}}),
        ({"AdamW": {"betas": [0.8, 0.9]}}, "SGD", {"SGD": {}}),
        ({"Adam": {"learning_rate": 0.003, "correct_bias": True}}, "SGD", {"SGD": {"learning_rate": 0.003}}),
        (ADAMW, {"NoSuch": {"b": 2}}, {"NoSuch": {"b": 2}}),
        (ADAMW, f"{__name__}.KwargsSGD", {f"{__name__}.KwargsSGD": {"lr": 0.003, "weight_decay": 0.2}}),
        ({"SGD": {"lr": 0.1, "momentum": 0.9}}, f"{__name__}.RateSGD", {f"{__name__}.RateSGD": {"learning_rate": 0.1}}),
        (ADAMW, None, None),
        (None, {"AdamW": {"lr": 0.001}}, {"AdamW": {"lr": 0.001}}),
        ({"NoSuch": {"a": 1}}, {"nosuch": {"b": 2}}, {"nosuch": {"a": 1, "b": 2}}),
        ({"AdamW": {}, "SGD": {}}, {"AdamW": {"lr": 0.001}}, {"AdamW": {"lr": 0.001}}),
    ],
)
def test_a_later_block_merges_its_arguments_as_lightning_merges_init_args(earlier, later, merged) -> None:
    before = copy.deepcopy(earlier)
    assert merge_optimizer_blocks(earlier, later) == merged
    assert earlier == before


def _settings(optimizer: torch.optim.Optimizer) -> dict:
    return {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}


@pytest.mark.parametrize("name", ["Adam", "AdamW", "adamw"])
def test_model_zoo_correct_bias_true_is_what_torch_adam_does_and_is_dropped(name: str) -> None:
    params = [torch.nn.Parameter(torch.ones(2))]
    pasted = optimizer_factory({name: {"lr": 0.01, "correct_bias": True, "eps": 1e-6}})(params)
    plain = optimizer_factory({name: {"lr": 0.01, "eps": 1e-6}})(params)
    assert type(pasted) is type(plain) and _settings(pasted) == _settings(plain)
    assert "correct_bias" not in _settings(pasted)


@pytest.mark.parametrize(("args", "expected"), [({"learning_rate": 0.02}, 0.02), ({"lr": 0.03}, 0.03)])
def test_model_zoo_learning_rate_is_lr(args: dict, expected: float) -> None:
    for name in ("AdamW", "SGD"):
        optimizer = optimizer_factory({name: args})([torch.nn.Parameter(torch.ones(1))])
        assert optimizer.param_groups[0]["lr"] == expected


def test_model_zoo_epsilon_is_eps() -> None:
    optimizer = optimizer_factory({"AdamW": {"lr": 0.1, "epsilon": 1e-8, "weight_decay": 0.0}})(
        [torch.nn.Parameter(torch.ones(1))]
    )
    assert optimizer.param_groups[0]["eps"] == 1e-8


@pytest.mark.parametrize(
    ("spec", "key", "words"),
    [
        (
            {"AdamW": {"correct_bias": False}},
            "optimizer.AdamW.correct_bias",
            "False: torch's AdamW always corrects the bias and cannot turn it off; fix: remove correct_bias",
        ),
        ({"AdamW": {"lr": 0.1, "learning_rate": 0.2}}, "optimizer.AdamW.learning_rate", "fix: keep only lr"),
        (
            {"AdamW": {"adjust_learning_rate": {"decoder_kernel": 0.25}}},
            "optimizer.AdamW.adjust_learning_rate",
            "param_groups: block",
        ),
        ({"SGD": {"correct_bias": True}}, "optimizer.SGD.correct_bias", "SGD has no argument 'correct_bias'"),
        ({"AdamW": {"params": [{"params": ["*"]}]}}, "optimizer.AdamW.params", "AdamW has no argument 'params'"),
    ],
)
def test_what_torch_cannot_do_of_a_model_zoo_block_is_refused_pointing_to_convert(spec, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        optimizer_factory(spec)
    assert info.value.key == key
    assert words in str(info.value) and "fix:" in str(info.value)
    if "learning_rate" not in spec.get("AdamW", {}):  # both spellings of lr: nothing for convert to do
        assert "`cs-lightning convert" in str(info.value)


def test_a_model_zoo_block_leaving_a_default_that_torch_sets_differently_is_warned_about() -> None:
    with pytest.warns(UserWarning) as seen:
        optimizer_factory({"AdamW": {"learning_rate": 0.01, "correct_bias": True, "weight_decay": 0.1}})
    assert [str(w.message) for w in seen] == [
        "optimizer.AdamW: a Cerebras Model Zoo block without eps: torch's default eps=1e-08 applies, "
        "where Model Zoo's was 1e-06; write eps: to choose"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimizer_factory({"AdamW": {"lr": 0.01}})  # torch's own spelling: torch's defaults, as written
        optimizer_factory({"Adam": {"lr": 0.01, "eps": 1e-6, "correct_bias": True}})


class ClippedSGD(torch.optim.SGD):
    """timm's Lamb spells it so: an Optional[float] whose None turns the clipping off."""

    def __init__(self, params, lr: float = 0.1, max_grad_norm: float | None = 1.0) -> None:
        super().__init__(params, lr=lr)
        self.max_grad_norm = max_grad_norm


def test_null_for_a_number_whose_default_is_one_is_the_constructors_to_judge() -> None:
    build = optimizer_factory({"class_path": "test_cli_optimizers.ClippedSGD", "init_args": {"max_grad_norm": None}})
    assert build([torch.nn.Parameter(torch.ones(1))]).max_grad_norm is None
