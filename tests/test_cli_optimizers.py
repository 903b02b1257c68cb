"""The optimizer block: both spellings build the same optimizer, later; mistakes name the key."""

import pytest
import torch

from cs_lightning.errors import ConfigError
from cs_lightning.optimizers import optimizer_factory, resolve_optimizer


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
    ],
)
def test_mistakes_name_the_key_path_and_the_fix(spec, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        optimizer_factory(spec)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ")
    assert words in str(info.value) and "fix:" in str(info.value)
