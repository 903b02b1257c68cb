"""A later --config or a command-line key merges into optimizer: as Lightning merges init_args;
the schedulers: and param_groups: lists are replaced whole, never reached into."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import yaml
from test_cli import digits_run, write

from cs_lightning.cli import main

BASE = {"AdamW": {"lr": 0.003, "weight_decay": 0.2, "betas": [0.8, 0.9]}}
BASE_CLASS_PATH = {"class_path": "torch.optim.AdamW", "init_args": BASE["AdamW"]}


class RecordGroups(L.Callback):
    """Notes the optimizer's class and its first group's settings when training starts."""

    seen: list[tuple[str, dict[str, Any]]] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        optimizer = trainer.optimizers[0]
        group = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
        RecordGroups.seen.append((type(optimizer).__name__, group))


def _run(root: Path, optimizer: Any) -> Path:
    config = digits_run(root, optimizer=optimizer)
    config["trainer"].update(max_steps=1, callbacks=[{"class_path": "test_cli_block_arguments.RecordGroups"}])
    return write(root / "run.yaml", config)


# case -> (the first config's optimizer:, what follows it, the block built, the settings it must hold)
CASES = {
    "second config, same optimizer": (
        BASE,
        ["--config", "lr_only.yaml"],
        {"AdamW": {"lr": 0.001, "weight_decay": 0.2, "betas": [0.8, 0.9]}},
        {"lr": 0.001, "weight_decay": 0.2, "betas": (0.8, 0.9), "amsgrad": False},
    ),
    "dotted keys, Model Zoo spelling": (
        BASE,
        ["--optimizer.AdamW.amsgrad", "true", "--optimizer.AdamW.lr", "0.001"],
        {"AdamW": {"lr": 0.001, "weight_decay": 0.2, "betas": [0.8, 0.9], "amsgrad": True}},
        {"lr": 0.001, "weight_decay": 0.2, "betas": (0.8, 0.9), "amsgrad": True},
    ),
    "dotted keys, class_path spelling": (
        BASE_CLASS_PATH,
        ["--optimizer.init_args.lr", "0.001", "--optimizer.init_args.betas", "[0.7, 0.75]"],
        {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.001, "weight_decay": 0.2, "betas": [0.7, 0.75]}},
        {"lr": 0.001, "weight_decay": 0.2, "betas": (0.7, 0.75), "amsgrad": False},
    ),
    "dotted key, Lightning's short form": (
        BASE,
        ["--optimizer.weight_decay", "0.5"],
        {"AdamW": {"lr": 0.003, "weight_decay": 0.5, "betas": [0.8, 0.9]}},
        {"lr": 0.003, "weight_decay": 0.5, "betas": (0.8, 0.9), "amsgrad": False},
    ),
    "command line, a Model Zoo block in JSON over torch's spelling": (
        BASE,
        ["--optimizer", '{"AdamW": {"learning_rate": 0.001}}'],
        {"AdamW": {"weight_decay": 0.2, "betas": [0.8, 0.9], "learning_rate": 0.001}},
        {"lr": 0.001, "weight_decay": 0.2, "betas": (0.8, 0.9), "amsgrad": False},
    ),
    "dotted key, Lightning's short form over Model Zoo's spelling": (
        {"AdamW": {"learning_rate": 0.003, "weight_decay_rate": 0.2}},
        ["--optimizer.lr", "0.001", "--optimizer.weight_decay", "0.5"],
        {"AdamW": {"lr": 0.001, "weight_decay": 0.5}},
        {"lr": 0.001, "weight_decay": 0.5},
    ),
    "command line, Lightning's name then its argument": (
        None,
        ["--optimizer", "AdamW", "--optimizer.lr", "0.001"],
        {"AdamW": {"lr": 0.001}},
        {"lr": 0.001, "weight_decay": 0.01, "amsgrad": False},
    ),
    "second config of init_args alone": (
        BASE_CLASS_PATH,
        ["--config", "init_args_only.yaml"],
        {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.001, "weight_decay": 0.2, "betas": [0.8, 0.9]}},
        {"lr": 0.001, "weight_decay": 0.2, "betas": (0.8, 0.9), "amsgrad": False},
    ),
    # as in LightningCLI, the earlier arguments the new class takes carry over; AdamW's betas do not
    "second config, another optimizer": (
        BASE,
        ["--config", "sgd.yaml"],
        {"SGD": {"lr": 0.5, "weight_decay": 0.2}},
        {"lr": 0.5, "weight_decay": 0.2, "momentum": 0.0},
    ),
    "command line, another optimizer by name, class_path spelling": (
        BASE_CLASS_PATH,
        ["--optimizer", "SGD", "--optimizer.momentum", "0.5"],
        {"class_path": "SGD", "init_args": {"lr": 0.003, "weight_decay": 0.2, "momentum": 0.5}},
        {"lr": 0.003, "weight_decay": 0.2, "momentum": 0.5},
    ),
    "command line, another optimizer by name, Model Zoo spelling": (
        {"AdamW": {"learning_rate": 0.003, "weight_decay_rate": 0.2, "correct_bias": True}},
        ["--optimizer", "SGD"],
        {"SGD": {"learning_rate": 0.003, "weight_decay_rate": 0.2}},
        {"lr": 0.003, "weight_decay": 0.2, "momentum": 0.0},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_overrides_merge_into_the_optimizer_block_and_the_saved_config_is_what_is_built(
    case: str, tmp_path: Path, capfd
) -> None:
    first, extra, block, settings = CASES[case]
    write(tmp_path / "lr_only.yaml", {"optimizer": {"AdamW": {"lr": 0.001}}})
    write(tmp_path / "init_args_only.yaml", {"optimizer": {"init_args": {"lr": 0.001}}})
    write(tmp_path / "sgd.yaml", {"optimizer": {"SGD": {"lr": 0.5}}})
    args = ["fit", "--config", str(_run(tmp_path, first)), *extra]
    assert main([*args, "--print_config"]) == 0
    assert yaml.safe_load(capfd.readouterr().out)["optimizer"] == block
    RecordGroups.seen.clear()
    assert main(args) == 0, capfd.readouterr().err
    ((name, group),) = RecordGroups.seen
    assert name == (block["class_path"].rsplit(".", 1)[-1] if "class_path" in block else next(iter(block)))
    assert {key: group[key] for key in settings} == settings
    saved = yaml.safe_load((tmp_path / "lightning_logs/version_0/config.yaml").read_text())
    assert saved["optimizer"] == block


@pytest.mark.parametrize(
    ("option", "block"),
    [("--schedulers.0.CosineDecayLR.total_iters", "schedulers"), ("--param_groups.0.tag", "param_groups")],
)
def test_a_dotted_key_into_a_list_block_is_one_line_naming_the_key_and_the_fix(
    option: str, block: str, tmp_path: Path, capfd
) -> None:
    schedulers = [{"CosineDecayLR": {"initial_learning_rate": 0.003, "end_learning_rate": 0.0, "total_iters": 10}}]
    config = digits_run(tmp_path, optimizer=BASE, schedulers=schedulers)
    path = write(tmp_path / "run.yaml", config)
    assert main(["fit", "--config", str(path), option, "100", "--print_config"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"cs-lightning: error: {option[2:]}: ")
    assert f"fix: give the whole block, --{block} '[{{...}}]', or put it in a second --config file" in err


def test_a_later_schedulers_list_replaces_the_earlier_one_whole(tmp_path: Path, capfd) -> None:
    cosine = {"CosineDecayLR": {"initial_learning_rate": 0.003, "end_learning_rate": 0.0, "total_iters": 10}}
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, optimizer=BASE, schedulers=[cosine, cosine]))
    later = write(
        tmp_path / "later.yaml",
        {"schedulers": [{"LinearLR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 5}}]},
    )
    assert main(["fit", "--config", str(path), "--config", str(later), "--print_config"]) == 0
    assert yaml.safe_load(capfd.readouterr().out)["schedulers"] == [
        {"LinearLR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 5}}
    ]


def test_schedule_combines_optimizer_blocks_of_several_configs_as_fit_does(tmp_path: Path, capfd) -> None:
    write(tmp_path / "adamw.yaml", {"optimizer": BASE, "trainer": {"max_steps": 2}})
    write(tmp_path / "sgd.yaml", {"optimizer": {"SGD": {"lr": 0.5}}})
    write(tmp_path / "lr_only.yaml", {"optimizer": {"init_args": {"lr": 0.001}}})
    for later, lr in (("sgd.yaml", 0.5), ("lr_only.yaml", 0.001)):
        assert main(["schedule", "--config", "adamw.yaml", "--config", later]) == 0, capfd.readouterr().err
        _header, *rows = capfd.readouterr().out.splitlines()
        assert [float(row.split()[1]) for row in rows] == [lr, lr]


def test_optimizer_help_lists_the_arguments_with_their_defaults_as_lightning_cli_does(capfd) -> None:
    assert main(["fit", "--optimizer.help", "AdamW"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith("torch.optim.AdamW: Implements AdamW algorithm") and err == ""
    assert "  --optimizer.lr  (default: 0.001, Model Zoo: learning_rate)\n" in out
    assert "  --optimizer.betas  (default: (0.9, 0.999))\n" in out
    assert "params" not in out
    assert main(["fit", "--optimizer.help", "Adamm"]) == 2
    out, err = capfd.readouterr()
    assert (
        out == ""
        and err
        == "cs-lightning: error: optimizer.help: unknown optimizer 'Adamm'; fix: did you mean Adam or RAdam or NAdam?\n"
    )
