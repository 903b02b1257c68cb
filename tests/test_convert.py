"""Cerebras Model Zoo YAML -> cs-lightning YAML: schedules, mapped keys, unmapped report, errors."""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, run_cli, snapshot

from cs_lightning import schedulers
from cs_lightning.cli import main
from cs_lightning.cli.convert_command import convert_command, convert_file
from cs_lightning.convert import convert, dump, probe_optimizer
from cs_lightning.errors import ConfigError, format_key_path

DATA = REPO / "tests" / "data" / "modelzoo"

# The three realistic configs, each with the path of its Model Zoo schedule block.
CONFIGS = {
    "gpt_trainer.yaml": ("trainer", "init", "schedulers"),
    "legacy_gpt3.yaml": ("optimizer", "learning_rate"),
    "chained_tags.yaml": ("trainer", "init", "schedulers"),
}


def _load(name: str) -> dict:
    return yaml.safe_load((DATA / name).read_text())


def _at(config: dict, path: tuple[str, ...]):
    for key in path:
        config = config[key]
    return config


def _values(spec, steps: int) -> torch.Tensor:
    """Every schedule of a block on one probe optimizer: (steps, groups) per scheduler, stacked."""
    optimizer = probe_optimizer(spec)
    return torch.stack([s.values(range(steps)) for s in schedulers.build(spec, optimizer)])


@pytest.mark.parametrize("name", CONFIGS)
def test_converted_schedules_equal_the_model_zoo_blocks(name):
    source = _load(name)
    converted, _ = convert(source, source=name)
    block = _at(source, CONFIGS[name])
    steps = converted["trainer"]["max_steps"] + 1
    expected, got = _values(block, steps), _values(converted["schedulers"], steps)
    assert got.shape == expected.shape
    assert torch.equal(got.nan_to_num(-1.0), expected.nan_to_num(-1.0))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_source_key_is_mapped_or_reported(name, tmp_path):
    report = convert_file(DATA / name, tmp_path / "run.yaml")
    text = (tmp_path / "run.yaml").read_text()
    mapped = [tuple(src) for src, _ in report.mapped]
    unmapped = [tuple(key) for key, _, _ in report.unmapped]
    for leaf in _leaf_paths(_load(name)):
        covered = [m for m in mapped if leaf[: len(m)] == m]  # the key itself or a key under it
        assert bool(covered) != (leaf in unmapped), format_key_path(leaf)
    for key in unmapped:
        assert f"# {format_key_path(key)}: " in text
        assert format_key_path(key) in report.format()


def _leaf_paths(value, path=()):
    """The key paths (tuples) of a config's leaves: lists of plain values are leaves."""
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _leaf_paths(child, (*path, key))
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        for index, child in enumerate(value):
            yield from _leaf_paths(child, (*path, index))
    else:
        yield path


def test_gpt_trainer_config():
    converted, report = convert(_load("gpt_trainer.yaml"))
    trainer = converted["trainer"]
    assert converted["seed_everything"] == 1234
    assert (trainer["accelerator"], trainer["strategy"], trainer["devices"]) == ("csx", "csx", 1)
    assert (trainer["precision"], trainer["gradient_clip_val"], trainer["gradient_clip_algorithm"]) == (
        "bf16-mixed",
        1.0,
        "norm",
    )
    assert trainer["max_steps"] == 5000 and trainer["accumulate_grad_batches"] == 4
    # eval every 500 optimizer steps = every 2,000 micro-batches; 100 eval batches.
    assert (trainer["val_check_interval"], trainer["check_val_every_n_epoch"], trainer["limit_val_batches"]) == (
        2000,
        None,
        100,
    )
    assert trainer["callbacks"] == [
        {
            "class_path": "cs_lightning.StepCheckpoint",
            "init_args": {"every_n_train_steps": 1000, "save_top_k": -1},
        }
    ]
    assert trainer["log_every_n_steps"] == 10 and trainer["default_root_dir"] == "./model_dir_gpt"
    assert converted["optimizer"] == {"AdamW": {"betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}}
    assert converted["schedulers"][0]["SequentialLR"]["milestones"] == [375]
    assert converted["ckpt_path"] == "./model_dir_gpt/checkpoint_0.mdl"
    unmapped = {format_key_path(key) for key, _, _ in report.unmapped}
    assert {
        "trainer.init.model.name",
        "trainer.fit.train_dataloader.data_processor",
        "trainer.init.callbacks[0].ComputeNorm",
        "trainer.init.precision.precision_opt_level",
    } <= unmapped


def test_legacy_config():
    converted, report = convert(_load("legacy_gpt3.yaml"))
    assert converted["schedulers"] == [
        {
            "SequentialLR": {
                "schedulers": [
                    {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 2e-4, "total_iters": 1500}},
                    {"CosineDecayLR": {"initial_learning_rate": 2e-4, "end_learning_rate": 2e-5, "total_iters": 9000}},
                    {"ConstantLR": {"learning_rate": 2e-5}},
                ],
                "milestones": [1500, 10500],
            }
        }
    ]
    # weight_decay_rate is the old name; eps is written out because Cerebras' default is 1e-6.
    assert converted["optimizer"] == {"AdamW": {"weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-6}}
    assert converted["trainer"]["precision"] == "bf16-mixed"
    assert converted["trainer"]["callbacks"][0]["init_args"]["every_n_train_steps"] == 2000
    assert converted["seed_everything"] == 7
    assert (("optimizer", "log_summaries"), True, "Model Zoo summaries: use Lightning loggers") in report.unmapped


@pytest.mark.parametrize(
    ("model", "precision"),
    [
        ({"use_bfloat16": True}, "bf16-mixed"),
        ({"mixed_precision": True}, "16-mixed"),
        ({"mixed_precision": True, "use_bfloat16": True}, "bf16-mixed"),
        ({"mixed_precision": True, "use_bfloat16": False}, "16-mixed"),
        ({"mixed_precision": False, "use_bfloat16": True}, "32-true"),  # the switch is off: no half type
        ({"mixed_precision": True, "fp16_type": "cbfloat16", "use_bfloat16": True}, "bf16-mixed"),
    ],
)
def test_legacy_precision_switches(model, precision):
    """Model Zoo 1.x: mixed_precision turns half precision on, use_bfloat16 picks bfloat16 over float16;
    each key given is reported as mapped to trainer.precision, and no key that is not given."""
    source = _load("legacy_gpt3.yaml")
    for key in ("mixed_precision", "fp16_type"):
        del source["model"][key]
    source["model"].update(model)
    converted, report = convert(source)
    assert converted["trainer"]["precision"] == precision
    into_precision = {key[-1] for key, dst in report.mapped if dst == "trainer.precision"}
    assert into_precision == set(model) - ({"use_bfloat16"} if "fp16_type" in model else set())


def test_old_scheduler_spellings_and_chained_main_scheduler():
    config = {
        "optimizer": {
            "optimizer_type": "SGD",
            "momentum": 0.9,
            "learning_rate": [
                {
                    "scheduler": "Linear",
                    "initial_learning_rate": 0.0,
                    "end_learning_rate": 0.1,
                    "steps": 10,
                    "main_scheduler": "chained",
                },
                {"scheduler": "Exponential", "learning_rate": 1.0, "decay_steps": 5, "decay_rate": 0.5},
            ],
        },
        "runconfig": {"max_steps": 20},
    }
    converted, _ = convert(config)
    assert converted["schedulers"] == [
        {
            "ChainedScheduler": {
                "schedulers": [
                    {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 10}},
                    {"ExponentialLR": {"initial_learning_rate": 1.0, "total_iters": 5, "decay_rate": 0.5}},
                ]
            }
        }
    ]
    assert converted["optimizer"] == {"SGD": {"momentum": 0.9}}


def test_old_spellings_in_trainer_init_schedulers_are_renamed_too():
    linear = {"initial_learning_rate": 0.0, "end_learning_rate": 0.1}
    config = {
        "trainer": {
            "init": {
                "optimizer": {"SGD": {"lr": 0.1}},
                "schedulers": [
                    {
                        "SequentialLR": {
                            "schedulers": [
                                {"Linear": {**linear, "decay_steps": 10}},
                                {"CosineDecay": {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "steps": 5}},
                            ]
                        }
                    }
                ],
                "loop": {"max_steps": 15},
            }
        }
    }
    converted, _ = convert(config)
    (block,) = converted["schedulers"]
    first, second = block["SequentialLR"]["schedulers"]
    assert first == {"LinearLR": {**linear, "total_iters": 10}}
    assert second["CosineDecayLR"]["total_iters"] == 5 and "steps" not in second["CosineDecayLR"]
    assert block["SequentialLR"]["milestones"] == [10]


def test_a_float_learning_rate_is_the_optimizers():
    converted, _ = convert(
        {"optimizer": {"optimizer_type": "SGD", "learning_rate": 0.01}, "runconfig": {"max_steps": 3}}
    )
    assert converted["optimizer"] == {"SGD": {"lr": 0.01}} and "schedulers" not in converted


def test_cerebras_only_optimizer_is_reported_not_guessed():
    config = {"trainer": {"init": {"optimizer": {"Lamb": {"weight_decay": 0.01}}, "loop": {"max_steps": 5}}}}
    converted, report = convert(config)
    assert "optimizer" not in converted
    assert [key for key, _, why in report.unmapped if "no torch.optim counterpart" in why] == [
        ("trainer", "init", "optimizer", "Lamb", "weight_decay")
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"trainer": {"init": {"optimizer": {"AdamWW": {"lr": 0.1}}, "loop": {"max_steps": 5}}}},
            "trainer.init.optimizer.AdamWW: unknown optimizer 'AdamWW', neither cerebras.pytorch's nor torch.optim's;"
            " fix: did you mean AdamW or Adam or RAdam?",
        ),
        (
            {"optimizer": {"optimizer_type": "SDG", "learning_rate": 0.01}, "runconfig": {"max_steps": 3}},
            "optimizer.optimizer_type: unknown optimizer 'SDG', neither cerebras.pytorch's nor torch.optim's;"
            " fix: did you mean SGD?",
        ),
    ],
)
def test_a_misspelt_optimizer_is_refused_naming_the_one_meant(config, message):
    """It was reported as a cerebras.pytorch optimizer without a torch counterpart, and the run then lacked one."""
    with pytest.raises(ConfigError) as err:
        convert(config)
    assert str(err.value) == message


def test_a_key_holding_a_dot_is_one_key_of_the_report():
    """A muP tag `embedding.extra` is not below the converted tag `embedding`: it is reported unmapped."""
    scales = {"embedding": 2.0, "embedding.extra": 3.0}
    config = {"optimizer": {"optimizer_type": "SGD", "learning_rate": 0.01, "adjust_learning_rate": scales}}
    converted, report = convert({**config, "runconfig": {"max_steps": 3}})
    assert [entry["tag"] for entry in converted["param_groups"]] == ["embedding"]
    key = ("optimizer", "adjust_learning_rate", "embedding.extra")
    assert [(path, value) for path, value, _ in report.unmapped] == [(key, 3.0)]
    said = report.format().splitlines()
    at = said.index("    optimizer.adjust_learning_rate.embedding.extra")
    assert said[at - 1].startswith("  muP per-layer")  # its reason heads it


def test_tagged_schedules_say_the_groups_need_tags():
    _, report = convert(_load("chained_tags.yaml"))
    assert any("tagged ['decoder']" in note for note in report.notes)


def test_convert_is_pure():
    source = _load("gpt_trainer.yaml")
    before = copy.deepcopy(source)
    assert convert(source) == convert(source)
    assert source == before


BAD = {
    "bad_unknown_scheduler.yaml": "trainer.init.schedulers[0].SequentialLR.schedulers[1]",
    "bad_milestones.yaml": "trainer.init.schedulers[0].SequentialLR.milestones: got [150, 100]",
    "bad_not_trainer.yaml": "not a Cerebras Model Zoo config",
    "bad_legacy_unknown_scheduler.yaml": "optimizer.learning_rate[0].scheduler",
}


@pytest.mark.parametrize("name", BAD)
def test_bad_files_give_one_line_and_exit_2(name, tmp_path, capsys):
    out = tmp_path / "run.yaml"
    assert main(["convert", str(DATA / name), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cs-lightning: error: ")
    assert BAD[name] in err
    assert not out.exists()


def test_the_convert_command_leaves_the_error_line_to_the_cli(tmp_path, capsys):
    """One error path for every subcommand: convert raises, `cs-lightning` prints the line and exits 2."""
    with pytest.raises(ConfigError, match="not a Cerebras Model Zoo config"):
        convert_command([str(DATA / "bad_not_trainer.yaml"), "-o", str(tmp_path / "run.yaml")])
    assert capsys.readouterr() == ("", "") and not (tmp_path / "run.yaml").exists()


def test_bad_milestones_name_the_fix():
    with pytest.raises(ConfigError, match=r"milestones: got \[150, 100\]; milestones must be strictly increasing"):
        convert(_load("bad_milestones.yaml"))


def test_unknown_scheduler_lists_close_names():
    with pytest.raises(ConfigError, match="CosineDecayLR"):
        convert(_load("bad_unknown_scheduler.yaml"))


@pytest.mark.parametrize(
    "argv",
    [
        ["missing.yaml", "-o", "run.yaml"],
        ["only-source.yaml"],
        [str(DATA / "gpt_trainer.yaml"), "-o", "no_such_folder/run.yaml"],
    ],
)
def test_missing_file_or_argument_exit_2(argv, capsys):
    assert main(["convert", *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert list(Path().iterdir()) == []


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("trainer:\n  init:\n    optimizer: {AdamW: 5}\n", "trainer.init.optimizer.AdamW"),
        (
            "trainer:\n  init:\n    schedulers: [{torch.optim.lr_scheduler.StepLR: {step_size: 3}}]\n",
            "trainer.init.schedulers[0].torch.optim.lr_scheduler.StepLR",
        ),
    ],
)
def test_malformed_blocks_are_one_line_errors(text, key, tmp_path, capsys):
    (tmp_path / "mz.yaml").write_text(text)
    assert main(["convert", "mz.yaml", "-o", "run.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cs-lightning: error: {key}: ")
    assert not (tmp_path / "run.yaml").exists()


@pytest.mark.parametrize("warmup", [375, 0], ids=["warmup", "warmup_off"])
def test_converted_config_trains_with_cs_lightning_fit(warmup, tmp_path):
    """total_iters: 0 is how a Model Zoo config turns its warmup off: the cosine decay then starts at step 0."""
    source = (DATA / "gpt_trainer.yaml").read_text()
    (tmp_path / "mz.yaml").write_text(source.replace("total_iters: 375", f"total_iters: {warmup}"))
    convert_file(tmp_path / "mz.yaml", tmp_path / "run.yaml")
    (schedule,) = yaml.safe_load((tmp_path / "run.yaml").read_text())["schedulers"]
    assert schedule["SequentialLR"]["milestones"] == [warmup]
    code = main(
        [
            "fit",
            "--config",
            str(tmp_path / "run.yaml"),
            "--model",
            "lightning.pytorch.demos.boring_classes.BoringModel",
            "--ckpt_path",
            "null",
            "--trainer.max_steps",
            "3",
            "--trainer.limit_val_batches",
            "0",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.logger",
            "false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert code == 0


def test_cs_lightning_convert_subcommand(tmp_path, capsys):
    assert main(["convert", str(DATA / "legacy_gpt3.yaml"), "-o", str(tmp_path / "run.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "unmapped, by reason" in printed and "model.hidden_size" in printed
    written = (tmp_path / "run.yaml").read_text()
    assert "model.hidden_size: 2048" in written  # the value, with its reason, marked at the end of the file
    assert yaml.safe_load(written)["trainer"]["max_steps"] == 12000
    assert main(["convert", str(DATA / "bad_not_trainer.yaml"), "-o", str(tmp_path / "bad.yaml")]) == 2
    assert not (tmp_path / "bad.yaml").exists()


def test_converting_a_converted_file_says_it_is_a_run_yaml_already(tmp_path, capsys):
    """It said that a Model Zoo Trainer config needs trainer: {init: ...}, which the user had never written."""
    assert main(["convert", str(DATA / "legacy_gpt3.yaml"), "-o", str(tmp_path / "run.yaml")]) == 0
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "run.yaml"), "-o", str(tmp_path / "again.yaml")]) == 2
    assert capsys.readouterr().err == (
        "cs-lightning: error: trainer: this looks like a cs-lightning run.yaml already (trainer: holds Lightning's"
        " Trainer arguments, such as max_steps); fix: run it with cs-lightning fit --config, or convert the Model"
        " Zoo YAML it came from\n"
    )
    assert not (tmp_path / "again.yaml").exists()


def test_exponent_floats_without_a_dot_are_numbers(tmp_path):
    """`3e-4` is a str to PyYAML's YAML 1.1 resolver, a float to `cs-lightning fit`: convert agrees with fit."""
    (tmp_path / "mz.yaml").write_text(
        "trainer:\n  init:\n    optimizer: {AdamW: {lr: 3e-4}}\n"
        "    schedulers: [{CosineDecayLR: {initial_learning_rate: 3e-4, end_learning_rate: 1e-5, total_iters: 9}}]\n"
    )
    convert_file(tmp_path / "mz.yaml", tmp_path / "run.yaml")
    written = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert written["optimizer"]["AdamW"]["lr"] == 3e-4
    assert written["schedulers"] == [
        {"CosineDecayLR": {"initial_learning_rate": 3e-4, "end_learning_rate": 1e-5, "total_iters": 9}}
    ]


# ----------------------------------------------------------------- the output file


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_convert_never_writes_over_its_input(force, tmp_path):
    """Also not with --force, also through a symbolic link: the input would be gone."""
    (tmp_path / "mz.yaml").write_bytes((DATA / "gpt_trainer.yaml").read_bytes())
    (tmp_path / "link.yaml").symlink_to("mz.yaml")
    before = snapshot(tmp_path)
    for out in ("mz.yaml", "link.yaml"):
        result = run_cli("convert", "mz.yaml", "-o", out, *force, cwd=tmp_path)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == (
            f"cs-lightning: error: --out: '{out}' is the input file; writing over it "
            "would destroy it; fix: give another output path\n"
        )
    assert snapshot(tmp_path) == before


def test_convert_overwrites_an_existing_output_only_with_force(tmp_path):
    (tmp_path / "mz.yaml").write_bytes((DATA / "gpt_trainer.yaml").read_bytes())
    (tmp_path / "run.yaml").write_text("# my own edits\n")
    before = snapshot(tmp_path)
    refused = run_cli("convert", "mz.yaml", "-o", "run.yaml", cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "cs-lightning: error: --out: 'run.yaml' already exists; fix: give another path, "
        "or pass --force to overwrite it\n"
    )
    assert snapshot(tmp_path) == before
    inode = (tmp_path / "run.yaml").stat().st_ino
    forced = run_cli("convert", "mz.yaml", "-o", "run.yaml", "--force", cwd=tmp_path)
    assert forced.returncode == 0 and forced.stdout.endswith("wrote run.yaml\n")
    assert yaml.safe_load((tmp_path / "run.yaml").read_text())["trainer"]["max_steps"] == 5000
    # written to a temporary file renamed into place (a new inode), and no temporary file is left
    assert (tmp_path / "run.yaml").stat().st_ino != inode
    assert sorted(snapshot(tmp_path)) == ["mz.yaml", "run.yaml"]


def test_force_writes_through_a_link_and_keeps_the_files_permissions(tmp_path):
    (tmp_path / "mz.yaml").write_bytes((DATA / "gpt_trainer.yaml").read_bytes())
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "run.yaml").write_text("# old\n")
    (tmp_path / "configs" / "run.yaml").chmod(0o640)
    (tmp_path / "run.yaml").symlink_to("configs/run.yaml")
    forced = run_cli("convert", "mz.yaml", "-o", "run.yaml", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "run.yaml").is_symlink()  # the link stays; the file it names is the new config
    assert yaml.safe_load((tmp_path / "configs" / "run.yaml").read_text())["trainer"]["max_steps"] == 5000
    assert (tmp_path / "configs" / "run.yaml").stat().st_mode & 0o777 == 0o640
    (tmp_path / "dangling.yaml").symlink_to("no/such/folder/run.yaml")  # written through, it would make folders
    refused = run_cli("convert", "mz.yaml", "-o", "dangling.yaml", cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "'dangling.yaml' links to" in refused.stderr and "in no folder; fix:" in refused.stderr
    assert not (tmp_path / "no").exists()
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    refused = run_cli("convert", "mz.yaml", "-o", "loop.yaml", "--force", cwd=tmp_path)
    assert (
        refused.stderr
        == "cs-lightning: error: --out: 'loop.yaml' is a symbolic link that loops; fix: give a file path\n"
    )
    assert (tmp_path / "loop.yaml").is_symlink()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_an_output_that_is_no_regular_file_is_refused_even_with_force(tmp_path):
    """A device or a pipe: renaming the new file over it would replace the device itself."""
    (tmp_path / "mz.yaml").write_bytes((DATA / "gpt_trainer.yaml").read_bytes())
    os.mkfifo(tmp_path / "pipe")
    before = snapshot(tmp_path)
    refused = run_cli("convert", "mz.yaml", "-o", "pipe", "--force", cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "cs-lightning: error: --out: 'pipe' is not a regular file (a device, a pipe or a socket); "
        "fix: give a file path\n"
    )
    assert snapshot(tmp_path) == before and stat.S_ISFIFO((tmp_path / "pipe").stat().st_mode)


def test_a_cerebras_only_optimizer_with_a_schedule_converts_and_its_schedule_is_checked(tmp_path, capsys):
    """Lamb is left for the user to write: the schedule is still written, checked on a stand-in optimizer."""
    linear = {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.001, "total_iters": 5}}
    init = {"optimizer": {"Lamb": {"learning_rate": 0.001}}, "schedulers": [linear], "loop": {"max_steps": 5}}
    (tmp_path / "mz.yaml").write_text(yaml.safe_dump({"trainer": {"init": init}}))
    assert main(["convert", str(tmp_path / "mz.yaml"), "-o", str(tmp_path / "run.yaml")]) == 0
    written = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert "optimizer" not in written and written["schedulers"] == [linear]
    init["schedulers"] = [{"LinearLR": {**linear["LinearLR"], "total_iters": -1}}]
    (tmp_path / "mz.yaml").write_text(yaml.safe_dump({"trainer": {"init": init}}))
    assert main(["convert", str(tmp_path / "mz.yaml"), "-o", str(tmp_path / "run2.yaml")]) == 2
    assert "total_iters" in capsys.readouterr().err and not (tmp_path / "run2.yaml").exists()


@pytest.mark.parametrize(
    ("init", "error"),
    [
        (
            {
                "optimizer": {"AdamW": {"learning_rate": 0.001}},
                "schedulers": [
                    {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.001, "total_iters": 5}},
                    {"ConstantLR": {"learning_rate": 0.001}},
                ],
            },
            "schedulers[1] (as converted from mz.yaml): ConstantLR sets 'lr' of param group 0 (untagged), as"
            " schedulers[0] (LinearLR) does, so only the later would apply; fix: compose them",
        ),
        (
            {"optimizer": {"AdamW": {"learning_rate": 0.001, "weight_decay": -0.01}}},
            "optimizer.AdamW (as converted from mz.yaml): AdamW rejects {'lr': 0.001, 'weight_decay': -0.01,"
            " 'eps': 1e-06}: Invalid weight_decay value: -0.01; fix: correct the value",
        ),
    ],
)
def test_convert_refuses_a_config_that_fit_would_refuse_and_writes_nothing(init, error, tmp_path, capsys):
    """It wrote the run.yaml and exited 0; `fit` and `schedule` then refused it."""
    (tmp_path / "mz.yaml").write_text(yaml.safe_dump({"trainer": {"init": {**init, "loop": {"max_steps": 5}}}}))
    assert main(["convert", str(tmp_path / "mz.yaml"), "-o", str(tmp_path / "run.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"cs-lightning: error: {error}") and err.count("\n") == 1
    assert not (tmp_path / "run.yaml").exists()


@pytest.mark.parametrize(
    ("out", "problem"),
    [
        ("sub", "'sub' is a folder; fix: give a file path such as 'sub/run.yaml'"),
        (
            "no_such/run.yaml",
            "cannot write 'no_such/run.yaml': no folder 'no_such'; fix: give a path in an existing folder",
        ),
        (
            "mz.yaml/run.yaml",
            "cannot write 'mz.yaml/run.yaml': 'mz.yaml' is a file; fix: give a path in an existing folder",
        ),
    ],
)
def test_convert_refuses_an_output_it_cannot_write(out, problem, tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "mz.yaml").write_text("a file, where a folder is named\n")
    before = snapshot(tmp_path)
    assert main(["convert", str(DATA / "gpt_trainer.yaml"), "-o", out]) == 2
    assert capsys.readouterr() == ("", f"cs-lightning: error: --out: {problem}\n")
    assert snapshot(tmp_path) == before and not (tmp_path / "no_such").exists()


def test_a_source_that_is_not_utf8_is_one_line(tmp_path, capsys):
    (tmp_path / "mz.yaml").write_bytes("# r\xe9sum\xe9\ntrainer: {init: {}}\n".encode("latin-1"))
    assert main(["convert", "mz.yaml", "-o", "run.yaml"]) == 2
    assert capsys.readouterr() == (
        "",
        "cs-lightning: error: source: 'mz.yaml' is not UTF-8 text (byte 0xe9 at offset 3); fix: save the file as UTF-8\n",
    )
    assert sorted(snapshot(tmp_path)) == ["mz.yaml"]


LEGACY_1_9 = """\
optimizer:
  optimizer_type: AdamW
  disable_lr_steps_reset: True
  learning_rate:
    - {scheduler: Linear, initial_learning_rate: 0.0, end_learning_rate: 0.0006, steps: 10}
    - {scheduler: Linear, initial_learning_rate: 0.0006, end_learning_rate: 0.0, alpha: 0.1, steps: 90}
runconfig: {max_steps: 100}
"""


def test_model_zoo_1_9_spellings_convert_with_their_1_9_meaning(tmp_path, capsys):
    """Linear's alpha and PiecewiseConstant's initial_learning_rate were never read by 1.9.1's
    scheduler builder: dropped with a warning, the schedule is what 1.9.1 computed."""
    (tmp_path / "gpt2.yaml").write_text(LEGACY_1_9)
    (tmp_path / "unet.yaml").write_text(
        "optimizer:\n  optimizer_type: Adam\n  learning_rate:\n    initial_learning_rate: 5.0e-4\n"
        "    scheduler: PiecewiseConstant\n    boundaries: [10]\n    values: [5.0e-4, 1.0e-5]\nrunconfig: {max_steps: 20}\n"
    )
    assert main(["convert", "gpt2.yaml", "-o", "gpt2_run.yaml"]) == 0
    report = capsys.readouterr().out
    assert (
        "warning: optimizer.learning_rate[1].alpha: 0.1 dropped: Model Zoo 1.9's Linear never read alpha and "
        "decayed to end_learning_rate"
    ) in report
    assert "optimizer.disable_lr_steps_reset: True: in Model Zoo 1.9 it was handed to the CS system's" in report
    assert "the converted SequentialLR restarts each scheduler's count at its milestone" in report
    [schedule] = schedulers.build(
        yaml.safe_load((tmp_path / "gpt2_run.yaml").read_text())["schedulers"], probe_optimizer()
    )
    values = schedule.values(100)[:, 0]
    assert values[10].item() == pytest.approx(6e-4) and values[55].item() == pytest.approx(3e-4)
    assert values[99].item() == pytest.approx(6e-4 / 90, rel=1e-5)  # to end_learning_rate 0, not alpha * 6e-4 (float32)
    assert main(["convert", "unet.yaml", "-o", "unet_run.yaml"]) == 0
    assert "warning: optimizer.learning_rate.initial_learning_rate: 0.0005 dropped" in capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "unet_run.yaml").read_text())["schedulers"] == [
        {"PiecewiseConstantLR": {"learning_rates": [5e-4, 1e-5], "milestones": [10]}}
    ]


def test_mup_scales_become_param_groups_found_by_name_as_model_zoo_did(tmp_path, capsys):
    (tmp_path / "mup.yaml").write_text(
        "optimizer:\n  optimizer_type: AdamW\n  adjust_learning_rate: {decoder_kernel: 0.25, output: 2.0}\n"
        "  learning_rate: {scheduler: Linear, initial_learning_rate: 0.01, end_learning_rate: 0.0, steps: 10}\n"
        "runconfig: {max_steps: 10}\n"
    )
    assert main(["convert", "mup.yaml", "-o", "run.yaml"]) == 0
    report = capsys.readouterr().out
    patterns = ["*linear*weight*", "*weight*linear*", "*dense*weight*", "*weight*dense*"]
    assert (
        f"optimizer.adjust_learning_rate.decoder_kernel: 0.25 -> param_groups (tag decoder_kernel): Model Zoo "
        f"before 2.3 scaled the parameters whose names match {patterns}"
    ) in report
    assert (
        "warning: optimizer.adjust_learning_rate.output: Model Zoo before 2.3 knew only ['decoder_kernel', "
        "'embedding'] and scaled no parameter for 'output'; not converted"
    ) in report
    converted = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert converted["param_groups"] == [{"tag": "decoder_kernel", "params": patterns, "adjust_learning_rate": 0.25}]
    linear = {"LinearLR": {"initial_learning_rate": 0.01, "end_learning_rate": 0.0, "total_iters": 10}}
    assert converted["schedulers"] == [{"ScalePerParamLR": {"scheduler": linear}}]
    # the schedule shows both groups: the scaled one at 0.25 x the schedule

    assert main(["schedule", "--config", "run.yaml", "--table"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert "group 1 (decoder_kernel) lr" in header
    assert [[float(v) for v in row.split()] for row in rows][5] == [5, pytest.approx(0.005), pytest.approx(0.00125)]
    # BoringModel's names are not Model Zoo's: fit refuses the globs, naming the model's names
    assert main(["fit", "--config", "run.yaml", "--model", "lightning.pytorch.demos.boring_classes.BoringModel"]) == 2
    assert capsys.readouterr().err == (
        f"cs-lightning: error: param_groups[0].params: {patterns} match no trainable parameter of the model (its "
        "names: layer.weight, layer.bias); fix: give globs of the model's parameter names, as model.named_parameters() lists them once built\n"
    )
    assert sorted(snapshot(tmp_path)) == ["mup.yaml", "run.yaml"]


@pytest.mark.parametrize(
    "source",
    [
        "trainer: {init: {loop: {max_steps: 10}, optimizer: {AdamW: {lr: 0.001, adjust_learning_rate: {embedding: 0.5}}}}}",
        "runconfig: {max_steps: 10}\noptimizer: {optimizer_type: AdamW, learning_rate: 0.001, "
        "adjust_learning_rate: {embedding: 0.5}}",
    ],
)
def test_per_layer_scales_beside_a_constant_rate_get_a_schedule_that_applies_them(source, tmp_path, capsys):
    """Without a schedule, fit refuses scales that no ScalePerParamLR reads: the converted file must run."""
    (tmp_path / "mz.yaml").write_text(source + "\n")
    assert main(["convert", "mz.yaml", "-o", "run.yaml"]) == 0
    assert "ScalePerParamLR over ConstantLR multiplies each group's scale in" in capsys.readouterr().out
    converted = yaml.safe_load((tmp_path / "run.yaml").read_text())
    constant = {"ConstantLR": {"learning_rate": 0.001}}
    assert converted["schedulers"] == [{"ScalePerParamLR": {"scheduler": constant}}]
    assert main(["schedule", "--config", "run.yaml", "--table", "--steps", "2"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [[float(v) for v in row.split()] for row in rows] == [[0, 0.001, 0.0005], [1, 0.001, 0.0005]]


@pytest.mark.parametrize(
    "child",
    [
        {"CosineDecayLRR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 5}},
        {"CosineDecayLR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iterz": 5}},
        {"CosineDecayLR": {"initial_learning_rate": -0.1, "end_learning_rate": 0.0, "total_iters": 5}},
    ],
)
def test_convert_and_schedule_word_the_same_mistake_the_same_way(child, tmp_path, capsys):
    """Only the root of the key path differs: the Model Zoo file's trainer.init., or none in run.yaml."""

    block = [
        {
            "SequentialLR": {
                "schedulers": [
                    {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 5}},
                    child,
                ]
            }
        }
    ]
    (tmp_path / "mz.yaml").write_text(
        yaml.safe_dump(
            {"trainer": {"init": {"optimizer": {"AdamW": {"lr": 0.1}}, "schedulers": block, "loop": {"max_steps": 10}}}}
        )
    )
    (tmp_path / "run.yaml").write_text(
        yaml.safe_dump({"optimizer": {"AdamW": {"lr": 0.1}}, "schedulers": block, "trainer": {"max_steps": 10}})
    )
    assert main(["convert", "mz.yaml", "-o", "out.yaml"]) == 2
    converted = capsys.readouterr().err
    assert main(["schedule", "--config", "run.yaml"]) == 2
    scheduled = capsys.readouterr().err
    assert converted.startswith("cs-lightning: error: trainer.init.schedulers[0].SequentialLR.schedulers[1].")
    assert converted.replace("error: trainer.init.", "error: ") == scheduled
    assert sorted(snapshot(tmp_path)) == ["mz.yaml", "run.yaml"]


def _legacy(optimizer: dict, runconfig: dict | None = None) -> dict:
    return {"optimizer": {"optimizer_type": "AdamW", **optimizer}, "runconfig": runconfig or {"max_steps": 10}}


@pytest.mark.parametrize(
    ("optimizer", "expected"),
    [
        (  # Model Zoo 1.9.1 llama 7b: betas from beta1/beta2, eps the Cerebras default it leaves out
            {"beta1": 0.9, "beta2": 0.95, "weight_decay_rate": 0.1, "learning_rate": 3e-4},
            {"AdamW": {"betas": [0.9, 0.95], "weight_decay": 0.1, "lr": 3e-4, "eps": 1e-6}},
        ),
        (  # gpt2 small: its epsilon, not the Cerebras default, is the eps
            {"epsilon": 1e-8, "beta1": 0.9, "beta2": 0.98},
            {"AdamW": {"betas": [0.9, 0.98], "eps": 1e-8, "weight_decay": 0.0}},
        ),
        ({"beta2": 0.95}, {"AdamW": {"betas": [0.9, 0.95], "eps": 1e-6, "weight_decay": 0.0}}),  # beta1's default
        ({"optimizer_type": "Adam", "beta1": 0.8}, {"Adam": {"betas": [0.8, 0.999], "eps": 1e-6}}),
        ({"optimizer_type": "SGD", "learning_rate": 0.1, "momentum": 0.9}, {"SGD": {"lr": 0.1, "momentum": 0.9}}),
        (  # Cerebras' decay_rate and clip_threshold are torch's beta2_decay and d
            {"optimizer_type": "AdaFactor", "learning_rate": 0.01, "decay_rate": -0.7, "clip_threshold": 1.0},
            {"Adafactor": {"lr": 0.01, "beta2_decay": -0.7, "d": 1.0}},
        ),
    ],
)
def test_model_zoo_optimizer_spellings_keep_the_configs_numbers(optimizer, expected):
    converted, report = convert(_legacy(optimizer))
    assert converted["optimizer"] == expected
    assert not [key for key, _, _ in report.unmapped if key[0] == "optimizer"]


def test_a_beta_left_out_is_said_to_take_the_default():
    _, report = convert(_legacy({"beta2": 0.95}))
    assert "optimizer AdamW: betas [0.9, 0.95]: beta1=0.9 not given, cerebras.pytorch's default" in report.notes


LINEAR_1_9 = {"scheduler": "Linear", "initial_learning_rate": 0.0, "end_learning_rate": 0.001, "steps": 10}


@pytest.mark.parametrize(
    ("learning_rate", "message"),
    [
        ([{**LINEAR_1_9, "steps": -5}], "optimizer.learning_rate[0].steps: got -5; steps must be >= 0"),
        (
            [LINEAR_1_9, {"scheduler": "Constant", "learning_rate": -0.1}],
            "optimizer.learning_rate[1].learning_rate: got -0.1; a learning rate must be >= 0",
        ),
        ({**LINEAR_1_9, "steps": 2.5}, "optimizer.learning_rate.steps: got 2.5; steps must be an int"),
        (
            [
                LINEAR_1_9,
                {
                    "scheduler": "Exponential",
                    "initial_learning_rate": 0.1,
                    "decay_steps": 5,
                    "decay_rate": 0.5,
                    "steps": 20,
                },
            ],
            "optimizer.learning_rate[1].decay_steps: decay_steps: 5 and steps: 20 both give ExponentialLR's "
            "total_iters; fix: keep the one you mean",
        ),
    ],
)
def test_a_legacy_schedule_refused_is_said_at_its_key_and_in_its_words(learning_rate, message):
    """It was said at the block it became (optimizer.learning_rate[0].SequentialLR.schedulers[0].LinearLR.total_iters)."""
    with pytest.raises(ConfigError) as err:
        convert(_legacy({"learning_rate": learning_rate}))
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("optimizer", "message"),
    [
        ({"beta1": 0.9, "betas": [0.9, 0.99]}, "optimizer.beta1: Model Zoo's spelling of a part of betas, which is"),
        ({"epsilon": 1e-8, "eps": 1e-6}, "optimizer.epsilon: Model Zoo's spelling of eps, which is given too"),
        ({"learning_rate": "fast"}, "optimizer.learning_rate: expected a number, got 'fast'; fix: write a number"),
        ({"beta1": "high"}, "optimizer.beta1: expected a number, got 'high'"),
        ({"learning_rate": True}, "optimizer.learning_rate: expected a number, got True"),
    ],
)
def test_optimizer_arguments_that_cannot_be_read_are_refused(optimizer, message):
    with pytest.raises(ConfigError) as err:
        convert(_legacy(optimizer))
    assert str(err.value).startswith(message)


def test_a_quoted_learning_rate_is_the_number_as_model_zoo_reads_it(tmp_path, capsys):
    """Model Zoo float()s a learning rate given as text; before, it was dropped and torch's 1e-3 ran."""
    (tmp_path / "mz.yaml").write_text('optimizer: {optimizer_type: AdamW, learning_rate: "2.0e-4"}\n')
    assert main(["convert", str(tmp_path / "mz.yaml"), "-o", str(tmp_path / "run.yaml")]) == 0
    text = (tmp_path / "run.yaml").read_text()
    assert yaml.safe_load(text)["optimizer"] == {"AdamW": {"lr": 2e-4, "eps": 1e-6, "weight_decay": 0.0}}
    assert "# - optimizer.learning_rate: the text '2.0e-4' read as the number 0.0002" in text
    assert "# ---- unmapped" not in text  # nothing left out: before, the rate was, and torch's 1e-3 ran


@pytest.mark.parametrize(
    ("runconfig", "key", "value"),
    [
        ({"max_steps": -5}, "runconfig.max_steps", "-5"),
        ({"max_steps": 10**20}, "runconfig.max_steps", str(10**20)),
        ({"num_steps": 0}, "runconfig.num_steps", "0"),
        ({"max_steps": 10, "eval_steps": -1}, "runconfig.eval_steps", "-1"),
        ({"max_steps": 10, "seed": 2**32}, "runconfig.seed", str(2**32)),
        ({"max_steps": 10, "eval_frequency": 2**62, "grad_accum_steps": 4}, "runconfig.eval_frequency", str(2**62)),
        ({"max_steps": 10, "checkpoint_steps": 2**63}, "runconfig.checkpoint_steps", str(2**63)),
    ],
)
def test_counts_out_of_range_are_one_line_errors_and_nothing_is_written(runconfig, key, value, tmp_path, capsys):
    (tmp_path / "mz.yaml").write_text(yaml.safe_dump(_legacy({"learning_rate": 1e-4}, runconfig)))
    assert main(["convert", str(tmp_path / "mz.yaml"), "-o", str(tmp_path / "run.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"cs-lightning: error: {key}: expected a whole number")
    assert f"got {value}; fix: give one in that range" in err
    assert not (tmp_path / "run.yaml").exists()


def test_adafactor_differences_are_in_the_output_file(tmp_path):
    source = {"optimizer": {"optimizer_type": "AdaFactor", "learning_rate": 0.01}, "runconfig": {"max_steps": 10}}
    (tmp_path / "mz.yaml").write_text(yaml.safe_dump(source))
    convert_file(tmp_path / "mz.yaml", tmp_path / "run.yaml")
    text = (tmp_path / "run.yaml").read_text()
    assert yaml.safe_load(text)["optimizer"] == {"Adafactor": {"lr": 0.01}}
    notes = text.split("# ---- notes ----\n")[1]
    assert notes.startswith("# - optimizer Adafactor: not the same algorithm as cerebras.pytorch's")
    assert "torch by min(lr, 1/sqrt(step)) * max(eps2, RMS(param))" in notes


def test_model_zoo_loss_scaling_settings_are_said_to_be_lightnings():
    _, report = convert(_legacy({"initial_loss_scale": 2.0**31, "steps_per_increase": 2000}))
    reasons = {format_key_path(key): why for key, _, why in report.unmapped}
    assert set(reasons) == {"optimizer.initial_loss_scale", "optimizer.steps_per_increase"}
    assert all(why.startswith("Cerebras dynamic loss scaling: Lightning's 16-mixed") for why in reasons.values())


def test_per_tag_parameter_groups_are_reported_as_such():
    groups = [
        {"params": ["*.mask_token", "*.mlp.*.weight"], "tag": "wd_params"},
        {"params": ["*.mask_token*"], "tag": "emb"},
    ]
    source = {"trainer": {"init": {"optimizer": {"AdamW": {"eps": 1e-8, "params": groups}}, "loop": {"max_steps": 5}}}}
    converted, report = convert(source)
    assert converted["optimizer"] == {"AdamW": {"eps": 1e-8, "weight_decay": 0.0}}
    assert {why for _, _, why in report.unmapped} == {"Model Zoo parameter group: see the notes"}
    assert len(report.unmapped) == 4
    note = next(note for note in report.notes if note.startswith("trainer.init.optimizer.AdamW.params: "))
    assert "2 parameter groups by tag (wd_params, emb) not converted" in note
    assert "configure_optimizers" in note


@pytest.mark.parametrize(
    ("name", "written", "misspelt", "key"),
    [
        ("gpt_trainer.yaml", "      max_steps:", "      max_step:", "trainer.init.loop.max_step"),
        ("gpt_trainer.yaml", "    optimizer:", "    optimiser:", "trainer.init.optimiser"),
        (
            "gpt_trainer.yaml",
            "    loop:",
            "    lopp:",
            None,
        ),  # as far from loop as keys Model Zoo has: left to the report
        ("gpt_trainer.yaml", "weight_decay: 0.1", "weight_decya: 0.1", "trainer.init.optimizer.AdamW.weight_decya"),
        ("legacy_gpt3.yaml", "  max_steps:", "  max_step:", "runconfig.max_step"),
        ("legacy_gpt3.yaml", "weight_decay_rate:", "weight_decay_rat:", "optimizer.weight_decay_rat"),
    ],
)
def test_a_misspelt_key_is_refused_naming_the_one_meant(name, written, misspelt, key, tmp_path, capsys):
    """Left unmapped, a typo would be a setting the run silently goes without (no max_steps, no weight decay)."""
    text = (DATA / name).read_text()
    assert written in text
    (tmp_path / "mz.yaml").write_text(text.replace(written, misspelt, 1))
    code = main(["convert", str(tmp_path / "mz.yaml"), "-o", str(tmp_path / "run.yaml")])
    if key is None:
        assert code == 0 and "trainer.init.lopp" in capsys.readouterr().out
        return
    meant = written.split(":")[0].strip()
    assert code == 2 and not (tmp_path / "run.yaml").exists()
    assert capsys.readouterr().err == (
        f"cs-lightning: error: {key}: no key of this name is read here; did you mean {meant!r}? "
        "fix: correct its spelling\n"
    )


def test_num_steps_beside_max_steps_is_said_to_be_left_out():
    source = _load("gpt_trainer.yaml")
    source["trainer"]["init"]["loop"]["num_steps"] = 1000
    _, report = convert(source)
    assert ("trainer", "init", "loop", "num_steps") in [key for key, _, _ in report.unmapped]
    (note,) = [note for note in report.notes if "num_steps" in note]
    assert note.startswith("num_steps=1000 < max_steps=5000: a Model Zoo run stops after num_steps more steps")
    source["trainer"]["init"]["loop"]["num_steps"] = 5000  # equal: the same run either way
    assert not [note for note in convert(source)[1].notes if "num_steps" in note]


def test_unmapped_text_with_line_breaks_stays_in_its_comment(tmp_path):
    """A value or key holding a line break would end the comment and put its text into the config."""
    source = _load("gpt_trainer.yaml")
    source["trainer"]["init"]["model"]["note"] = "line one\nmax_steps: 5\nfoo: bar"
    source["trainer"]["init"]["model"]["two\nlines"] = 1
    source["trainer"]["init"]["model"]["carriage\rreturn"] = 2
    source["trainer"]["init"]["model"]["line\u2028separator"] = 3
    converted, report = convert(source)
    text = dump(converted, report)
    assert yaml.safe_load(text) == converted
    assert '# trainer.init.model.note: "line one\\nmax_steps: 5\\nfoo: bar"  (' in text
    assert "# trainer.init.model.two\\nlines: 1  (" in text
    assert "# trainer.init.model.carriage\\rreturn: 2  (" in text
    assert "# trainer.init.model.line\\u2028separator: 3  (" in text


@pytest.mark.parametrize(
    ("systems", "accum", "said"),
    [
        (1, 4, "grad_accum_steps=4: Model Zoo's batch_size is the global batch, a Lightning batch is one micro-batch "
         "of one device: use batch_size / 4 in your DataModule"),
        (2, 4, "num_csx=2 * grad_accum_steps=4: Model Zoo's batch_size is the global batch, a Lightning batch is one "
         "micro-batch of one device: use batch_size / 8 in your DataModule"),
        (2, 1, "num_csx=2: Model Zoo's batch_size is the global batch, a Lightning batch is one micro-batch of one "
         "device: use batch_size / 2 in your DataModule"),
        (1, 1, None),
    ],
)  # fmt: skip
def test_the_batch_size_note_divides_by_systems_and_accumulation(systems, accum, said):
    """Under Lightning's DDP each of num_csx devices loads its own batch: the global batch is split both ways."""
    source = _load("gpt_trainer.yaml")
    source["trainer"]["init"]["backend"]["cluster_config"]["num_csx"] = systems
    source["trainer"]["init"]["loop"]["grad_accum_steps"] = accum
    notes = [note for note in convert(source)[1].notes if "batch_size" in note]
    assert notes == ([said] if said else [])


@pytest.mark.parametrize(
    "argv", [["--config", "mz.yaml", "-o", "run.yaml"], ["mz.yaml", "--config=x", "-o", "run.yaml"]]
)
def test_a_source_given_as_fits_config_is_one_line_naming_the_form(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mz.yaml").write_text((DATA / "gpt_trainer.yaml").read_text())
    assert main(["convert", *argv]) == 2
    assert capsys.readouterr().err == (
        "cs-lightning: error: --config: convert takes the Model Zoo file as its first argument, not --config; "
        "fix: cs-lightning convert modelzoo.yaml -o run.yaml\n"
    )
    assert not (tmp_path / "run.yaml").exists()


def test_an_output_of_dash_prints_the_yaml_and_writes_no_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["convert", str(DATA / "gpt_trainer.yaml"), "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out) == convert(_load("gpt_trainer.yaml"))[0]
    assert err.startswith(f"converted {DATA / 'gpt_trainer.yaml'} (trainer layout)")
    assert list(tmp_path.iterdir()) == []


def test_a_legacy_weight_decay_is_said_to_have_spared_biases_and_norms():
    """Model Zoo's optim_utils of the legacy layout put biases and normalization parameters in a group with no
    weight decay; a single optimizer: block decays them: the report says how to match."""
    legacy = _load("legacy_gpt3.yaml")
    (note,) = [note for note in convert(legacy)[1].notes if "normalization-layer" in note]
    assert note.startswith("optimizer AdamW: weight_decay 0.1 applies to every parameter here")
    legacy["optimizer"]["weight_decay_rate"] = 0.0
    assert not [note for note in convert(legacy)[1].notes if "normalization-layer" in note]
    assert not [note for note in convert(_load("gpt_trainer.yaml"))[1].notes if "normalization-layer" in note]


@pytest.mark.parametrize(
    ("optimizer", "refused"),
    [
        ({"optimizer_type": "AdamW", "learning_rate": 0.001, "grad_accum_step": 4}, "optimizer.grad_accum_step"),
        ({"optimizer_type": "AdamW", "learning_rate": 0.001, "max_gradient_norn": 1.0}, "optimizer.max_gradient_norn"),
        ({"optimizer_type": "Adafactor", "learning_rate": 0.01, "beta1": None}, None),  # cerebras.pytorch's own
    ],
)
def test_legacy_optimizer_keys_read_apart_are_known_and_their_typos_refused(optimizer, refused):
    source = _load("legacy_gpt3.yaml")
    source["optimizer"] = optimizer
    if refused is None:
        convert(source)
        return
    with pytest.raises(ConfigError, match="did you mean") as caught:
        convert(source)
    assert format_key_path(caught.value.path) == refused
