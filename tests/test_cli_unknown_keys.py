"""cs-lightning fit: an unknown key, or a torch scheduler in schedulers:, is one line naming the key and the fix."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import REPO, snapshot

from cs_lightning.cli import CSLightningCLI, main
from cs_lightning.errors import ConfigError
from cs_lightning.schedulers import build

EXAMPLE = REPO / "examples" / "image_classifier"

SCHEDULERS_INSTEAD = (
    "unknown key: cs-lightning takes a schedulers: list instead, of closed-form schedulers (Cerebras or Lightning "
    "spelling), each stepping every optimizer step; fix: e.g. schedulers: [{StepLR: {initial_learning_rate: 0.001, "
    "step_size: 3, gamma: 0.5}}], or the same as class_path: cs_lightning.schedulers.StepLR with init_args"
)
MISSPELT = "unknown key; did you mean {!r}? fix: remove it or correct its spelling (see cs-lightning fit --help)"
STEP_LR = {"class_path": "torch.optim.lr_scheduler.StepLR", "init_args": {"step_size": 3}}


def _lightning_scheduler(config: dict[str, Any]) -> None:
    config["lr_scheduler"] = {**STEP_LR, "init_args": {"step_size": 3, "gamma": 0.5}}


def _cerebras_scheduler_key(config: dict[str, Any]) -> None:
    config["scheduler"] = {"StepLR": {"step_size": 3}}
    del config["schedulers"]


def _lr_schedulers(config: dict[str, Any]) -> None:
    config["lr_schedulers"] = [STEP_LR]


def _misspelt_top_level(config: dict[str, Any]) -> None:
    config["schedulrs"] = config.pop("schedulers")


def _misspelt_trainer_key(config: dict[str, Any]) -> None:
    config["trainer"]["max_step"] = config["trainer"].pop("max_steps")


# case -> (its edit of the example's config, the line after "error: ")
UNKNOWN_KEYS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "Lightning's lr_scheduler key": (
        _lightning_scheduler,
        f"lr_scheduler: {SCHEDULERS_INSTEAD.removeprefix('unknown key: ')}",  # taken as null, as Lightning writes it
    ),
    "a scheduler key in the Cerebras spelling": (_cerebras_scheduler_key, f"scheduler: {SCHEDULERS_INSTEAD}"),
    "a list of lr_schedulers": (_lr_schedulers, f"lr_schedulers: {SCHEDULERS_INSTEAD}"),
    "a misspelt top-level key": (_misspelt_top_level, "schedulrs: " + MISSPELT.format("schedulers")),
    "a misspelt trainer key": (_misspelt_trainer_key, "trainer.max_step: " + MISSPELT.format("trainer.max_steps")),
}


def _config(tmp_path: Path, edit: Callable[[dict[str, Any]], None] = lambda config: None) -> Path:
    """The shipped example config, its imports absolute, edited by `edit`."""
    config = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
    config["imports"] = [str(EXAMPLE / "image_classifier.py")]
    config["trainer"]["default_root_dir"] = str(tmp_path)
    edit(config)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _fails_with(tmp_path: Path, args: list[str], line: str, capfd: pytest.CaptureFixture) -> None:
    before = snapshot(tmp_path)
    code = main(args)
    out, err = capfd.readouterr()
    assert (code, out, err) == (2, "", f"cs-lightning: error: {line}\n")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("print_config", [[], ["--print_config"]], ids=["fit", "print_config"])
@pytest.mark.parametrize("case", sorted(UNKNOWN_KEYS))
def test_an_unknown_key_is_named_at_its_outermost_level_with_the_fix(
    case: str, print_config: list[str], tmp_path: Path, capfd
) -> None:
    """jsonargparse names the innermost key (lr_scheduler.init_args.step_size), and another way under
    --print_config; the line names the key the user wrote wrong, the same both ways."""
    edit, line = UNKNOWN_KEYS[case]
    _fails_with(tmp_path, ["fit", "--config", str(_config(tmp_path, edit)), *print_config], line, capfd)


def test_an_unknown_command_line_option_names_the_closest_one(tmp_path: Path, capfd) -> None:
    path = _config(tmp_path)
    line = "--schedulrs: " + MISSPELT.format("--schedulers")
    _fails_with(tmp_path, ["fit", "--config", str(path), "--schedulrs", "[]"], line, capfd)


def test_an_abbreviated_option_is_refused_not_expanded(tmp_path: Path, capfd) -> None:
    """argparse expanded `--trainer.max_step 5` to max_steps silently (jsonargparse v5 stops that too)."""
    path = _config(tmp_path)
    line = "--trainer.max_step: " + MISSPELT.format("--trainer.max_steps")
    _fails_with(tmp_path, ["fit", "--config", str(path), "--trainer.max_step", "5"], line, capfd)


TORCH_REFUSAL = (
    "schedulers[0]: 'torch.optim.lr_scheduler.{}' is a torch scheduler, and a scheduler block takes closed-form "
    "ones, which count optimizer steps (Lightning steps a torch scheduler each epoch unless told interval: step); "
)
# torch scheduler -> (its init_args, the fix); the example's optimizer is AdamW with lr 3.0e-3
TORCH_SCHEDULERS = {
    "StepLR": (
        {"step_size": 3},
        "fix: write its closed form instead, {StepLR: {initial_learning_rate: 0.003, step_size: 3, gamma: 0.1}}",
    ),
    "LinearLR": (
        {"start_factor": 0.5, "total_iters": 4},
        "fix: write its closed form instead, "
        "{LinearLR: {initial_learning_rate: 0.0015, end_learning_rate: 0.003, total_iters: 4}}",
    ),
    "ReduceLROnPlateau": (
        {},
        "it has no closed form (it reacts to a monitored metric, which no function of the step can); fix: keep it "
        "in the model's configure_optimizers, or write a closed-form scheduler of cs_lightning.schedulers "
        "(torch's class names, Cerebras arguments)",
    ),
}


@pytest.mark.parametrize("name", sorted(TORCH_SCHEDULERS))
def test_a_torch_scheduler_in_schedulers_is_refused_naming_its_closed_form(name: str, tmp_path: Path, capfd) -> None:
    init_args, fix = TORCH_SCHEDULERS[name]

    def torch_scheduler(config: dict[str, Any]) -> None:
        config["schedulers"] = [{"class_path": f"torch.optim.lr_scheduler.{name}", "init_args": init_args}]

    path = _config(tmp_path, torch_scheduler)
    _fails_with(tmp_path, ["fit", "--config", str(path)], TORCH_REFUSAL.format(name) + fix, capfd)


def test_the_closed_form_named_gives_the_torch_schedulers_learning_rates() -> None:
    """The block in the refusal is the schedule itself: built, it steps through torch's values."""
    ours, theirs = (torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=3.0e-3) for _ in range(2))
    closed_form = {"LinearLR": {"initial_learning_rate": 0.0015, "end_learning_rate": 0.003, "total_iters": 4}}
    (ours_scheduler,) = build([closed_form], ours)
    theirs_scheduler = torch.optim.lr_scheduler.LinearLR(theirs, start_factor=0.5, total_iters=4)
    for _ in range(6):
        assert ours.param_groups[0]["lr"] == pytest.approx(theirs.param_groups[0]["lr"], rel=1e-6)
        ours_scheduler.step()
        theirs_scheduler.step()


def test_the_cli_class_names_the_closest_key_of_the_command_line_it_reads(tmp_path: Path, monkeypatch) -> None:
    """CSLightningCLI() in a user's script parses sys.argv: the subcommand's keys are still the ones searched."""
    path = _config(tmp_path, _misspelt_trainer_key)
    monkeypatch.setattr(sys, "argv", ["train.py", "fit", "--config", str(path)])
    monkeypatch.syspath_prepend(str(EXAMPLE))  # the script imports its model module itself (main reads imports:)
    with pytest.raises(ConfigError) as refused:
        CSLightningCLI()
    assert str(refused.value) == "trainer.max_step: " + MISSPELT.format("trainer.max_steps")


def test_lightning_s_own_lr_scheduler_null_is_taken(tmp_path: Path, capfd) -> None:
    """A config LightningCLI saved or printed holds lr_scheduler: null; it runs as the same config without it."""

    def null_scheduler(config: dict[str, Any]) -> None:
        config["lr_scheduler"] = None
        config["trainer"]["max_steps"] = 1

    assert main(["fit", "--config", str(_config(tmp_path, null_scheduler)), "--print_config"]) == 0
    assert "\nlr_scheduler: null\n" in capfd.readouterr().out
