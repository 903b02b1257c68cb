"""cs-lightning: YAML in both spellings trains with the closed-form schedule, mistakes are one line."""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import yaml
from conftest import REPO, run_cli, snapshot

from cs_lightning import schedulers
from cs_lightning.cli import main

DIGITS_PY = REPO / "examples" / "image_classifier" / "image_classifier.py"
STEPS = 12
PEAK, END, WARMUP, DECAY = 0.01, 0.001, 4, 8

LINEAR = {"initial_learning_rate": 0.0, "end_learning_rate": PEAK, "total_iters": WARMUP}
COSINE = {"initial_learning_rate": PEAK, "end_learning_rate": END, "total_iters": DECAY}
CEREBRAS = {
    "optimizer": {"AdamW": {"lr": PEAK, "weight_decay": 0.01}},
    "schedulers": [{"SequentialLR": {"schedulers": [{"LinearLR": LINEAR}, {"CosineDecayLR": COSINE}]}}],
}
CLASS_PATH = {
    "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": PEAK, "weight_decay": 0.01}},
    "schedulers": [
        {
            "class_path": "cs_lightning.schedulers.SequentialLR",
            "init_args": {
                "schedulers": [
                    {"class_path": "cs_lightning.schedulers.LinearLR", "init_args": LINEAR},
                    {"class_path": "cs_lightning.schedulers.CosineDecayLR", "init_args": COSINE},
                ]
            },
        }
    ],
}


def digits_run(root: Path, **blocks: Any) -> dict[str, Any]:
    """A small, fast training config on the shipped digits, logging every step to `root`."""
    config = {
        "imports": [str(DIGITS_PY)],
        "model": {"class_path": "image_classifier.DigitClassifier", "init_args": {"channels": 4}},
        "data": {"class_path": "image_classifier.DigitsData", "init_args": {"batch_size": 16}},
        "trainer": {
            "max_steps": STEPS,
            "log_every_n_steps": 1,
            "limit_val_batches": 0,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(root),
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(root)}},
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.LearningRateMonitor",
                    "init_args": {"logging_interval": "step"},
                }
            ],
        },
    }
    config.update(copy.deepcopy(blocks))
    return config


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def metrics(root: Path, version: int = 0) -> dict[str, dict[int, float]]:
    """metrics.csv of run `version` under `root`: column -> {step: value}."""
    path = root / f"lightning_logs/version_{version}/metrics.csv"
    table: dict[str, dict[int, float]] = {}
    for row in csv.DictReader(path.open()):
        for column, value in row.items():
            if value and column not in ("step", "epoch"):
                table.setdefault(column, {})[int(row["step"])] = float(value)
    return table


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[int, float]]]:
    """The same training written in the Cerebras shape and in class_path form."""
    found = {}
    for name, blocks in (("cerebras", CEREBRAS), ("class_path", CLASS_PATH)):
        root = tmp_path_factory.mktemp(name)
        with pytest.MonkeyPatch.context() as patch:  # module scope: the per-test chdir has not run yet
            patch.chdir(root)
            assert main(["fit", "--config", str(write(root / "run.yaml", digits_run(root, **blocks)))]) == 0
        found[name] = metrics(root)
    return found


def test_logged_learning_rates_equal_the_closed_form_at_every_step(runs) -> None:
    logged = runs["cerebras"]["lr-AdamW"]
    assert sorted(logged) == list(range(STEPS))
    probe = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    (scheduler,) = schedulers.build(CEREBRAS["schedulers"][0], probe)
    closed_form = scheduler.values(range(STEPS))[:, 0].tolist()
    assert [logged[k] for k in range(STEPS)] == closed_form
    # ...and that closed form is warmup-then-cosine, milestone inferred at WARMUP (float64 formula).
    for k in range(STEPS):
        t = min(k - WARMUP, DECAY)
        expected = PEAK * k / WARMUP if k < WARMUP else END + (PEAK - END) * 0.5 * (1 + math.cos(math.pi * t / DECAY))
        assert logged[k] == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_class_path_form_gives_identical_losses_and_rates(runs) -> None:
    cerebras, class_path = runs["cerebras"], runs["class_path"]
    assert len(cerebras["train_loss"]) == STEPS
    assert class_path["train_loss"] == cerebras["train_loss"]
    assert class_path["lr-AdamW"] == cerebras["lr-AdamW"]
    losses = [cerebras["train_loss"][k] for k in sorted(cerebras["train_loss"])]
    assert losses[-1] < losses[0]


def _done_line(capsys: pytest.CaptureFixture) -> str:
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Done:")]
    return line


def test_resuming_from_a_checkpoint_continues_the_schedule(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "5"]) == 0
    (checkpoint,) = tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt")
    assert _done_line(capsys).endswith(f"| checkpoint {checkpoint.relative_to(tmp_path)}")  # tmp_path is the cwd
    # LightningCLI puts the checkpoint's hyperparameters over the command line's: said, not silent
    with pytest.warns(
        UserWarning,
        match=r"^ckpt_path: the checkpoint's hyperparameters replace model arguments "
        r"given in the config or command line: channels=8 -> 4$",
    ):
        code = main(["fit", "--config", str(path), "--ckpt_path", str(checkpoint), "--model.init_args.channels", "8"])
    assert code == 0
    (written,) = tmp_path.glob("lightning_logs/version_1/checkpoints/*.ckpt")
    # the one this run wrote, not the one it started from
    assert _done_line(capsys).endswith(f"| checkpoint {written.relative_to(tmp_path)}")
    resumed = metrics(tmp_path, version=1)["lr-AdamW"]
    probe = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    closed_form = schedulers.build(CEREBRAS["schedulers"], probe)[0].values(range(STEPS))[:, 0].tolist()
    assert resumed == {k: closed_form[k] for k in range(5, STEPS)}


RESUME_FIX = (
    "fix: resume with the schedulers it was trained with, or start a new run from its weights (without ckpt_path)"
)


@pytest.mark.parametrize(
    ("schedulers", "found"),
    [
        (
            [{"CosineDecayLR": COSINE}],
            "schedulers[0] is SequentialLR or SequentialWD in the checkpoint but CosineDecayLR in this run",
        ),
        (
            [
                {
                    "SequentialLR": {
                        "schedulers": [
                            {"LinearLR": LINEAR},
                            {"ExponentialLR": {"initial_learning_rate": PEAK, "total_iters": DECAY, "decay_rate": 0.5}},
                        ]
                    }
                }
            ],
            "schedulers[0].schedulers[1] is CosineDecayLR in the checkpoint but ExponentialLR in this run",
        ),
        (
            [*CEREBRAS["schedulers"], {"CosineDecayWD": {"initial_val": 0.01, "end_val": 0.0, "total_iters": STEPS}}],
            "holds 1 scheduler, this run 2 schedulers",
        ),
    ],
    ids=["another class", "another class nested", "another number"],
)
def test_resuming_with_other_schedulers_is_one_line_exit_2(schedulers, found, tmp_path: Path, capfd) -> None:
    """Lightning would pair the states by position: silently when their numbers differ, else a traceback."""
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "3"]) == 0
    (checkpoint,) = tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt")
    changed = write(tmp_path / "changed.yaml", digits_run(tmp_path, **{**CEREBRAS, "schedulers": schedulers}))
    capfd.readouterr()
    assert main(["fit", "--config", str(changed), "--ckpt_path", str(checkpoint)]) == 2
    err = capfd.readouterr().err
    where = f"{str(checkpoint)!r}" + ("" if found.startswith("holds") else ":")
    assert err == f"cs-lightning: error: ckpt_path: {where} {found}; {RESUME_FIX}\n"


def test_resuming_with_other_arguments_warns_and_keeps_the_checkpoints(tmp_path: Path) -> None:
    """As torch and cerebras.pytorch: the checkpoint's arguments are restored; now said, not silent."""
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "5"]) == 0
    (checkpoint,) = tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt")
    longer = {"LinearLR": LINEAR}, {"CosineDecayLR": {**COSINE, "total_iters": 2 * DECAY}}
    changed = write(
        tmp_path / "changed.yaml",
        digits_run(tmp_path, **{**CEREBRAS, "schedulers": [{"SequentialLR": {"schedulers": list(longer)}}]}),
    )
    message = (
        "SequentialLR.load_state_dict: the checkpoint's arguments differ from the configured ones "
        f"(schedulers[1].total_iters={2 * DECAY} -> {DECAY}, configured -> checkpoint); the checkpoint's values are used"
    )
    with pytest.warns(UserWarning, match=f"^{re.escape(message)}$"):
        assert main(["fit", "--config", str(changed), "--ckpt_path", str(checkpoint)]) == 0
    probe = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    trained_with = schedulers.build(CEREBRAS["schedulers"], probe)[0].values(range(STEPS))[:, 0].tolist()
    assert metrics(tmp_path, version=1)["lr-AdamW"] == {k: trained_with[k] for k in range(5, STEPS)}


CLASS_MODELS = """
from image_classifier import DigitClassifier
from image_classifier import DigitClassifier as Renamed  # the same class by another import path


class Wider(DigitClassifier):
    pass
"""


@pytest.mark.parametrize(("model", "code"), [("Wider", 2), ("Renamed", 0)], ids=["a subclass", "a re-export"])
def test_resuming_a_checkpoint_of_another_model_class_is_refused(model: str, code: int, tmp_path: Path, capfd) -> None:
    """LightningCLI would build the checkpoint's class in place of the configured one and train it silently;
    the same class by another import path is the configured model."""
    module = f"ckpt_class_{model.lower()}"  # a module of its own: one test process imports each name once
    (tmp_path / f"{module}.py").write_text(CLASS_MODELS)
    config = digits_run(tmp_path, **CEREBRAS)
    config["imports"].append(str(tmp_path / f"{module}.py"))
    path = write(tmp_path / "run.yaml", config)
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "2"]) == 0
    (checkpoint,) = tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt")
    before = snapshot(tmp_path)
    capfd.readouterr()
    resume = ["fit", "--config", str(path), "--ckpt_path", str(checkpoint), "--trainer.max_steps", "3"]
    assert main([*resume, "--model", f"{module}.{model}"]) == code
    if code == 0:
        assert metrics(tmp_path, version=1)["train_loss"].keys() == {2}  # resumed at step 2
        return
    assert capfd.readouterr().err == (
        f"cs-lightning: error: ckpt_path: {str(checkpoint)!r} was written by model image_classifier.DigitClassifier, "
        f"but the config's model is {module}.Wider; fix: set model.class_path to "
        "image_classifier.DigitClassifier to resume that model, or leave ckpt_path out to start "
        f"{module}.Wider from its own initial weights\n"
    )
    assert snapshot(tmp_path) == before


def test_a_checkpoints_hyperparameters_are_read_without_its_weights(tmp_path: Path) -> None:
    """LightningCLI loads a whole checkpoint to read its hyperparameters, before training: a second
    full read and a copy in memory of a big model. cs-lightning maps the file: 400 MB of weights stay on disk."""
    path = tmp_path / "big.ckpt"
    saved = {"_class_path": "image_classifier.DigitClassifier", "channels": 4}
    torch.save({"state_dict": {"w": torch.ones(100 * 2**20)}, "hyper_parameters": saved}, path)
    # the peak resident memory of this process (ru_maxrss would start from its parent's, pytest's)
    peak_mib = "int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1]) // 1024"
    script = (
        "import re, sys; from pathlib import Path; from cs_lightning.cli.checkpoints import saved_hyperparameters; "
        f"before = {peak_mib}; read = saved_hyperparameters(Path(sys.argv[1])); print(read, {peak_mib} - before)"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    read, grown_mib = done.stdout.rsplit(" ", 1)
    assert read == repr(saved)
    assert int(grown_mib) < 40


def test_ckpt_path_hpc_and_last_keep_lightnings_meaning(tmp_path: Path) -> None:
    """`hpc` resumes the newest hpc_ckpt_N.ckpt in trainer.default_root_dir; `last` with no last checkpoint
    starts fresh with Lightning's warning (the first run of a job resubmitted with the same command)."""
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "2"]) == 0
    (checkpoint,) = tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt")
    shutil.copy(checkpoint, tmp_path / "hpc_ckpt_1.ckpt")  # digits_run's default_root_dir is tmp_path
    assert main(["fit", "--config", str(path), "--ckpt_path", "hpc", "--trainer.max_steps", "3"]) == 0
    assert metrics(tmp_path, version=1)["train_loss"].keys() == {2}
    with pytest.warns(UserWarning, match=r'ckpt_path="last"\) is set, but there is no last checkpoint available'):
        assert main(["fit", "--config", str(path), "--ckpt_path", "last", "--trainer.max_steps", "1"]) == 0
    assert metrics(tmp_path, version=2)["train_loss"].keys() == {0}


def test_a_refusal_after_parsing_leaves_lightnings_logs_flowing(tmp_path: Path) -> None:
    """The seed and device lines are held back while the run is built, for a one-line error; a checkpoint
    refused before the build must not leave them held, or every later run in the process loses its
    Lightning lines (Time to first loss among them)."""
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    assert main(["fit", "--config", str(path), "--ckpt_path", str(tmp_path / "missing.ckpt")]) == 2
    for name in ("lightning.fabric.utilities.seed", "lightning.pytorch.utilities.rank_zero"):
        assert logging.getLogger(name).filters == [], name


def test_what_is_held_while_a_run_is_built_keeps_the_users_filters_and_comes_out_in_order() -> None:
    """Holding warnings swaps how they are shown, never the filters: a filter the user's code sets while
    the run is built (a DataModule silencing Lightning's worker-count warning) stays set."""
    import warnings

    from cs_lightning.cli.lightning_cli import _HeldRecords

    logger = logging.getLogger("cs_lightning.test.held")
    held = _HeldRecords(logger.name)
    logger.warning("first")
    warnings.warn("second", UserWarning, stacklevel=1)
    warnings.filterwarnings("ignore", message="set while held")
    logger.warning("third")
    held.stop()
    assert any(f[1] is not None and f[1].pattern == "set while held" for f in warnings.filters)
    warnings.filters[:] = [f for f in warnings.filters if f[1] is None or f[1].pattern != "set while held"]
    shown: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: shown.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.showwarning = lambda message, *rest: shown.append(str(message))
            held.replay()
    finally:
        logger.removeHandler(handler)
    assert shown == ["first", "second", "third"] and not warned


def test_a_clock_in_the_config_is_the_runs_only_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    """The CLI's own TimeToFirstLoss (for the Done: line) stands aside for one the config lists:
    one Time to first loss line, the one logged, the one the Done: line names."""
    config = digits_run(tmp_path, **CEREBRAS)
    config["trainer"]["callbacks"] = [{"class_path": "cs_lightning.TimeToFirstLoss"}]
    with caplog.at_level(logging.INFO):
        assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 0
    (line,) = [record.message for record in caplog.records if record.message.startswith("Time to first loss")]
    logged = metrics(tmp_path)["ttfl/total"][0]
    assert line.startswith(f"Time to first loss: {logged:.2f} s")
    assert f"| time to first loss {logged:.2f} s |" in _done_line(capsys)


def test_the_done_line_names_no_checkpoint_when_the_run_wrote_none(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    config = digits_run(tmp_path, **CEREBRAS)
    config["trainer"]["callbacks"] = [
        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"dirpath": str(tmp_path / "ckpt")}}
    ]
    path = write(tmp_path / "run.yaml", config)
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "5"]) == 0
    (start,) = (tmp_path / "ckpt").glob("*.ckpt")
    assert _done_line(capsys).endswith(f"| checkpoint {start.relative_to(tmp_path)}")
    # resumed at its last step, it trains and writes nothing; the checkpoint callback's paths,
    # restored from the start (same folder), must not be named as if written
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "5", "--ckpt_path", str(start)]) == 0
    assert _done_line(capsys).endswith("| no checkpoint written")


def test_a_sharded_checkpoint_folder_resumes_fit_and_feeds_validate(tmp_path: Path) -> None:
    """csx_fsdp writes a folder (torch.distributed.checkpoint shards, .metadata, meta.pt) by default:
    ckpt_path takes it as the Trainer does, hyperparameters included. The installed command: a
    process group stays up after fit, and must not outlive the run in the test process."""
    config = digits_run(tmp_path, **CEREBRAS)
    config["trainer"].update(strategy="csx_fsdp", devices=1)
    write(tmp_path / "run.yaml", config)
    assert run_cli("fit", "--config", "run.yaml", "--trainer.max_steps", "5", cwd=tmp_path).returncode == 0
    (folder,) = tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt")
    assert folder.is_dir() and {".metadata", "meta.pt"} <= {p.name for p in folder.iterdir()}
    resume = run_cli(
        "fit", "--config", "run.yaml", "--ckpt_path", folder, "--model.init_args.channels", "8", cwd=tmp_path
    )
    assert resume.returncode == 0, resume.stderr[-2000:]
    assert "hyperparameters replace model arguments given in the config or command line: channels=8 -> 4" in (
        resume.stderr
    )
    resumed = metrics(tmp_path, version=1)["lr-AdamW"]
    probe = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    closed_form = schedulers.build(CEREBRAS["schedulers"], probe)[0].values(range(STEPS))[:, 0].tolist()
    assert resumed == {k: closed_form[k] for k in range(5, STEPS)}
    config["trainer"]["limit_val_batches"] = 2
    write(tmp_path / "run.yaml", config)
    validate = run_cli("validate", "--config", "run.yaml", "--ckpt_path", folder, cwd=tmp_path)
    assert validate.returncode == 0 and "val_loss" in validate.stdout


class RecordOptimizer(L.Callback):
    """Notes, when training starts, what the optimizer holds and what the model's parameters are."""

    seen: list[dict[str, Any]] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        held = [p for group in trainer.optimizers[0].param_groups for p in group["params"]]
        RecordOptimizer.seen.append(
            {
                "same_objects": [id(p) for p in held] == [id(p) for p in pl_module.parameters()],
                "devices": {p.device.type for p in held},
                "strategy": type(trainer.strategy).__name__,
            }
        )


def test_optimizer_is_built_on_the_materialized_parameters_of_a_deferred_model(tmp_path: Path) -> None:
    """tiny_gpt builds its layers in configure_model: under csx they are recorded, then materialized."""
    config = {
        "imports": [str(REPO / "examples" / "tiny_gpt" / "tiny_gpt.py")],
        "model": {"class_path": "tiny_gpt.TinyGPT", "init_args": {"n_layer": 1, "n_embd": 32}},
        "data": {"class_path": "tiny_gpt.MacbethData"},
        "optimizer": {"AdamW": {"lr": 1e-3}},
        "trainer": {
            "max_steps": 1,
            "limit_val_batches": 0,
            "enable_progress_bar": False,
            "logger": False,
            "enable_checkpointing": False,
            "callbacks": [{"class_path": "test_cli.RecordOptimizer"}],
        },
    }
    RecordOptimizer.seen.clear()
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 0
    assert RecordOptimizer.seen == [{"same_objects": True, "devices": {"cpu"}, "strategy": "CSXStrategy"}]


# A callback, imported by the run, printing what strategy the Trainer got and what the model's forward gathers
SHOW_STRATEGY = """
import json
from lightning.pytorch import Callback
from torch.distributed.fsdp import FSDPModule


class ShowStrategy(Callback):
    def on_train_start(self, trainer, pl_module):
        strategy = trainer.strategy
        shown = {
            "class": type(strategy).__name__,
            **strategy.csx_options,
            "state_dict_type": getattr(strategy, "state_dict_type", None),
            "sharded": [name for name, module in pl_module.named_modules() if isinstance(module, FSDPModule)],
        }
        print("strategy:", json.dumps(shown))
"""
CSX_DEFAULTS = {"trace_check": True, "compile": False, "compile_backend": "inductor", "strict_schedulers": False}
# case -> (trainer.strategy, what the run's Trainer holds)
CLASS_PATH_STRATEGIES = {
    "csx with an option": (
        {"class_path": "cs_lightning.CSXStrategy", "init_args": {"trace_check": False}},
        {"class": "CSXStrategy", **CSX_DEFAULTS, "trace_check": False, "init_mode": "exact"},
    ),
    "csx_ddp with an option": (
        {"class_path": "cs_lightning.CSXDDPStrategy", "init_args": {"init_mode": "independent"}},
        {"class": "CSXDDPStrategy", **CSX_DEFAULTS, "init_mode": "independent"},
    ),
    "csx_fsdp without init_args": (
        {"class_path": "cs_lightning.strategies.CSXFSDPStrategy"},
        {
            "class": "CSXFSDPStrategy",
            **CSX_DEFAULTS,
            "init_mode": "exact",
            "state_dict_type": "sharded",
            "sharded": ["", "blocks.0"],  # each block of the ModuleList, then the root
        },
    ),
    "csx_fsdp with block classes and options": (
        {
            "class_path": "cs_lightning.CSXFSDPStrategy",
            "init_args": {"block_classes": ["tiny_gpt.Block"], "init_mode": "independent", "state_dict_type": "full"},
        },
        {
            "class": "CSXFSDPStrategy",
            **CSX_DEFAULTS,
            "init_mode": "independent",
            "state_dict_type": "full",
            "sharded": ["", "blocks.0"],
        },
    ),
}


@pytest.mark.parametrize("case", sorted(CLASS_PATH_STRATEGIES))
def test_a_strategy_given_by_class_path_is_built_with_its_init_args_and_trains(case: str, tmp_path: Path) -> None:
    """csx_fsdp's class_path used to fail on the data_parallel_size/tensor_parallel_size defaults that jsonargparse
    filled in from ModelParallelStrategy. The installed command: csx_ddp and csx_fsdp start a process group."""
    strategy, expected = CLASS_PATH_STRATEGIES[case]
    (tmp_path / "show_strategy.py").write_text(SHOW_STRATEGY)
    config = {
        "imports": [str(REPO / "examples" / "tiny_gpt" / "tiny_gpt.py"), str(tmp_path / "show_strategy.py")],
        "model": {"class_path": "tiny_gpt.TinyGPT", "init_args": {"n_layer": 1, "n_embd": 32}},
        "data": {"class_path": "tiny_gpt.MacbethData"},
        "optimizer": {"AdamW": {"lr": 1e-3}},
        "trainer": {
            "strategy": strategy,
            "devices": 1,
            "max_steps": 1,
            "limit_val_batches": 0,
            "enable_progress_bar": False,
            "logger": False,
            "enable_checkpointing": False,
            "callbacks": [{"class_path": "show_strategy.ShowStrategy"}],
        },
    }
    write(tmp_path / "run.yaml", config)
    result = run_cli("fit", "--config", "run.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    (shown,) = [line.removeprefix("strategy: ") for line in result.stdout.splitlines() if line.startswith("strategy:")]
    assert json.loads(shown) == {"state_dict_type": None, "sharded": [], **expected}
    assert result.stdout.splitlines()[-1].startswith("Done: final train_loss ")


# --------------------------------------------------------------------------- bad YAML

SEQ_OK = [{"LinearLR": LINEAR}, {"CosineDecayLR": COSINE}]
# case -> (blocks replacing the good config's, key path the line must start with, words of the fix)
# Linear OneCycle keeps its last phase going past total_steps - 1: below 0 from step 4 on
ONE_CYCLE_BELOW_0_AT_4 = {"initial_learning_rate": 0.01, "max_lr": 0.1, "total_steps": 4, "anneal_strategy": "linear"}

BAD = {
    "unknown scheduler": (
        {"schedulers": [{"SequentialLR": {"schedulers": [{"LinearLR": LINEAR}, {"CosineDecayLRR": COSINE}]}}]},
        "schedulers[0].SequentialLR.schedulers[1].CosineDecayLRR",
        "fix: did you mean CosineDecayLR or",
    ),
    "unknown optimizer": ({"optimizer": {"AdamWW": {"lr": 0.1}}}, "optimizer", "did you mean AdamW"),
    "argument glued to its value ({lr:0.1})": (
        {"optimizer": {"AdamW": {"lr:0.1": None}}},
        "optimizer.AdamW.lr:0.1",
        "AdamW has no argument 'lr:0.1'; fix: write lr: 0.1 (YAML reads lr:0.1 as one word)\n",
    ),
    "bad scheduler argument": (
        {"schedulers": [{"LinearLR": {"initial_lr": 0.0, "end_learning_rate": 0.1, "total_iters": 4}}]},
        "schedulers[0].LinearLR.initial_lr",
        "did you mean initial_learning_rate?",
    ),
    "scheduler missing an argument": (
        {"schedulers": [{"CosineDecayLR": {"initial_learning_rate": PEAK, "total_iters": DECAY}}]},
        "schedulers[0].CosineDecayLR",
        "needs end_learning_rate; fix: add end_learning_rate: <value>",
    ),
    "bad optimizer argument": ({"optimizer": {"AdamW": {"lrr": 0.1}}}, "optimizer.AdamW.lrr", "did you mean lr"),
    "bad optimizer value": ({"optimizer": {"AdamW": {"lr": -1.0}}}, "optimizer.AdamW", "correct the value"),
    "two schedulers setting lr": (
        {"schedulers": [{"LinearLR": LINEAR}, {"CosineDecayLR": COSINE}]},
        "schedulers[1]",
        "as schedulers[0] (LinearLR) does, so only the later would apply; fix: compose them in one SequentialLR",
    ),
    "milestones for another number of schedulers": (
        {"schedulers": [{"SequentialLR": {"schedulers": SEQ_OK, "milestones": [4, 8]}}]},
        "schedulers[0].SequentialLR",
        "give one milestone fewer than schedulers",
    ),
    "bad nested class_path argument": (
        {
            "schedulers": [
                {
                    "class_path": "cs_lightning.schedulers.SequentialLR",
                    "init_args": {
                        "schedulers": [
                            {"class_path": "cs_lightning.schedulers.LinearLR", "init_args": {**LINEAR, "warmup": 3}}
                        ]
                    },
                }
            ]
        },
        "schedulers[0].init_args.schedulers[0].init_args.warmup",
        "LinearLR has no argument 'warmup'",
    ),
    "tagged schedule, untagged optimizer": (
        {"schedulers": [{"LinearLR": {**LINEAR, "param_group_tags": "decoder"}}]},
        "schedulers[0].LinearLR",
        "fix: remove param_group_tags",
    ),
    "tagged schedule nested in class_path blocks, untagged optimizer": (
        {
            "schedulers": [
                {
                    "class_path": "cs_lightning.schedulers.SequentialLR",
                    "init_args": {
                        "schedulers": [
                            {"class_path": "cs_lightning.schedulers.LinearLR", "init_args": LINEAR},
                            {
                                "class_path": "cs_lightning.schedulers.CosineDecayLR",
                                "init_args": {**COSINE, "param_group_tags": "decoder"},
                            },
                        ]
                    },
                }
            ]
        },
        "schedulers[0].init_args.schedulers[1].init_args",
        "fix: remove param_group_tags",
    ),
    "no optimizer for a model without configure_optimizers": (
        {"optimizer": None, "schedulers": None},
        "optimizer",
        "has no configure_optimizers",
    ),
    "schedulers without optimizer": ({"optimizer": None}, "schedulers", "add an optimizer: block"),
    "missing imports file": ({"imports": ["no_such_module.py"]}, "imports[0]", "no_such_module.py"),
    "unknown trainer key": ({"trainer": {"max_stepz": 3}}, "trainer.max_stepz", "correct its spelling"),
    "bad trainer value": (
        {"trainer": {"max_steps": "many"}},
        "trainer.max_steps",
        "expected an integer, got 'many'; fix: write an integer",
    ),
    "float where an integer is due": (
        {"trainer": {"max_steps": 1.0e3}},
        "trainer.max_steps",
        "fix: write an integer, e.g. 1000",
    ),
    "word where a number is due": (
        {"trainer": {"gradient_clip_val": "big"}},
        "trainer.gradient_clip_val",
        "expected a number, got 'big'",
    ),
    "word where a flag is due": (
        {"trainer": {"enable_checkpointing": "maybe"}},
        "trainer.enable_checkpointing",
        "expected true or false, got 'maybe'",
    ),
    "unknown model class": (
        {"model": {"class_path": "image_classifier.NoSuchModel"}},
        "model.class_path",
        "list the module",
    ),
    "bad model argument": (
        {"model": {"class_path": "image_classifier.DigitClassifier", "init_args": {"colour": 1}}},
        "model.init_args.colour",
        "correct its spelling",
    ),
    "model argument of the wrong type": (
        {"model": {"class_path": "image_classifier.DigitClassifier", "init_args": {"channels": "four"}}},
        "model.init_args.channels",
        "expected an integer, got 'four'; fix: write an integer",
    ),
    "model argument beside class_path": (
        {"model": {"class_path": "image_classifier.DigitClassifier", "channels": 4}},
        "model.channels",
        "'channels' is beside class_path:, and a class's arguments are read under init_args: only; "
        "fix: move it to model.init_args.channels",
    ),
    "strategy option beside class_path": (
        {"trainer": {"strategy": {"class_path": "cs_lightning.CSXStrategy", "trace_check": False}}},
        "trainer.strategy.trace_check",
        "fix: move it to trainer.strategy.init_args.trace_check",
    ),
    "model missing": ({"model": None}, "model", "add a model: block"),
    "misspelt strategy": (
        {"trainer": {"strategy": "cxs"}},
        "trainer.strategy",
        "'cxs' is not a registered strategy name; did you mean 'csx'? fix: write one of the CS-X strategies "
        "(csx, csx_ddp, csx_fsdp)",
    ),
    "a schedule below 0 before max_steps (refused before step 0)": (
        {"schedulers": [{"OneCycleLR": ONE_CYCLE_BELOW_0_AT_4}]},
        "schedulers[0]",
        "OneCycleLR: step 4 gives lr=-",
    ),
    "data constructor rejects a value": (
        {"data": {"class_path": "image_classifier.DigitsData", "init_args": {"val_fraction": 2.0}}},
        "data.init_args",
        "val_fraction must be in (0, 1)",
    ),
}


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_yaml_exits_2_with_one_line_naming_the_key(case: str, tmp_path: Path, capfd) -> None:
    blocks, key, hint = BAD[case]
    config = {**digits_run(tmp_path, **CEREBRAS), **blocks}
    if "trainer" in blocks:
        config["trainer"] = {**digits_run(tmp_path)["trainer"], **blocks["trainer"]}
    path = write(tmp_path / "run.yaml", config)
    before = _files(tmp_path)
    code = main(["fit", "--config", str(path)])
    out, err = capfd.readouterr()
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"cs-lightning: error: {key}: "), err
    assert hint in err and "Traceback" not in err
    assert _files(tmp_path) == before


def test_missing_config_file_is_one_line(tmp_path: Path, capfd) -> None:
    assert main(["fit", "--config", "nowhere.yaml"]) == 2
    _out, err = capfd.readouterr()
    assert err.startswith("cs-lightning: error: config: ") and "nowhere.yaml" in err
    assert len(err.strip().splitlines()) == 1
    assert _files(tmp_path) == set()


@pytest.mark.parametrize("command", ["fit", "schedule"])
@pytest.mark.parametrize(("text", "holds"), [("", "nothing"), ("- 1\n", "list")])
def test_a_config_that_is_not_a_mapping_is_one_line(command: str, text: str, holds: str, tmp_path: Path, capfd) -> None:
    (tmp_path / "run.yaml").write_text(text)
    assert main([command, "--config", "run.yaml"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert re.match(rf"cs-lightning: error: config: 'run.yaml' holds {holds}, not a mapping of keys; fix: ", err)


@pytest.mark.parametrize("command", ["fit", "schedule"])
def test_yaml_syntax_error_is_one_line_with_its_position(command: str, tmp_path: Path, capfd) -> None:
    (tmp_path / "run.yaml").write_text("model: {class_path: x\ntrainer: [1,\n")
    assert main([command, "--config", "run.yaml"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert re.fullmatch(
        r"cs-lightning: error: config: 'run.yaml' is not valid YAML \(did not find expected ',' or '}' at "
        r"line 2, column 8\); fix: correct the YAML syntax there\n",
        err,
    )


def test_an_inline_strategy_block_reads_its_values_as_a_yaml_file_does(tmp_path: Path, capfd) -> None:
    """3e-4 is the number 0.0003, as fit reads it from run.yaml, not the string '3e-4' of YAML 1.1's loader
    (a string that compile_backend, a name or a callable, would take and leave to a worse line)."""
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    block = "{class_path: cs_lightning.CSXStrategy, init_args: {compile: true, compile_backend: 3e-4}}"
    assert main(["fit", "--config", str(path), "--trainer.strategy", block]) == 2
    assert capfd.readouterr().err.endswith(
        "cs-lightning: error: trainer.strategy.init_args.compile_backend: compile_backend=0.0003 is neither a backend "
        f"name nor a callable; {BACKEND_CHOICES.rstrip('.')}; fix: correct the value\n"
    )


@pytest.mark.parametrize(("option", "module"), [("--imports", "digits_a"), ("--imports+", "digits_b")])
def test_imports_can_be_given_on_the_command_line(option: str, module: str, tmp_path: Path) -> None:
    """A module no other test imported: only the command-line option can make it known."""
    (tmp_path / f"{module}.py").write_text(
        DIGITS_PY.read_text().replace(
            'Path(__file__).with_name("digits.csv.gz")', repr(str(DIGITS_PY.with_name("digits.csv.gz")))
        )
    )
    config = digits_run(tmp_path, optimizer="SGD")
    del config["imports"]
    config["model"]["class_path"] = f"{module}.DigitClassifier"
    config["data"]["class_path"] = f"{module}.DigitsData"
    path = write(tmp_path / "run.yaml", config)
    assert main(["fit", "--config", str(path), option, f"{module}.py", "--trainer.max_steps", "2"]) == 0
    assert metrics(tmp_path)["lr-SGD"] == {0: 0.001, 1: 0.001}


def test_print_config_gives_imports_that_work_from_any_folder(tmp_path: Path, capfd, monkeypatch) -> None:
    """examples/custom_scheduler lists its .py files relative to its config; the printed config
    names them by absolute path, so it runs saved anywhere (it kept the relative paths)."""
    example = REPO / "examples" / "custom_scheduler"
    assert main(["fit", "--config", str(example / "config.yaml"), "--print_config"]) == 0
    printed = yaml.safe_load(capfd.readouterr().out)
    assert printed["imports"] == [
        str(example / "warmup_stable_decay.py"),
        str(REPO / "examples/image_classifier/image_classifier.py"),
    ]
    (tmp_path / "elsewhere").mkdir()
    saved = write(tmp_path / "elsewhere" / "full.yaml", printed)
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--config", str(saved), "--print_config"]) == 0
    assert yaml.safe_load(capfd.readouterr().out) == printed


def test_a_callback_that_needs_a_logger_without_one_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """tiny_gpt's LearningRateMonitor with --trainer.logger false: Lightning's traceback at the first
    step, after config.yaml was written (which then refused the next run in that folder)."""
    config = str(REPO / "examples" / "tiny_gpt" / "config.yaml")
    result = run_cli("fit", "--config", config, "--trainer.logger", "false", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "cs-lightning: error: trainer.callbacks[0]: LearningRateMonitor writes to the logger, and trainer.logger"
        " is false; fix: keep a logger, or remove the callback (e.g. --trainer.callbacks '[]' drops all of them)\n"
    )
    assert list(tmp_path.iterdir()) == []
    # validate runs them without a logger, as Lightning does
    result = run_cli(
        "validate", "--config", config, "--trainer.logger", "false", "--trainer.limit_val_batches", "1", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_an_imports_file_never_replaces_a_loaded_module(tmp_path: Path, capfd) -> None:
    (tmp_path / "json.py").write_text("raise SystemExit('must not run')\n")
    config = digits_run(tmp_path, **CEREBRAS)
    config["imports"].append("json.py")
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    err = capfd.readouterr().err
    assert err.startswith("cs-lightning: error: imports[1]: 'json.py' would be imported as module 'json'")
    assert "fix: rename the file" in err and sys.modules["json"].__file__ != str(tmp_path / "json.py")


def test_console_script_error_is_one_line_on_stderr(tmp_path: Path) -> None:
    """The installed command, in a fresh process: exit 2, one line, no traceback, no files."""
    blocks, key, _ = BAD["data constructor rejects a value"]
    path = write(tmp_path / "run.yaml", {**digits_run(tmp_path, **CEREBRAS), **blocks})
    script = Path(sys.executable).with_name("cs-lightning")
    result = subprocess.run(
        [str(script), "fit", "--config", str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"cs-lightning: error: {key}: ")
    assert _files(tmp_path) == {Path("run.yaml")}


# ------------------------------------------------------------------- schedule command


def test_schedule_table_shows_the_closed_form_without_building_the_model(tmp_path: Path, capfd) -> None:
    config = digits_run(tmp_path, **CEREBRAS)
    config["model"] = {"class_path": "not_a_module.NotAModel"}  # never imported: no model is built
    config["schedulers"].append({"CosineDecayWD": {"initial_val": 0.1, "end_val": 0.0, "total_iters": STEPS}})
    path = write(tmp_path / "run.yaml", config)
    assert main(["schedule", "--config", str(path), "--table"]) == 0
    lines = capfd.readouterr().out.strip().splitlines()
    assert lines[0].split() == [
        "step",
        "SequentialLR",
        "group",
        "0",
        "lr",
        "CosineDecayWD",
        "group",
        "0",
        "weight_decay",
    ]
    rows = {int(line.split()[0]): [float(v) for v in line.split()[1:]] for line in lines[1:]}
    assert sorted(rows) == list(range(STEPS))  # trainer.max_steps rows
    assert rows[0] == [0.0, pytest.approx(0.1)]
    assert rows[WARMUP][0] == pytest.approx(PEAK)
    assert rows[STEPS - 1][0] == pytest.approx(END + (PEAK - END) * 0.5 * (1 + math.cos(math.pi * 7 / DECAY)), rel=1e-5)
    assert _files(tmp_path) == {Path("run.yaml")}


def test_schedule_refuses_a_value_fit_would_stop_at_with_fits_line(tmp_path: Path, capfd) -> None:
    """`schedule` printed the negative learning rates (exit 0) that `fit` stops at: both now refuse, in one line."""
    config = {"optimizer": {"SGD": {"lr": 0.1}}, "schedulers": [{"OneCycleLR": ONE_CYCLE_BELOW_0_AT_4}]}
    path = write(tmp_path / "run.yaml", config)
    assert main(["schedule", "--config", str(path), "--steps", "4"]) == 0  # steps 0..3: all >= 0
    capfd.readouterr()
    line = (
        "cs-lightning: error: schedulers[0]: OneCycleLR: step 4 gives lr=-0.035712920129299164; a learning rate "
        "must be >= 0 (torch's optimizers refuse lr < 0), and finite; fix: change the schedule's arguments (or its "
        "_get_closed_form) so that no step gives one\n"
    )
    for output in (["--table"], ["--out", str(tmp_path / "lr.png")]):
        assert main(["schedule", "--config", str(path), "--steps", "5", *output]) == 2
        assert capfd.readouterr() == ("", line)
    assert _files(tmp_path) == {Path("run.yaml")}


def test_fit_by_epochs_refuses_a_value_it_would_stop_at_before_step_0(tmp_path: Path, capfd) -> None:
    """Without max_steps the run's optimizer steps are known once the data is (estimated_stepping_batches)."""
    config = digits_run(tmp_path, optimizer={"SGD": {"lr": 0.1}}, schedulers=[{"OneCycleLR": ONE_CYCLE_BELOW_0_AT_4}])
    config["trainer"].update(max_steps=-1, max_epochs=1)
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    err = capfd.readouterr().err
    assert err.splitlines()[-1].startswith("cs-lightning: error: schedulers[0]: OneCycleLR: step 4 gives lr=-0.0357129")
    assert _files(tmp_path) == {Path("run.yaml")}  # nor the run folder Lightning made before configure_optimizers


def test_schedule_draws_schedules_of_tagged_param_groups(tmp_path: Path, capfd) -> None:
    """No model, so no real groups: one probe group per tag named, as `convert` writes such blocks."""
    tagged = [
        {"StepLR": {"initial_learning_rate": 0.1, "step_size": 2, "gamma": 0.5, "param_group_tags": "decoder"}},
        {"ConstantLR": {"learning_rate": 0.002, "param_group_tags": [None]}},
    ]
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, optimizer={"SGD": {"lr": 1.0}}, schedulers=tagged))
    assert main(["schedule", "--config", str(path), "--steps", "4"]) == 0
    lines = capfd.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["step", "StepLR", "group", "1", "(decoder)", "lr", "ConstantLR", "group", "0", "lr"]
    assert [[float(v) for v in line.split()] for line in lines[1:]] == [
        [0, 0.1, 0.002],
        [1, 0.1, 0.002],
        [2, 0.05, 0.002],
        [3, 0.05, 0.002],
    ]


def test_a_lambda_schedule_names_its_function_by_dotted_path_from_imports(tmp_path: Path, capfd) -> None:
    (tmp_path / "cli_lambdas.py").write_text("import torch\n\ndef halving(k):\n    return torch.pow(0.5, k)\n")
    config = {
        "imports": ["cli_lambdas.py"],
        "optimizer": {"SGD": {"lr": 0.1}},
        "schedulers": [{"LambdaLR": {"initial_learning_rate": 0.2, "lr_lambda": "cli_lambdas.halving"}}],
        "trainer": {"max_steps": 4},
    }
    assert main(["schedule", "--config", str(write(tmp_path / "run.yaml", config)), "--table"]) == 0
    rows = [line.split() for line in capfd.readouterr().out.strip().splitlines()[1:]]
    assert [(int(step), float(value)) for step, value in rows] == [(0, 0.2), (1, 0.1), (2, 0.05), (3, 0.025)]
    config["schedulers"][0]["LambdaLR"]["lr_lambda"] = "cli_lambdas.doubling"
    assert main(["schedule", "--config", str(write(tmp_path / "run.yaml", config)), "--table"]) == 2
    assert capfd.readouterr().err == (
        "cs-lightning: error: schedulers[0].LambdaLR.lr_lambda: got 'cli_lambdas.doubling'; module "
        "'cli_lambdas' has no 'doubling'; fix: give module.function, its module importable or its file listed "
        "under imports:\n"
    )


def test_a_scheduler_path_with_an_empty_module_part_is_one_line(tmp_path: Path, capfd) -> None:
    """importlib reads '.LinearLR' as a relative import and raises a bare "Empty module name": once a traceback."""
    linear = {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 10}
    config = {"optimizer": {"SGD": {"lr": 0.1}}, "schedulers": [{".LinearLR": linear}], "trainer": {"max_steps": 4}}
    assert main(["schedule", "--config", str(write(tmp_path / "run.yaml", config)), "--table"]) == 2
    assert capfd.readouterr() == (
        "",
        "cs-lightning: error: schedulers[0]..LinearLR: scheduler '.LinearLR' cannot be imported: '.LinearLR' is not "
        "a dotted import path such as 'package.module.Name': its module part, before the last dot, is empty; fix: "
        "give a scheduler's class name, e.g. LinearLR, or the dotted import path of one\n",
    )
    assert _files(tmp_path) == {Path("run.yaml")}


def test_schedule_reads_several_config_files_as_fit_does(tmp_path: Path, capfd) -> None:
    """A later file's schedulers: replaces the earlier one whole, also when each is a single mapping."""
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    later = {
        "linear": {"LinearLR": LINEAR},
        "cosine": {"CosineDecayLR": COSINE},
        "partial": {"LinearLR": {"total_iters": 2}},
    }
    for name, block in later.items():
        write(tmp_path / f"{name}.yaml", {"schedulers": block})
    configs = ["--config", str(path), "--config", "linear.yaml", "--config"]
    assert main(["schedule", *configs, "cosine.yaml", "--steps", "2"]) == 0
    rows = [line.split() for line in capfd.readouterr().out.strip().splitlines()]
    assert rows[0] == ["step", "CosineDecayLR", "group", "0", "lr"]
    assert float(rows[1][1]) == pytest.approx(PEAK)
    refusal = (
        "cs-lightning: error: schedulers.LinearLR: needs initial_learning_rate, end_learning_rate; fix: add "
        "initial_learning_rate: <value>, end_learning_rate: <value>\n"
    )
    for command in ("schedule", "fit"):
        assert main([command, *configs, "partial.yaml"]) == 2
        assert capfd.readouterr() == ("", refusal)


def test_schedule_out_writes_a_picture(tmp_path: Path, capfd) -> None:
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, **CLASS_PATH))
    assert main(["schedule", "--config", str(path), "--steps", "40", "--out", "lr.png"]) == 0
    assert capfd.readouterr().out.strip() == "wrote lr.png (40 steps)"
    assert (tmp_path / "lr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_schedule_of_a_constant_learning_rate_shows_the_constant(tmp_path: Path, capfd) -> None:
    """Model Zoo configs with a float learning_rate convert to an optimizer: block and no schedulers."""
    path = write(tmp_path / "run.yaml", {"optimizer": {"SGD": {"lr": 0.003}}, "trainer": {"max_steps": 100}})
    assert main(["schedule", "--config", str(path)]) == 0
    header, *rows = capfd.readouterr().out.splitlines()
    assert header.split() == ["step", "ConstantLR", "group", "0", "lr"]
    assert [row.split() for row in rows] == [[str(k), "0.003"] for k in [*range(0, 100, 5), 99]]


BILLION = {
    "optimizer": {"AdamW": {"lr": 3e-4}},
    "trainer": {"max_steps": 10**9},
    "schedulers": [
        {
            "SequentialLR": {
                "schedulers": [
                    {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 3e-4, "total_iters": 2000}},
                    {"StepLR": {"initial_learning_rate": 3e-4, "step_size": 300_000_000, "gamma": 0.1}},
                ]
            }
        }
    ],
}


def test_schedule_of_a_billion_steps_tabulates_samples_and_every_jump(tmp_path: Path) -> None:
    """Model Zoo's llama configs have max_steps 1e9: the table evaluates ~20 rows, not 10**9 steps."""
    write(tmp_path / "run.yaml", BILLION)
    result = run_cli("schedule", "--config", "run.yaml", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    rows = {int(line.split()[0]): float(line.split()[1]) for line in result.stdout.splitlines()[1:]}
    assert {2000, 300_002_000, 600_002_000, 900_002_000, 999_999_999} <= set(rows) and len(rows) == 25
    assert (rows[2000], rows[300_002_000], rows[900_002_000]) == (3e-4, 3e-5, pytest.approx(3e-7))


@pytest.mark.parametrize(
    "max_steps, fix",
    [
        (1.0e9, "got 1000000000.0; fix: write it as an integer, max_steps: 1000000000"),
        (-1, "got -1; fix: pass --steps N or set trainer.max_steps, a positive integer"),
        (2.5, "got 2.5; fix: pass --steps N or set trainer.max_steps, a positive integer"),
        (10**20, "got 100000000000000000000; fix: give at most 4611686018427387904 (2**62)"),  # was a traceback
        (2**63 - 1, "got 9223372036854775807; fix: give at most 4611686018427387904 (2**62)"),  # overflowed
    ],
)
def test_schedule_needs_an_integer_number_of_steps_and_says_how_to_write_it(
    max_steps: float, fix: str, tmp_path: Path, capfd
) -> None:
    """YAML reads 1.0e9 as a float, which Lightning's Trainer refuses too: the line says so and shows the integer."""
    config = {**digits_run(tmp_path, **CEREBRAS)}
    config["trainer"] = {"max_steps": max_steps}
    assert main(["schedule", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    assert capfd.readouterr().err == (
        f"cs-lightning: error: trainer.max_steps: need a positive integer number of steps up to 2**62, {fix}\n"
    )


def test_schedule_out_names_the_file_it_writes_and_never_overwrites_without_force(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", BILLION)
    result = run_cli("schedule", "--config", "run.yaml", "--out", "myplot", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "wrote myplot.png (1000000000 steps)\n", "")
    assert (tmp_path / "myplot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "plots").mkdir()
    before = snapshot(tmp_path)
    for out, problem in (
        ("myplot.png", "'myplot.png' already exists; fix: give another path, or pass --force to overwrite it"),
        ("run.yaml", "'run.yaml' is a --config file; writing over it would destroy it; fix: give another output path"),
        ("plots", "'plots' is a folder; fix: give a file path such as 'plots/lr.png'"),  # wrote plots.png beside it
    ):
        force = ["--force"] if out == "run.yaml" else []  # --force never writes over a config
        result = run_cli("schedule", "--config", "run.yaml", "--out", out, *force, cwd=tmp_path)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == f"cs-lightning: error: --out: {problem}\n"
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("extra", "config_change", "key"),
    [
        ([], {"trainer": {}}, "trainer.max_steps"),
        (["--steps", "-3"], {}, "--steps"),
        (["--out", "no_such_folder/lr.png"], {}, "--out"),
        (["--out", "lr.xyz"], {}, "--out"),
        (["--table", "--out", "x.png"], {}, "schedule"),
        ([], {"schedulers": None, "optimizer": None}, "optimizer"),
        ([], {"schedulers": [{"LinearLR": {"initial_learning_rate": 0.0}}]}, "schedulers[0].LinearLR"),
        ([], {"schedulres": [{"LinearLR": {"initial_learning_rate": 0.1}}]}, "schedulres"),  # not a constant lr
        ([], {"lr_scheduler": {"class_path": "torch.optim.lr_scheduler.StepLR"}}, "lr_scheduler"),
    ],
)
def test_schedule_mistakes_are_one_line(extra, config_change, key, tmp_path: Path, capfd) -> None:
    path = write(tmp_path / "run.yaml", {**digits_run(tmp_path, **CEREBRAS), **config_change})
    assert main(["schedule", "--config", str(path), *extra]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"cs-lightning: error: {key}: ")
    assert _files(tmp_path) == {Path("run.yaml")}


def test_schedule_takes_the_top_level_keys_fit_takes(capsys) -> None:
    from cs_lightning.cli.schedule_command import RUN_KEYS

    assert main(["fit", "--help"]) == 0
    options = re.findall(r"^  --(\w+)[ ,\n]", capsys.readouterr().out, re.MULTILINE)
    assert set(RUN_KEYS) == set(options) - {"print_config"}


# ------------------------------------------------------------- Lightning's own options


@pytest.mark.parametrize(
    ("in_yaml", "on_command_line", "expected"),
    [
        ({"limit_val_batches": 1, "limit_train_batches": 32}, [], {"limit_val_batches": 1, "limit_train_batches": 32}),
        ({}, ["--trainer.limit_val_batches", "1"], {"limit_val_batches": 1}),
        (
            {"limit_val_batches": 0.5},
            ["--trainer.limit_test_batches", "0.25"],
            {"limit_val_batches": 0.5, "limit_test_batches": 0.25},
        ),
    ],
    ids=["yaml", "command line", "fractions"],
)
def test_an_integer_batch_count_stays_an_integer(in_yaml, on_command_line, expected, tmp_path: Path) -> None:
    """limit_val_batches: 1 is one batch (what convert writes from Model Zoo's eval_steps: 1); 1.0 is all of them."""
    from cs_lightning.cli import CSLightningCLI
    from cs_lightning.cli.config_files import given_config_files, run_imports

    config = digits_run(tmp_path, **CEREBRAS)
    config["trainer"].update(in_yaml)
    args = ["--config", str(write(tmp_path / "run.yaml", config)), *on_command_line]
    cli = CSLightningCLI(args=args, imported=run_imports(given_config_files(args), args), run=False)
    taken = {key: getattr(cli.trainer, key) for key in expected}
    assert taken == expected
    assert {key: type(value) for key, value in taken.items()} == {key: type(value) for key, value in expected.items()}


def test_a_strategy_name_in_capitals_is_the_registered_one(tmp_path: Path) -> None:
    """Lightning reads a strategy name in lower case: the check of the name does too."""
    from cs_lightning import CSXStrategy
    from cs_lightning.cli import CSLightningCLI
    from cs_lightning.cli.config_files import given_config_files, run_imports

    config = write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    args = ["--config", str(config), "--trainer.strategy", "CSX"]
    cli = CSLightningCLI(args=args, imported=run_imports(given_config_files(args), args), run=False)
    assert type(cli.trainer.strategy) is CSXStrategy


def test_later_config_files_override_and_print_config_shows_both_blocks(tmp_path: Path, capfd) -> None:
    base = write(tmp_path / "base.yaml", digits_run(tmp_path, **CEREBRAS))
    override = write(tmp_path / "override.yaml", {"optimizer": {"SGD": {"lr": 0.5}}, "trainer": {"max_steps": 7}})
    assert main(["fit", "--config", str(base), "--config", str(override), "--print_config"]) == 0
    printed = yaml.safe_load(capfd.readouterr().out)
    assert printed["optimizer"] == {"SGD": {"lr": 0.5, "weight_decay": 0.01}}  # AdamW's, which SGD takes too
    assert printed["schedulers"] == CEREBRAS["schedulers"]
    assert printed["trainer"]["max_steps"] == 7 and printed["trainer"]["strategy"] == "csx"
    assert _files(tmp_path) == {Path("base.yaml"), Path("override.yaml")}


@pytest.mark.parametrize(
    "case",
    [
        "unknown scheduler",
        "unknown optimizer",
        "scheduler missing an argument",
        "bad optimizer value",
        "two schedulers setting lr",
        "tagged schedule, untagged optimizer",
        "schedulers without optimizer",
        "misspelt strategy",
        "strategy option beside class_path",
    ],
)
def test_print_config_refuses_the_blocks_fit_refuses_in_the_same_line(case: str, tmp_path: Path, capfd) -> None:
    """--print_config prints while the parser runs, before fit checks the blocks: it checks them first."""
    blocks, key, _hint = BAD[case]
    path = write(tmp_path / "run.yaml", {**digits_run(tmp_path, **CEREBRAS), **blocks})
    assert main(["fit", "--config", str(path)]) == 2
    refused = capfd.readouterr().err
    assert refused.startswith(f"cs-lightning: error: {key}: ") and refused.count("\n") == 1
    assert main(["fit", "--config", str(path), "--print_config"]) == 2
    assert capfd.readouterr() == ("", refused)


def test_print_config_of_a_model_zoo_block_warns_as_fit_does(tmp_path: Path, capfd) -> None:
    """The block's warning, held while the blocks are checked, is given out once they pass."""
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, optimizer={"Adam": {"learning_rate": 0.001}}))
    with pytest.warns(UserWarning, match=r"^optimizer.Adam: a Cerebras Model Zoo block without eps"):
        assert main(["fit", "--config", str(path), "--print_config"]) == 0
    assert yaml.safe_load(capfd.readouterr().out)["optimizer"] == {"Adam": {"learning_rate": 0.001}}


def test_blocks_given_as_json_on_the_command_line_are_the_yaml_blocks(tmp_path: Path, capfd) -> None:
    path = write(tmp_path / "run.yaml", digits_run(tmp_path))
    blocks = ["--optimizer", json.dumps(CEREBRAS["optimizer"]), "--schedulers", json.dumps(CEREBRAS["schedulers"])]
    assert main(["fit", "--config", str(path), *blocks, "--print_config"]) == 0
    printed = yaml.safe_load(capfd.readouterr().out)
    assert {key: printed[key] for key in CEREBRAS} == CEREBRAS


def test_command_line_overrides_the_optimizer_block(tmp_path: Path) -> None:
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, optimizer={"AdamW": {"lr": 0.01}}))
    assert main(["fit", "--config", str(path), "--optimizer", "{SGD: {lr: 0.25}}", "--trainer.max_steps", "2"]) == 0
    lr = metrics(tmp_path)["lr-SGD"]
    assert lr == {0: 0.25, 1: 0.25}


HOST_READ_MODEL = """
import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset


class ReadsLoss(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        print(loss.item())
        return loss

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_a_step_refused_by_the_trace_check_is_one_line_and_exit_2(tmp_path: Path, capfd) -> None:
    (tmp_path / "reads_loss.py").write_text(HOST_READ_MODEL)
    config = {
        "imports": [str(tmp_path / "reads_loss.py")],
        "model": {"class_path": "reads_loss.ReadsLoss"},
        "trainer": {"strategy": "csx", "max_steps": 2, "enable_progress_bar": False, "default_root_dir": str(tmp_path)},
    }
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    err = capfd.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("cs-lightning: error: The training step reads a tensor's value to the host with `.item()`")
    assert f'File "{tmp_path / "reads_loss.py"}", line 14, in training_step print(loss.item())' in err
    # the run folder Lightning made at the start (config.yaml, hparams.yaml) is removed with the refusal
    assert {p for p in _files(tmp_path) if "__pycache__" not in p.parts} == {Path("reads_loss.py"), Path("run.yaml")}


BAD_SCHEDULER_MODEL = """
import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from cs_lightning.schedulers import LinearLR


class BadScheduler(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [LinearLR(optimizer, 0.1, 0.0, total_iters=-1)]
"""


def test_an_imported_module_failing_inside_the_standard_library_names_its_own_line(
    tmp_path: Path, capfd, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "badmod.py").write_text('import json\njson.loads("x")\n')
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--imports", "badmod.py"]) == 2
    assert capfd.readouterr().err == (
        "cs-lightning: error: imports[0]: importing 'badmod.py' raised JSONDecodeError: Expecting value: line 1 "
        "column 1 (char 0) (at badmod.py:2, in <module>); fix: correct that module\n"
    )


def test_a_refusal_raised_in_the_users_configure_optimizers_is_one_line_and_exit_2(tmp_path: Path, capfd) -> None:
    """A cs_lightning refusal is a CSLightningError wherever it is raised: one line, no traceback."""
    (tmp_path / "bad_scheduler.py").write_text(BAD_SCHEDULER_MODEL)
    config = {
        "imports": [str(tmp_path / "bad_scheduler.py")],
        "model": {"class_path": "bad_scheduler.BadScheduler"},
        "trainer": {"max_steps": 2, "logger": False, "enable_checkpointing": False, "default_root_dir": str(tmp_path)},
    }
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    err = capfd.readouterr().err
    assert err.splitlines()[-1] == (
        "cs-lightning: error: LinearLR: got total_iters=-1; total_iters must be >= 0 "
        f"(at {os.path.relpath(tmp_path / 'bad_scheduler.py')}:22, in configure_optimizers)"
    )
    assert "Traceback" not in err


def test_a_refusal_after_training_began_keeps_the_run_folder(tmp_path: Path, capfd) -> None:
    """Only a run refused before its first loss has its folder removed: these logged steps are the user's."""
    code = BAD_SCHEDULER_MODEL.replace(
        "LinearLR(optimizer, 0.1, 0.0, total_iters=-1)", "OneCycleLR(optimizer, **ONE_CYCLE)"
    )
    code = code.replace("import LinearLR", f"import OneCycleLR\nONE_CYCLE = {ONE_CYCLE_BELOW_0_AT_4!r}")
    (tmp_path / "late_refusal.py").write_text(code)
    config = {
        "imports": [str(tmp_path / "late_refusal.py")],
        "model": {"class_path": "late_refusal.BadScheduler"},
        # endless: a max_steps, or max_epochs, would have it refused before step 0
        "trainer": {"max_epochs": -1, "default_root_dir": str(tmp_path)},
    }
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    assert "step 4 gives lr=-0.0357129" in capfd.readouterr().err.splitlines()[-1]
    run = tmp_path / "lightning_logs/version_0"  # 2 batches an epoch: the end of epoch 1 was saved
    assert {p.relative_to(run) for p in run.rglob("*")} >= {
        Path("config.yaml"),
        Path("checkpoints/epoch=1-step=4.ckpt"),
    }


def test_a_refused_fit_removes_no_folder_it_did_not_make(tmp_path: Path, capfd) -> None:
    """The logger's folder named through a folder that does not exist yet (`scratch/..`) is an earlier run's:
    it is kept, and so is the folder Lightning makes on the way."""
    (tmp_path / "bad_scheduler_kept.py").write_text(BAD_SCHEDULER_MODEL)
    earlier = tmp_path / "runs/lightning_logs/v1/checkpoints/last.ckpt"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"an earlier run's")
    logger = {"save_dir": str(tmp_path / "scratch/../runs"), "version": "v1"}
    config = {
        "imports": [str(tmp_path / "bad_scheduler_kept.py")],
        "model": {"class_path": "bad_scheduler_kept.BadScheduler"},
        "trainer": {
            "max_steps": 2,
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": logger},
            "default_root_dir": str(tmp_path),
        },
    }
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    assert "LinearLR: got total_iters=-1" in capfd.readouterr().err
    assert earlier.read_bytes() == b"an earlier run's"
    assert (tmp_path / "scratch").is_dir()


def test_a_step_refused_under_a_progress_bar_ends_the_bars_line_first(tmp_path: Path, capfd) -> None:
    (tmp_path / "reads_under_bar.py").write_text(HOST_READ_MODEL)  # a module name of its own
    config = {
        "imports": [str(tmp_path / "reads_under_bar.py")],
        "model": {"class_path": "reads_under_bar.ReadsLoss"},
        "trainer": {"max_steps": 2, "logger": False, "enable_checkpointing": False, "default_root_dir": str(tmp_path)},
    }
    assert main(["fit", "--config", str(write(tmp_path / "run.yaml", config))]) == 2
    out, err = capfd.readouterr()
    assert "Epoch 0:" in out and out.endswith("\n"), err  # in a terminal the error line would follow the bar's
    assert err.splitlines()[-1].startswith("cs-lightning: error: The training step reads")


def test_a_step_refused_on_two_ranks_is_said_once(tmp_path: Path) -> None:
    """csx_ddp: both ranks refuse the step (same code, same shapes); rank 0 alone prints the line."""
    (tmp_path / "reads_loss.py").write_text(HOST_READ_MODEL)
    config = {
        "imports": [str(tmp_path / "reads_loss.py")],
        "model": {"class_path": "reads_loss.ReadsLoss"},
        "trainer": {"strategy": "csx", "devices": 2, "max_steps": 2, "logger": False, "enable_checkpointing": False},
    }
    script = Path(sys.executable).with_name("cs-lightning")
    result = subprocess.run(
        [str(script), "fit", "--config", str(write(tmp_path / "run.yaml", config))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("cs-lightning: error:")]
    assert len(lines) == 1 and "reads a tensor's value to the host with `.item()`" in lines[0]


# ----------------------------------------------------------- one line instead of a traceback


def _checkpoint_files(folder: Path) -> None:
    """A real torch.save checkpoint cut in half, a torch file that is not a Lightning checkpoint, and folders
    that are no sharded checkpoint (no shards index; a meta.pt cut short)."""
    torch.save({"state_dict": {"w": torch.ones(1000)}, "epoch": 0}, folder / "whole.ckpt")
    data = (folder / "whole.ckpt").read_bytes()
    (folder / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    (folder / "whole.ckpt").unlink()
    torch.save({"w": torch.ones(3)}, folder / "weights.pt")
    (folder / "checkpoints").mkdir()  # a folder, meta.pt and all, without the shards' index
    torch.save({"epoch": 0}, folder / "checkpoints" / "meta.pt")
    (folder / "cut").mkdir()
    (folder / "cut" / ".metadata").write_bytes(b"")
    (folder / "cut" / "meta.pt").write_bytes(data[:100])
    for name, shards in (("noshards", []), ("sharded", ["__0_0.distcp"])):
        (folder / name).mkdir()
        (folder / name / ".metadata").write_bytes(b"")
        torch.save({"epoch": 0}, folder / name / "meta.pt")
        for shard in shards:
            (folder / name / shard).write_bytes(b"")


BACKEND_CHOICES = (
    "pass one of ['cudagraphs', 'inductor', 'openxla', 'tvm'] (torch._dynamo.list_backends(); its debug backends "
    "such as 'eager' and 'aot_eager' work too) or a backend callable."
)
CHECKPOINT_FIX = (
    "fix: give a .ckpt file that Lightning saved, or a sharded checkpoint folder (csx_fsdp's, holding "
    ".metadata and meta.pt), or leave ckpt_path out"
)
IMPORTS_TAKE = (
    "imports: takes dotted module names or .py paths, as one string or a list of strings; fix: write e.g. "
    "imports: [my_package.models, model.py]"
)
VALIDATION_RUNS = (
    "validation runs every N training batches (an integer, 1 or more) or after a fraction of each epoch (a number "
    "above 0 and at most 1.0); fix: write e.g. 100 or 0.25 (limit_val_batches: 0 turns validation off)"
)
FOLDER_FIX = "fix: give a folder that can be made and written"
ONE_LINE_FAILURES = {
    "missing checkpoint": (
        ["fit", "--ckpt_path", "missing.ckpt"],
        f"ckpt_path: 'missing.ckpt' does not exist; {CHECKPOINT_FIX}",
    ),
    "truncated checkpoint": (
        ["fit", "--ckpt_path", "truncated.ckpt"],
        "ckpt_path: 'truncated.ckpt' is not a "
        f"checkpoint, or is cut short: it is not the zip archive torch.save writes; {CHECKPOINT_FIX}",
    ),
    "not a Lightning checkpoint": (
        ["fit", "--ckpt_path", "weights.pt"],
        f"ckpt_path: 'weights.pt' is not a Lightning checkpoint (it has no 'state_dict'); {CHECKPOINT_FIX}",
    ),
    "a folder that is no sharded checkpoint": (
        ["validate", "--ckpt_path", "checkpoints"],
        f"ckpt_path: 'checkpoints' is a folder but not a sharded checkpoint (it has no .metadata); {CHECKPOINT_FIX}",
    ),
    "a sharded folder whose meta.pt is cut short": (
        ["test", "--ckpt_path", "cut"],
        "ckpt_path: 'cut/meta.pt' is not a checkpoint, or is cut short: it is not the zip archive torch.save "
        f"writes; {CHECKPOINT_FIX}",
    ),
    "a sharded folder without its shards": (
        ["validate", "--ckpt_path", "noshards"],
        f"ckpt_path: 'noshards' is a sharded checkpoint without its shards (*.distcp); {CHECKPOINT_FIX}",
    ),
    "a sharded folder for a strategy that reads files": (
        ["fit", "--ckpt_path", "sharded"],
        "ckpt_path: 'sharded' is a sharded checkpoint (a folder of torch.distributed.checkpoint shards, as csx_fsdp "
        "writes by default), which trainer.strategy 'csx' cannot read; fix: resume it with trainer.strategy: "
        "csx_fsdp, or save single-file checkpoints, which every strategy reads, with trainer.strategy: "
        "{{class_path: cs_lightning.CSXFSDPStrategy, init_args: {{state_dict_type: full}}}}",  # str.format'd
    ),
    "a Model Zoo config, not yet converted": (
        ["fit", "--config", "modelzoo.yaml"],
        "config: 'modelzoo.yaml' is a Cerebras Model Zoo config (Trainer layout, trainer: {{init: ...}}), which "
        "cs-lightning reads once converted; fix: cs-lightning convert modelzoo.yaml --out run.yaml, then give run.yaml",
    ),
    "a legacy Model Zoo optimizer block": (
        ["fit", "--optimizer", "{optimizer_type: AdamW, learning_rate: 0.001}"],
        "optimizer: {{optimizer_type: AdamW, ...}} is the legacy Model Zoo spelling, which cs-lightning reads once "
        "converted; fix: write {{AdamW: {{lr: ..., ...}}}}, or cs-lightning convert the Model Zoo config it came from",
    ),
    "a Model Zoo 1.x argument name in a 2.x block": (
        ["fit", "--schedulers", "[{LinearLR: {initial_learning_rate: 0.0, end_learning_rate: 0.001, steps: 3}}]"],
        "schedulers[0].LinearLR.steps: LinearLR has no argument 'steps', Model Zoo 1.x's name for total_iters; fix: "
        "write total_iters, or cs-lightning convert the Model Zoo config it came from",
    ),
    "a bad scheduler after a Model Zoo optimizer block (whose warning is held back)": (
        ["fit", "--optimizer", "{Adam: {learning_rate: 0.001}}", "--schedulers", "[{LinearLR: {total_iters: 0}}]"],
        "schedulers[0].LinearLR: needs initial_learning_rate, end_learning_rate; fix: add "
        "initial_learning_rate: <value>, end_learning_rate: <value>",
    ),
    "a bad scheduler after a Model Zoo optimizer block, under --print_config": (
        [
            "fit",
            "--optimizer",
            "{Adam: {learning_rate: 0.001}}",
            "--schedulers",
            "[{LinearLR: {total_iters: 0}}]",
            "--print_config",
        ],
        "schedulers[0].LinearLR: needs initial_learning_rate, end_learning_rate; fix: add "
        "initial_learning_rate: <value>, end_learning_rate: <value>",
    ),
    "best, which a fresh Trainer has not": (
        ["fit", "--ckpt_path", "best"],
        "ckpt_path: 'best' is the best checkpoint of an earlier fit by the same Trainer, and each cs-lightning run "
        "makes a new Trainer, which has none; fix: give that checkpoint's file (under the earlier run's checkpoints "
        "folder), or leave ckpt_path out",
    ),
    "hpc without an hpc checkpoint": (
        ["validate", "--ckpt_path", "hpc"],
        "ckpt_path: 'hpc' resumes the newest hpc_ckpt_N.ckpt that Lightning saved in trainer.default_root_dir when "
        "SLURM requeued the job, and '{tmp}' holds none; fix: give a checkpoint's path, or leave ckpt_path out",
    ),
    "a precision none of its choices": (
        ["fit", "--trainer.precision", "bitsandbytes"],
        "trainer.precision: got 'bitsandbytes', which is none of its choices; fix: write one of 64, 32, 16, "
        "transformer-engine, transformer-engine-float16, 16-true, 16-mixed, bf16-true, bf16-mixed, 32-true, 64-true, "
        "bf16, null",
    ),
    "no batch per optimizer step": (
        ["fit", "--trainer.accumulate_grad_batches", "0"],
        "trainer.accumulate_grad_batches: got 0, and each optimizer step needs at least one batch; fix: write 1 or "
        "more (1: no accumulation)",
    ),
    "validation every 0 epochs": (
        ["fit", "--trainer.check_val_every_n_epoch", "0"],
        "trainer.check_val_every_n_epoch: got 0, and validation runs every N epochs; fix: write 1 or more "
        "(limit_val_batches: 0 turns validation off; null validates by val_check_interval alone)",
    ),
    "validation every 0 batches": (
        ["fit", "--trainer.val_check_interval", "0"],
        f"trainer.val_check_interval: got 0, and {VALIDATION_RUNS}",
    ),
    "validation every -2 batches": (
        ["fit", "--trainer.val_check_interval", "-2"],
        f"trainer.val_check_interval: got -2, and {VALIDATION_RUNS}",
    ),
    "validation after 0.0 of an epoch": (
        ["fit", "--config", "run.yaml", "--config", "val_check_zero.yaml"],
        f"trainer.val_check_interval: got 0.0, and {VALIDATION_RUNS}",
    ),
    "validation after 1.5 epochs": (
        ["fit", "--trainer.val_check_interval", "1.5"],
        f"trainer.val_check_interval: got 1.5, and {VALIDATION_RUNS}",
    ),
    "a Trainer argument Lightning refuses without backquotes": (
        ["fit", "--trainer.limit_train_batches", "-1"],
        "trainer.limit_train_batches: You have passed invalid value -1 for "
        "limit_train_batches, it has to be in [0.0, 1.0] or an int; fix: correct trainer.limit_train_batches",
    ),
    "a misspelt option in a strategy block given inline": (
        ["fit", "--trainer.strategy", '{"class_path": "cs_lightning.CSXStrategy", "init_args": {"trace_chek": false}}'],
        "trainer.strategy.init_args.trace_chek: cs_lightning.CSXStrategy has no such argument; "
        "did you mean 'trace_check'? fix: remove it or correct its spelling",
    ),
    "a strategy block given inline that is not YAML": (
        ["fit", "--trainer.strategy", "{class_path: cs_lightning.CSXStrategy"],
        "trainer.strategy: '{{class_path: cs_lightning.CSXStrategy' is not a YAML/JSON mapping (did not find "
        "expected ',' or '}}' at character 38); fix: correct its syntax",
    ),
    "a schedulers list written without spaces after its colons": (
        ["fit", "--schedulers", "[{LinearLR:{total_iters:10}}]"],
        "schedulers: '[{{LinearLR:{{total_iters:10}}}}]' is not YAML (found unexpected ':' at character 11); fix: "
        "correct its syntax (YAML reads a:1 as one word: write a: 1)",
    ),
    "an optimizer block written as a list, on the command line": (
        ["fit", "--optimizer", '[{"AdamW": {"lr": 0.001}}]'],
        "optimizer: expected a mapping {{Name: {{args}}}} (or class_path/init_args), got a list, "
        "[{{'AdamW': {{'lr': 0.001}}}}]; fix: write e.g. {{AdamW: {{lr: 0.001}}}}",
    ),
    "an optimizer block that is not YAML": (
        ["fit", "--optimizer", '{"AdamW": {"lr": 0.001}'],
        "optimizer: '{{\"AdamW\": {{\"lr\": 0.001}}' is not YAML (did not find expected ',' or '}}' at character 24); "
        "fix: correct its syntax",
    ),
    "an optimizer argument that is not YAML": (
        ["fit", "--optimizer.AdamW.betas", "[0.9, 0.95"],
        "optimizer.AdamW.betas: '[0.9, 0.95' is not YAML (did not find expected ',' or ']' at character 11); "
        "fix: correct its syntax",
    ),
    "an optimizer written as a call": (
        ["fit", "--optimizer", "AdamW(lr=0.001)"],
        "optimizer: 'AdamW(lr=0.001)' is neither an optimizer's name nor a dotted import path; fix: write the name "
        "and its arguments as a block, {{AdamW: {{lr: 0.001}}}} (on the command line: --optimizer "
        "'{{AdamW: {{lr: 0.001}}}}' or --optimizer AdamW --optimizer.lr 0.001)",
    ),
    "a schedulers list that is not YAML": (
        ["fit", "--schedulers", "[{LinearLR: {total_iters: 10}]"],
        "schedulers: '[{{LinearLR: {{total_iters: 10}}]' is not YAML (did not find expected ',' or '}}' at character "
        "30); fix: correct its syntax",
    ),
    "a Trainer argument Lightning refuses": (
        ["fit", "--trainer.gradient_clip_algorithm", "bogus"],
        "trainer.gradient_clip_algorithm: `gradient_clip_algorithm` bogus is invalid. "
        "Allowed algorithms: ['value', 'norm']; fix: correct trainer.gradient_clip_algorithm",
    ),
    "a plugin argument that has no default": (
        ["fit", "--trainer.plugins", "TransformerEnginePrecision"],
        "trainer.plugins.init_args.weights_dtype: lightning.pytorch.plugins.TransformerEnginePrecision requires "
        "weights_dtype; fix: give it as trainer.plugins.init_args.weights_dtype",
    ),
    "a precision whose package is missing": (
        ["fit", "--trainer.precision", "transformer-engine"],
        "trainer.precision: 'transformer-engine' needs transformer_engine>=0.11.0, which is not installed; fix: "
        "pip install -U 'transformer_engine>=0.11.0', or choose another trainer.precision",
    ),
    "an accelerator whose package is missing": (
        ["fit", "--trainer.accelerator", "tpu"],
        "trainer.accelerator: 'tpu' needs torch_xla>=1.13, which is not installed; fix: "
        "pip install -U 'torch_xla>=1.13', or choose another trainer.accelerator",
    ),
    "a GPU accelerator on a machine without one": (
        ["fit", "--trainer.accelerator", "gpu"],
        "trainer.accelerator: 'gpu' is not available on this machine; fix: write one of cpu, csx, or leave it out "
        "(auto)",
    ),
    "a CUDA accelerator on a machine without one": (
        ["fit", "--trainer.accelerator", "cuda"],
        "trainer.accelerator: 'cuda' is not available on this machine; fix: write one of cpu, csx, or leave it out "
        "(auto)",
    ),
    "test without test_step": (
        ["test"],
        "test: DigitClassifier has no test_step(); fix: define "
        "test_step(self, batch, batch_idx) in it, or run cs-lightning fit",
    ),
    "predict without a loader": (
        ["predict"],
        "predict: neither DigitsData nor DigitClassifier defines "
        "predict_dataloader(); fix: add predict_dataloader(self) to the data module (data:)",
    ),
    "module raising on import": (
        ["fit", "--imports", "boom.py"],
        "imports[0]: importing 'boom.py' raised "
        "RuntimeError: boom at import (at boom.py:2, in <module>); fix: correct that module",
    ),
    "imports given a number on the command line": (
        ["fit", "--imports", "5"],
        f"imports: got 5, and {IMPORTS_TAKE}",
    ),
    "imports given true in YAML": (
        ["fit", "--config", "run.yaml", "--config", "imports_true.yaml"],
        f"imports: got True, and {IMPORTS_TAKE}",
    ),
    "imports listing a number": (
        ["fit", "--imports", "[boom.py, 5]"],
        f"imports[1]: got 5, and {IMPORTS_TAKE}",
    ),
    "an empty imports entry": (
        ["fit", "--config", "run.yaml", "--config", "imports_empty.yaml"],
        "imports[0]: the entry is empty (''); fix: give a dotted module name or a .py path relative to ., or "
        "remove the entry",
    ),
    "a seed below numpy's range": (
        ["fit", "--seed_everything", "-1"],
        "seed_everything: expected a whole number from 0 to 4294967295, got -1; fix: give one in that range",
    ),
    "a seed beyond numpy's range": (
        ["validate", "--seed_everything", "4294967296"],
        "seed_everything: expected a whole number from 0 to 4294967295, got 4294967296; fix: give one in that range",
    ),
    "a seed that is a word": (
        ["fit", "--seed_everything", "abc"],
        "seed_everything: expected an integer or true/false, got 'abc'; fix: write an integer or true/false",
    ),
    "a seed with a fraction": (
        ["test", "--seed_everything", "1.5"],
        "seed_everything: expected an integer or true/false, got '1.5'; fix: write an integer or true/false",
    ),
    "schedulers given a bare name": (
        ["fit", "--config", "run.yaml", "--config", "schedulers_name.yaml"],
        "schedulers: expected a list of {{Name: {{args}}}} mappings, got 'CosineDecayLR'; fix: write e.g. "
        "[{{CosineDecayLR: {{initial_learning_rate: 0.001, end_learning_rate: 0.0, total_iters: 100}}}}]",
    ),
    "param_groups given a word": (
        ["fit", "--param_groups", "x"],
        "param_groups: expected a list of {{tag, params, adjust_learning_rate}} mappings, got 'x'; fix: write e.g. "
        "[{{tag: decoder_kernel, params: ['*dense*weight*'], adjust_learning_rate: 0.25}}]",
    ),
    "an optimizer block written as a list": (
        ["fit", "--config", "run.yaml", "--config", "optimizer_list.yaml"],
        "optimizer: expected a mapping {{Name: {{args}}}} (or class_path/init_args), got a list, "
        "[{{'AdamW': {{'lr': 0.001}}}}]; fix: write e.g. {{AdamW: {{lr: 0.001}}}}",
    ),
    "deterministic none of true, false and warn": (
        ["fit", "--trainer.deterministic", "abc"],
        "trainer.deterministic: got 'abc', which is none of its choices; fix: write one of true, false, warn, null",
    ),
    "a model whose __init__ raises, given no init_args": (
        ["fit", "--config", "run.yaml", "--config", "boom_model.yaml"],
        "model: Boom failed to build: KeyError: 'width' (at boom_model.py:7, in __init__); fix: correct Boom, "
        "which raised it",
    ),
    "config not UTF-8": (
        ["fit", "--config", "latin1.yaml"],
        "config: 'latin1.yaml' is not UTF-8 text (byte 0xe9 at offset 5); fix: save the file as UTF-8",
    ),
    "a misspelt strategy name": (
        ["fit", "--trainer.strategy", "csxx"],
        "trainer.strategy: 'csxx' is not a registered strategy name; did you mean 'csx'? fix: write one of the CS-X "
        "strategies (csx, csx_ddp, csx_fsdp) or another name in Lightning's StrategyRegistry (auto, ddp, fsdp, ...)",
    ),
    "a strategy name close to none": (
        ["validate", "--trainer.strategy", "tpu_pod"],
        "trainer.strategy: 'tpu_pod' is not a registered strategy name; fix: write one of the CS-X strategies "
        "(csx, csx_ddp, csx_fsdp) or another name in Lightning's StrategyRegistry (auto, ddp, fsdp, ...)",
    ),
    "a strategy option on a strategy given by name": (
        ["fit", "--trainer.strategy.trace_check", "false"],
        "trainer.strategy: 'csx' is given by name, which takes no options, so --trainer.strategy.trace_check has "
        "nothing to set; fix: give the class too: --trainer.strategy cs_lightning.CSXStrategy "
        "--trainer.strategy.trace_check false",
    ),
    "a misspelt strategy option on a strategy given by name": (
        ["fit", "--trainer.strategy", "csx_ddp", "--trainer.strategy.trace_chek", "false"],
        "trainer.strategy: 'csx_ddp' is given by name, which takes no options, so --trainer.strategy.trace_chek has "
        "nothing to set (and its option is trace_check); fix: give the class too: --trainer.strategy "
        "cs_lightning.CSXDDPStrategy --trainer.strategy.trace_check false",
    ),
    "a strategy option given a value it refuses, on a strategy given by name": (
        ["fit", "--trainer.strategy.init_mode", "exactt"],
        "trainer.strategy: 'csx' is given by name, which takes no options, so --trainer.strategy.init_mode has "
        "nothing to set; fix: give the class too: --trainer.strategy cs_lightning.CSXStrategy "
        "--trainer.strategy.init_mode <value> (init_mode='exactt' is not supported; did you mean 'exact'? use one "
        "of ('exact', 'independent'))",
    ),
    "a strategy name given as its class_path": (
        ["fit", "--config", "run.yaml", "--config", "fsdp_by_name.yaml"],
        "trainer.strategy.class_path: 'csx_fsdp' is the strategy's name, and class_path takes its class's import "
        "path; fix: class_path: cs_lightning.CSXFSDPStrategy",
    ),
    "the one-system class on two devices": (
        ["fit", "--config", "run.yaml", "--config", "one_system.yaml", "--trainer.devices", "2"],
        "trainer.strategy: CSXStrategy emulates one system, but devices=2 and num_nodes=1 ask for 2 processes; fix: "
        "give the strategy by its name, csx (which runs one system per device, data-parallel), or as "
        "CSXDDPStrategy, or run one process (devices=1, num_nodes=1)",
    ),
    "an unknown compile backend": (
        [
            "fit",
            "--trainer.strategy",
            "cs_lightning.CSXStrategy",
            "--trainer.strategy.compile",
            "true",
            "--trainer.strategy.init_args.compile_backend",
            "bogus",
        ],
        f"trainer.strategy.init_args.compile_backend: compile_backend='bogus' is not a torch.compile backend; "
        f"{BACKEND_CHOICES.rstrip('.')}; fix: correct the value",
    ),
    "a compile backend neither a name nor a callable, in YAML": (
        ["fit", "--config", "run.yaml", "--config", "backend3.yaml"],
        "trainer.strategy.init_args.compile_backend: compile_backend=3 is neither a backend name nor a callable; "
        f"{BACKEND_CHOICES.rstrip('.')}; fix: correct the value",
    ),
    "an unknown init_mode": (
        ["fit", "--trainer.strategy", "cs_lightning.CSXFSDPStrategy", "--trainer.strategy.init_mode", "lazy"],
        "trainer.strategy.init_args.init_mode: init_mode='lazy' is not supported; use one of ('exact', 'independent'); "
        "fix: correct the value",
    ),
    "a misspelt strategy option": (
        ["fit", "--trainer.strategy", "cs_lightning.CSXDDPStrategy", "--trainer.strategy.trace_chek", "false"],
        "trainer.strategy.init_args.trace_chek: cs_lightning.CSXDDPStrategy has no such argument; "
        "did you mean 'trace_check'? fix: remove it or correct its spelling",
    ),
    "a strategy option of the wrong type": (
        ["fit", "--trainer.strategy", "cs_lightning.CSXStrategy", "--trainer.strategy.init_args.trace_check", "maybe"],
        "trainer.strategy.init_args.trace_check: trace_check='maybe' must be a bool (True or False); fix: correct the "
        "value",
    ),
    "a strategy option its constructor refuses": (
        ["fit", "--trainer.strategy", "cs_lightning.CSXFSDPStrategy", "--trainer.strategy.state_dict_type", "bogus"],
        "trainer.strategy.init_args: CSXFSDPStrategy failed to build: state_dict_type='bogus' is not supported; use "
        "one of ('sharded', 'full'); fix: correct trainer.strategy.init_args",
    ),
    "a ModelParallelStrategy argument that csx_fsdp sets itself": (
        ["fit", "--trainer.strategy", "cs_lightning.CSXFSDPStrategy", "--trainer.strategy.data_parallel_size", "2"],
        "trainer.strategy.init_args.data_parallel_size: cs_lightning.CSXFSDPStrategy sets data_parallel_size itself "
        "(every rank is a data-parallel replica: the world size); fix: remove it",
    ),
    "a default_root_dir under a file": (
        ["fit", "--trainer.default_root_dir", "run.yaml/out"],
        f"trainer.default_root_dir: 'run.yaml/out' lies under the file 'run.yaml'; {FOLDER_FIX}",
    ),
    "a logger's save_dir that is a file": (
        ["validate", "--trainer.logger.save_dir", "weights.pt"],
        f"trainer.logger.init_args.save_dir: 'weights.pt' is a file; {FOLDER_FIX}",
    ),
    "a checkpoint folder under a file, which fit would find after training": (
        ["fit", "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.dirpath", "run.yaml/ckpts"],
        f"trainer.callbacks[1].init_args.dirpath: 'run.yaml/ckpts' lies under the file 'run.yaml'; {FOLDER_FIX}",
    ),
    "a config file given without --config": (
        ["validate", "run.yaml"],
        "run.yaml: a config file is given after --config; fix: cs-lightning validate --config run.yaml",
    ),
    "a Lightning callback its constructor refuses": (
        ["fit", "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.every_n_train_steps", "-1"],
        "trainer.callbacks[1].init_args: ModelCheckpoint failed to build: Invalid value for every_n_train_steps=-1. "
        "Must be >= 0; fix: correct trainer.callbacks[1].init_args",
    ),
    "the second of two callbacks of one class refusing its arguments": (
        [
            "fit",
            "--trainer.callbacks+=ModelCheckpoint",
            "--trainer.callbacks.every_n_train_steps",
            "5",
            "--trainer.callbacks+=ModelCheckpoint",
            "--trainer.callbacks.every_n_train_steps",
            "-1",
        ],
        "trainer.callbacks[2].init_args: ModelCheckpoint failed to build: Invalid value for every_n_train_steps=-1. "
        "Must be >= 0; fix: correct trainer.callbacks[2].init_args",
    ),
    "a StepCheckpoint given a metric to monitor": (
        ["fit", "--trainer.callbacks+=cs_lightning.StepCheckpoint", "--trainer.callbacks.monitor", "val_loss"],
        "trainer.callbacks[1].init_args: StepCheckpoint failed to build: StepCheckpoint(monitor='val_loss'): it "
        "saves by steps, as Model Zoo's checkpoint steps do; for checkpoints ranked by a metric use "
        "ModelCheckpoint(monitor=...), beside it or instead; fix: correct trainer.callbacks[1].init_args",
    ),
    "a user's callback whose __init__ raises": (
        ["fit", "--config", "run.yaml", "--config", "boom_callback.yaml"],
        "trainer.callbacks[0]: Boom failed to build: KeyError: 'every' (at boom_callback.py:7, in __init__); fix: "
        "correct Boom, which raised it",
    ),
    "a strategy given as a class path string": (
        ["validate", "--trainer.strategy", "cs_lightning.strategies.CSXFSDPStrategy"],
        "trainer.strategy: 'cs_lightning.strategies.CSXFSDPStrategy' is a class path, and a strategy given as a "
        "string must be a registered name; fix: give its registered name csx_fsdp (--trainer.strategy csx_fsdp), or "
        "the class as class_path: --trainer.strategy.class_path cs_lightning.strategies.CSXFSDPStrategy (in YAML, "
        "strategy: {{class_path: cs_lightning.strategies.CSXFSDPStrategy}})",  # format() reads the braces
    ),
}


def test_a_sharded_folder_passes_for_every_strategy_that_reads_one(tmp_path: Path) -> None:
    """Judged by class, not by name: a subclass of ModelParallelStrategy, named by class path or given
    as an object, reads the folder as csx_fsdp and Lightning's own FSDP strategies do."""
    from jsonargparse import Namespace
    from lightning.pytorch.strategies import ModelParallelStrategy

    from cs_lightning.cli.checkpoints import check_ckpt_path
    from cs_lightning.errors import ConfigError

    class TensorParallel(ModelParallelStrategy):
        pass

    _checkpoint_files(tmp_path)
    readers = ("csx_fsdp", "fsdp", Namespace(class_path="lightning.pytorch.strategies.FSDPStrategy"), TensorParallel())
    for strategy in readers:
        check_ckpt_path(str(tmp_path / "sharded"), {"strategy": strategy})
    # DeepSpeed's checkpoints are folders of its own: it judges any folder itself
    check_ckpt_path(str(tmp_path / "checkpoints"), {"strategy": "deepspeed"})
    for strategy in ("ddp", Namespace(class_path="cs_lightning.CSXStrategy")):
        with pytest.raises(ConfigError, match="cannot read"):
            check_ckpt_path(str(tmp_path / "sharded"), {"strategy": strategy})


@pytest.mark.parametrize("case", sorted(ONE_LINE_FAILURES))
def test_failures_before_training_are_one_line_exit_2_and_write_nothing(case: str, tmp_path: Path) -> None:
    """The installed command: no traceback, no log folder, no config.yaml, every file as it was."""
    args, line = ONE_LINE_FAILURES[case]
    write(tmp_path / "run.yaml", digits_run(tmp_path, **CEREBRAS))
    _checkpoint_files(tmp_path)
    (tmp_path / "boom.py").write_text("import os\nraise RuntimeError('boom at import')\n")
    (tmp_path / "modelzoo.yaml").write_text("trainer:\n  init: {loop: {max_steps: 2}}\n")
    (tmp_path / "imports_true.yaml").write_text("imports: true\n")
    (tmp_path / "imports_empty.yaml").write_text("imports: ['']\n")
    (tmp_path / "val_check_zero.yaml").write_text("trainer: {val_check_interval: 0.0}\n")
    (tmp_path / "schedulers_name.yaml").write_text("schedulers: CosineDecayLR\n")
    (tmp_path / "optimizer_list.yaml").write_text("optimizer: [{AdamW: {lr: 0.001}}]\n")
    (tmp_path / "boom_model.py").write_text(
        "import lightning as L\n\n\nclass Boom(L.LightningModule):\n    def __init__(self):\n"
        "        super().__init__()\n        self.width = {'depth': 2}['width']\n"
    )
    (tmp_path / "boom_model.yaml").write_text("imports: [boom_model.py]\nmodel: {class_path: boom_model.Boom}\n")
    (tmp_path / "boom_callback.py").write_text(
        "import lightning as L\n\n\nclass Boom(L.Callback):\n    def __init__(self):\n"
        "        super().__init__()\n        self.every = {'each': 2}['every']\n"
    )
    (tmp_path / "boom_callback.yaml").write_text(
        "imports: [boom_callback.py]\ntrainer: {callbacks: [{class_path: boom_callback.Boom}]}\n"
    )
    (tmp_path / "latin1.yaml").write_bytes("# caf\xe9\ntrainer: {max_steps: 2}\n".encode("latin-1"))
    (tmp_path / "one_system.yaml").write_text("trainer:\n  strategy:\n    class_path: cs_lightning.CSXStrategy\n")
    (tmp_path / "fsdp_by_name.yaml").write_text(
        "trainer:\n  strategy:\n    class_path: csx_fsdp\n    init_args: {state_dict_type: full}\n"
    )
    (tmp_path / "backend3.yaml").write_text(
        "trainer:\n  strategy:\n    class_path: cs_lightning.CSXStrategy\n    init_args: {compile: true, compile_backend: 3}\n"
    )
    before, folders = snapshot(tmp_path), _folders(tmp_path)
    config = [] if "--config" in args else ["--config", "run.yaml"]
    result = run_cli(args[0], *config, *args[1:], cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"cs-lightning: error: {line.format(tmp=tmp_path)}\n"
    assert snapshot(tmp_path) == before
    assert _folders(tmp_path) == folders  # no log folder, not even an empty one


def _folders(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_dir() and "cs_lightning_cache" not in path.parts}


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's sysfs")
@pytest.mark.parametrize(
    ("option", "key"),
    [
        ("--trainer.default_root_dir", "trainer.default_root_dir"),
        ("--trainer.callbacks.dirpath", "trainer.callbacks[1].init_args.dirpath"),
    ],
)
def test_a_folder_the_filesystem_refuses_is_one_line_even_for_root(
    option: str, key: str, tmp_path: Path, capfd
) -> None:
    """sysfs refuses a new folder to root too, whom os.access lets write anywhere: the check tries it."""
    config = digits_run(tmp_path, **CEREBRAS)
    config["trainer"]["callbacks"].append({"class_path": "lightning.pytorch.callbacks.ModelCheckpoint"})
    path = write(tmp_path / "run.yaml", config)
    before = _files(tmp_path)
    assert main(["fit", "--config", str(path), option, "/sys/cslout"]) == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert re.fullmatch(
        rf"cs-lightning: error: {re.escape(key)}: '/sys/cslout' cannot be made in '/sys' "
        rf"\((Operation not permitted|Permission denied)\); {FOLDER_FIX}\n",
        err,
    ), err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("devices", [1, 2])
def test_ctrl_c_during_training_exits_130_without_a_traceback(devices: int, tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches every process of the group (each rank of devices=2): one line for all."""
    config = digits_run(tmp_path, **CEREBRAS)
    config["trainer"].update(max_steps=10**6, devices=devices)
    write(tmp_path / "run.yaml", config)
    run = subprocess.Popen(
        [str(Path(sys.executable).with_name("cs-lightning")), "fit", "--config", "run.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as the shell gives a command
    )
    metrics_csv = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    deadline = time.monotonic() + 120
    while not metrics_csv.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)  # training has logged its first steps
    os.killpg(run.pid, signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130
    assert err.endswith("cs-lightning: interrupted\n") and "Traceback" not in err
    assert err.count("interrupted") == 1
    assert "Done:" not in out  # no summary of a run that did not finish


# ------------------------------------------------------------------ nothing accepted silently


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """YAML loaders keep the last of two equal keys; fit, schedule and convert refuse the file."""
    (tmp_path / "run.yaml").write_text(
        "optimizer:\n  AdamW: {lr: 0.1}\ntrainer: {max_steps: 10}\n"
        "schedulers:\n  - ConstantLR: {learning_rate: 0.1, learning_rate: 0.5}\n"
    )
    (tmp_path / "mz.yaml").write_text("trainer:\n  init:\n    seed: 1\n    loop: {max_steps: 10}\n    seed: 2\n")
    before = snapshot(tmp_path)
    for args, line in (
        (
            ["schedule", "--config", "run.yaml"],
            "config: 'run.yaml' gives key 'learning_rate' twice, at lines 5 and 5",
        ),
        (["fit", "--config", "run.yaml"], "config: 'run.yaml' gives key 'learning_rate' twice, at lines 5 and 5"),
        (["convert", "mz.yaml", "-o", "out.yaml"], "source: 'mz.yaml' gives key 'seed' twice, at lines 3 and 5"),
    ):
        result = run_cli(*args, cwd=tmp_path)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == f"cs-lightning: error: {line}; fix: keep one of them\n"
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("block", "key"),
    [
        (
            {"LinearLR": {"initial_learning_rate": 0.01, "end_learning_rate": -0.001, "total_iters": 4}},
            "schedulers[0].LinearLR.end_learning_rate: got -0.001",
        ),
        (
            {
                "SequentialLR": {
                    "schedulers": [
                        {"ConstantLR": {"learning_rate": 0.01, "total_iters": 4}},
                        {"PiecewiseConstantLR": {"learning_rates": [0.01, -0.1], "milestones": [2]}},
                    ]
                }
            },
            "schedulers[0].SequentialLR.schedulers[1].PiecewiseConstantLR.learning_rates: got [0.01, -0.1]",
        ),
    ],
)
def test_a_negative_learning_rate_is_refused_with_its_key_path(block, key, tmp_path: Path, capfd) -> None:
    path = write(tmp_path / "run.yaml", digits_run(tmp_path, optimizer={"SGD": {"lr": 0.01}}, schedulers=[block]))
    before = snapshot(tmp_path)
    assert main(["schedule", "--config", str(path)]) == 2
    assert capfd.readouterr() == (
        "",
        f"cs-lightning: error: {key}; a learning rate must be >= 0 (torch's optimizers refuse lr < 0); fix: correct "
        "the value\n",
    )
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "args, problem",
    [
        (["fitt"], "unknown command 'fitt'; did you mean 'fit'?"),
        (["shedule"], "unknown command 'shedule'; did you mean 'schedule'?"),
        (["train"], "unknown command 'train';"),
        ([], "no command given;"),
    ],
)
def test_a_wrong_or_missing_command_lists_every_command(args: list[str], problem: str, capfd) -> None:
    assert main(args) == 2
    assert capfd.readouterr().err == (
        f"cs-lightning: error: {problem} fix: cs-lightning fit|validate|test|predict --config run.yaml, "
        "or cs-lightning schedule|convert|cache (each takes --help)\n"
    )


@pytest.mark.parametrize("action", ["info", "clear"])
@pytest.mark.parametrize("inside", [False, True])
def test_a_cache_folder_that_is_a_file_is_one_line(
    action: str, inside: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    """Not 0 entries reported (or removed) as if the cache were empty: the path cannot hold one."""
    (tmp_path / "notes.txt").write_text("mine\n")
    folder = tmp_path / "notes.txt" / "cache" if inside else tmp_path / "notes.txt"
    monkeypatch.setenv("CS_LIGHTNING_CACHE_DIR", str(folder))
    assert main(["cache", action]) == 2
    where = f"lies under the file {str(tmp_path / 'notes.txt')!r}" if inside else "is a file"
    assert capfd.readouterr() == (
        "",
        f"cs-lightning: error: CS_LIGHTNING_CACHE_DIR: {str(folder)!r} cannot be the cache folder: it {where}; "
        "fix: set it to a folder (made when first written), or unset it\n",
    )
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("action", ["info", "clear"])
@pytest.mark.parametrize("subfolder", ["trace", "mt19937"])
def test_a_cache_subfolder_that_is_a_file_is_one_line(
    action: str, subfolder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    """As for the cache folder itself: not 0 entries reported, or removed, from a folder that cannot be one."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / subfolder).write_text("mine\n")
    monkeypatch.setenv("CS_LIGHTNING_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["cache", action]) == 2
    assert capfd.readouterr() == (
        "",
        f"cs-lightning: error: CS_LIGHTNING_CACHE_DIR: {str(tmp_path / 'cache' / subfolder)!r}, a folder of the "
        f"cache {str(tmp_path / 'cache')!r}, is a file; fix: move that file away, or set CS_LIGHTNING_CACHE_DIR to "
        "another folder\n",
    )
    assert (tmp_path / "cache" / subfolder).read_text() == "mine\n"


def test_a_cache_entry_that_cannot_be_removed_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    """A read-only or another user's cache raised a traceback. Root, which runs this suite, removes files
    whatever their mode: the file system's refusal is raised in its place."""
    entry = tmp_path / "cache" / "trace" / "0123.json"
    entry.parent.mkdir(parents=True)
    entry.write_text("{}")
    monkeypatch.setenv("CS_LIGHTNING_CACHE_DIR", str(tmp_path / "cache"))

    def refused(path: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Path, "unlink", refused)
    assert main(["cache", "clear"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err.startswith(f"cs-lightning: error: CS_LIGHTNING_CACHE_DIR: cannot remove {str(entry)!r}: ")
    assert err.endswith(
        "; fix: clear the cache as a user who may write it, or set CS_LIGHTNING_CACHE_DIR to a folder of your own\n"
    )
    assert len(err.splitlines()) == 1 and entry.is_file()


def test_a_cache_refusal_names_xdg_cache_home_when_that_is_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    monkeypatch.delenv("CS_LIGHTNING_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "notes.txt"))
    assert main(["cache", "info"]) == 2
    assert capfd.readouterr().err.startswith("cs-lightning: error: XDG_CACHE_HOME: ")


def test_a_second_run_into_the_same_folder_without_a_logger_is_one_line(tmp_path: Path, capfd) -> None:
    config = digits_run(tmp_path, **CEREBRAS)
    config["trainer"] = {**config["trainer"], "logger": False, "callbacks": [], "max_steps": 1}
    path = write(tmp_path / "run.yaml", config)
    assert main(["fit", "--config", str(path)]) == 0
    capfd.readouterr()
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert main(["fit", "--config", str(path)]) == 2
    _out, err = capfd.readouterr()
    assert err.startswith("cs-lightning: error: trainer.default_root_dir: ") and "config.yaml' exists" in err, err
    assert len(err.strip().splitlines()) == 1 and "fix: give another --trainer.default_root_dir" in err
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_python_dash_m_runs_the_command_as_the_console_script(tmp_path: Path) -> None:
    """Where the console script is not on PATH (a venv not activated): the same command, the same name."""
    run = [sys.executable, "-m", "cs_lightning.cli"]
    helped = subprocess.run([*run, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: cs-lightning ")
    refused = subprocess.run(
        [*run, "convert", "missing.yaml", "-o", "run.yaml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert (refused.returncode, refused.stderr) == (2, refused.stderr.splitlines()[0] + "\n")
    assert refused.stderr.startswith("cs-lightning: error: source: 'missing.yaml' is not a file")
    assert list(tmp_path.iterdir()) == []
