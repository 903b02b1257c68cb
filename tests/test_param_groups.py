"""param_groups: blocks: parameters grouped by tag, their learning rate scaled by ScalePerParamLR."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, run_cli, snapshot

from cs_lightning import param_groups, schedulers
from cs_lightning.cli import main
from cs_lightning.errors import ConfigError

REFERENCE = {case["id"]: case for case in json.loads((REPO / "tests/reference/cerebras_schedules.json").read_text())}


class _Block(torch.nn.Module):
    """Parameter names shaped like Model Zoo's GPT-2 decoder: the names its muP tags select."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding_layer = torch.nn.Embedding(5, 4)
        self.self_attn = torch.nn.ModuleDict({"proj_q_dense_layer": torch.nn.Linear(4, 4)})
        self.ffn = torch.nn.ModuleDict({"linear_layer": torch.nn.Linear(4, 4)})
        self.norm = torch.nn.LayerNorm(4)


def _names(group: dict, model: torch.nn.Module) -> list[str]:
    ids = {id(p) for p in group["params"]}
    return [name for name, p in model.named_parameters() if id(p) in ids]


def test_parameters_are_grouped_by_their_names_globs() -> None:
    model = _Block()
    entries = param_groups.parse(
        [
            {"tag": "decoder_kernel", "params": ["*linear*weight*", "*dense*weight*"], "adjust_learning_rate": 0.25},
            {"tag": "embedding", "params": "*embedding*weight", "adjust_learning_rate": 10},
        ]
    )
    rest, kernel, embedding = param_groups.split(param_groups.trainable(model), entries)
    assert _names(rest, model) == [
        "self_attn.proj_q_dense_layer.bias",
        "ffn.linear_layer.bias",
        "norm.weight",
        "norm.bias",
    ]
    assert set(rest) == {"params"}
    assert _names(kernel, model) == ["self_attn.proj_q_dense_layer.weight", "ffn.linear_layer.weight"]
    assert (kernel["tags"], kernel["adjust_learning_rate"]) == ({"decoder_kernel"}, 0.25)
    assert _names(embedding, model) == ["embedding_layer.weight"]
    assert (embedding["tags"], embedding["adjust_learning_rate"]) == ({"embedding"}, 10.0)


def test_frozen_parameters_are_left_out() -> None:
    model = _Block()
    model.ffn.requires_grad_(False)
    entries = param_groups.parse([{"tag": "k", "params": "*dense*weight", "adjust_learning_rate": 0.5}])
    groups = param_groups.split(param_groups.trainable(model), entries)
    assert [_names(group, model) for group in groups][1] == ["self_attn.proj_q_dense_layer.weight"]
    assert "ffn.linear_layer.weight" not in _names(groups[0], model)


def test_each_group_learns_at_its_scale_times_the_cerebras_schedule() -> None:
    """Stepping a real optimizer built from a param_groups: block gives cerebras.pytorch's own
    ScalePerParamLR numbers (its wheel, scale 0.25): lr = 0.25 x the schedule, at every step."""
    case = REFERENCE["lr_scale_per_param_sequential"]
    model = _Block()
    entries = param_groups.parse([{"tag": "kernel", "params": "*weight", "adjust_learning_rate": 0.25}])
    optimizer = torch.optim.AdamW(param_groups.split(param_groups.trainable(model), entries), lr=0.1)
    (scheduler,) = schedulers.build(case["spec"], optimizer)
    expected = case["values"]
    for step in range(case["steps"]):
        if step:
            optimizer.step()
            scheduler.step()
        rest, kernel = (group["lr"] for group in optimizer.param_groups)
        assert rest == pytest.approx(expected[step][0], rel=1e-6, abs=1e-9)
        assert kernel == pytest.approx(expected[step][1], rel=1e-6, abs=1e-9)
        assert kernel == pytest.approx(0.25 * rest, rel=1e-6, abs=1e-12)
    assert [expected[k][1] for k in (5, 10, 25)] == pytest.approx([0.0125, 0.025, 0.0125], rel=1e-6)


@pytest.mark.parametrize(
    "spec, key, words",
    [
        ({"tag": "k"}, "param_groups", "{tag: decoder_kernel, params: ['*dense*weight*']"),
        ([{"tag": "k", "params": "*"}], "param_groups[0]", "missing adjust_learning_rate"),
        ([{"tag": "k", "params": "*", "adjust_learning_rate": 1, "lr": 2}], "param_groups[0].lr", "unknown key"),
        ([{"tag": "", "params": "*", "adjust_learning_rate": 1}], "param_groups[0].tag", "non-empty string"),
        ([{"tag": "k", "params": [], "adjust_learning_rate": 1}], "param_groups[0].params", "params: ['*dense"),
        ([{"tag": "k", "params": "*", "adjust_learning_rate": -0.5}], "param_groups[0].adjust_learning_rate", "-0.5"),
        ([{"tag": "k", "params": "*", "adjust_learning_rate": "1/3"}], "param_groups[0].adjust_learning_rate", "1/3"),
        (
            [
                {"tag": "k", "params": "a*", "adjust_learning_rate": 1},
                {"tag": "k", "params": "b*", "adjust_learning_rate": 2},
            ],
            "param_groups[1].tag",
            "also param_groups[0].tag",
        ),
        (
            [
                {"tag": "emb", "params": "*tok*", "adjust_learning_rate": 1},
                {"tag": "all", "params": ["**"], "adjust_learning_rate": 2},
            ],
            "param_groups[1].params",
            "so param_groups[0] (tag 'emb') could only name parameters already there",
        ),
        (
            [{"tag": "h", "params": ["blocks.*.qkv.weight"], "adjust_learning_rate": -1}],
            "param_groups[0].adjust_learning_rate",
            "got -1; fix: write a number such as 0.5",
        ),
        (
            [{"tag": "h", "params": "*", "adjust_learning_rate": "abc"}],
            "param_groups[0].adjust_learning_rate",
            "got 'abc'; fix: write a number",
        ),
    ],
)
def test_a_bad_block_is_refused_naming_its_key(spec, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as error:
        param_groups.parse(spec)
    assert error.value.key == key and words in str(error.value)


def test_globs_that_match_no_parameter_are_refused_with_the_models_names() -> None:
    entries = param_groups.parse([{"tag": "k", "params": "*decoder*dense*weight", "adjust_learning_rate": 0.5}])
    with pytest.raises(ConfigError) as error:
        param_groups.split(param_groups.trainable(torch.nn.Linear(2, 2)), entries)
    assert str(error.value) == (
        "param_groups[0].params: ['*decoder*dense*weight'] match no trainable parameter of the model (its names: "
        "weight, bias); fix: give globs of the model's parameter names, as model.named_parameters() lists them once built"
    )


def test_a_parameter_two_entries_match_is_refused() -> None:
    entries = param_groups.parse(
        [
            {"tag": "a", "params": "*weight", "adjust_learning_rate": 0.5},
            {"tag": "b", "params": "ffn.*", "adjust_learning_rate": 2},
        ]
    )
    with pytest.raises(ConfigError) as error:
        param_groups.split(param_groups.trainable(_Block()), entries)
    assert str(error.value).startswith(
        "param_groups[1].params: parameter 'ffn.linear_layer.weight' matches both param_groups[0] (a) and "
        "param_groups[1] (b)"
    )


# ------------------------------------------------------------------------------- CLI

DIGITS_PY = REPO / "examples" / "image_classifier" / "image_classifier.py"
WARMUP = {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.01, "total_iters": 4}}
DECAY = {"LinearLR": {"initial_learning_rate": 0.01, "end_learning_rate": 0.001, "total_iters": 8}}
SCALED = [{"ScalePerParamLR": {"scheduler": {"SequentialLR": {"schedulers": [WARMUP, DECAY]}}}}]
HEAD = [{"tag": "head", "params": ["net.6.*"], "adjust_learning_rate": 0.25}]


def _run(root: Path, **blocks) -> Path:
    config = {
        "imports": [str(DIGITS_PY)],
        "model": {"class_path": "image_classifier.DigitClassifier", "init_args": {"channels": 4}},
        "data": {"class_path": "image_classifier.DigitsData", "init_args": {"batch_size": 16}},
        "optimizer": {"AdamW": {"lr": 0.01}},
        "trainer": {
            "max_steps": 12,
            "log_every_n_steps": 1,
            "limit_val_batches": 0,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "enable_checkpointing": False,
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(root)}},
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.LearningRateMonitor",
                    "init_args": {"logging_interval": "step"},
                }
            ],
        },
        **blocks,
    }
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _reference(step: int) -> float:
    """Warmup 0 -> 0.01 over 4 steps, then 0.01 -> 0.001 over 8 (float64)."""
    return 0.01 * step / 4 if step < 4 else 0.01 + (0.001 - 0.01) * (step - 4) / 8


def test_fit_trains_the_tagged_parameters_at_their_scale(tmp_path: Path) -> None:
    assert main(["fit", "--config", str(_run(tmp_path, param_groups=HEAD, schedulers=SCALED))]) == 0
    logged: dict[str, dict[int, float]] = {}
    with (tmp_path / "lightning_logs/version_0/metrics.csv").open() as file:
        for row in csv.DictReader(file):
            for column in ("lr-AdamW/pg1", "lr-AdamW/pg2"):
                if row.get(column):
                    logged.setdefault(column, {})[int(row["step"])] = float(row[column])
    rest, head = logged["lr-AdamW/pg1"], logged["lr-AdamW/pg2"]
    assert sorted(head) == list(range(12))
    for step in range(12):
        assert rest[step] == pytest.approx(_reference(step), rel=1e-6, abs=1e-12)
        assert head[step] == pytest.approx(0.25 * _reference(step), rel=1e-6, abs=1e-12)


def test_schedule_shows_no_untagged_column_when_a_glob_tags_every_parameter(tmp_path: Path, capfd) -> None:
    everything = [{"tag": "all", "params": ["*"], "adjust_learning_rate": 0.25}]
    assert main(["schedule", "--config", str(_run(tmp_path, param_groups=everything, schedulers=SCALED))]) == 0
    header, *rows = capfd.readouterr().out.splitlines()
    assert header.split() == ["step", "ScalePerParamLR", "group", "0", "(all)", "lr"]
    table = {int(row.split()[0]): [float(v) for v in row.split()[1:]] for row in rows}
    assert sorted(table) == list(range(12))
    for step, values in table.items():
        assert values == [pytest.approx(0.25 * _reference(step), rel=1e-5, abs=1e-12)]


def test_schedule_shows_each_groups_learning_rate(tmp_path: Path, capfd) -> None:
    assert main(["schedule", "--config", str(_run(tmp_path, param_groups=HEAD, schedulers=SCALED))]) == 0
    header, *rows = capfd.readouterr().out.splitlines()
    assert header.split() == [
        "step",
        "ScalePerParamLR",
        "group",
        "0",
        "lr",
        "ScalePerParamLR",
        "group",
        "1",
        "(head)",
        "lr",
    ]
    table = {int(row.split()[0]): [float(v) for v in row.split()[1:]] for row in rows}
    assert sorted(table) == list(range(12))
    for step, (rest, head) in table.items():
        assert rest == pytest.approx(_reference(step), rel=1e-5, abs=1e-12)
        assert head == pytest.approx(0.25 * _reference(step), rel=1e-5, abs=1e-12)


@pytest.mark.parametrize(
    "blocks, line",
    [
        (
            {
                "param_groups": [{"tag": "head", "params": ["*decoder*dense*weight"], "adjust_learning_rate": 0.25}],
                "schedulers": SCALED,
            },
            "param_groups[0].params: ['*decoder*dense*weight'] match no trainable parameter of the model (the names"
            " most like them: net.6.weight, net.2.weight, net.0.weight, net.6.bias, of 6 in all); fix: give globs of"
            " the model's parameter names, as model.named_parameters() lists them once built",
        ),
        (
            {"param_groups": HEAD, "schedulers": [{"SequentialLR": {"schedulers": [WARMUP, DECAY]}}]},
            "param_groups[0].adjust_learning_rate: 0.25 is multiplied into the schedule by ScalePerParamLR, and no "
            "scheduler in schedulers: is one, so it would be ignored; fix: wrap the schedule as "
            "schedulers: [{ScalePerParamLR: {scheduler: {...}}}]",
        ),
        (
            {"schedulers": SCALED},
            "schedulers[0]: ScalePerParamLR multiplies in each param group's 'adjust_learning_rate' (muP's per-layer "
            "scales), but the optimizer: block puts every parameter in one group without it, so it would scale "
            "nothing; fix: add a param_groups: block naming those parameters and their adjust_learning_rate, or "
            "build the groups and these schedulers in configure_optimizers",
        ),
        (
            {"param_groups": HEAD},
            "param_groups[0].adjust_learning_rate: 0.25 is multiplied into the schedule by ScalePerParamLR, and no "
            "scheduler in schedulers: is one, so it would be ignored; fix: wrap the schedule as "
            "schedulers: [{ScalePerParamLR: {scheduler: {...}}}]",
        ),
    ],
)
def test_fit_refuses_groups_it_cannot_apply_in_one_line_writing_nothing(blocks, line: str, tmp_path: Path, capfd):
    path = _run(tmp_path, **blocks)
    before = snapshot(tmp_path)
    assert main(["fit", "--config", str(path)]) == 2
    assert capfd.readouterr().err == f"cs-lightning: error: {line}\n"
    assert snapshot(tmp_path) == before


def test_a_scheduler_can_target_an_entrys_tag(tmp_path: Path) -> None:
    """A tag from param_groups: is a real group in fit: a StepLR on it, a constant on the rest."""
    tagged = [
        {"StepLR": {"initial_learning_rate": 0.1, "step_size": 4, "gamma": 0.5, "param_group_tags": "head"}},
        {"ConstantLR": {"learning_rate": 0.002, "param_group_tags": [None]}},
    ]
    unscaled = [{"tag": "head", "params": ["net.6.*"], "adjust_learning_rate": 1.0}]
    assert main(["fit", "--config", str(_run(tmp_path, param_groups=unscaled, schedulers=tagged))]) == 0
    with (tmp_path / "lightning_logs/version_0/metrics.csv").open() as file:
        rows = [row for row in csv.DictReader(file) if row.get("lr-AdamW/pg2")]
    expected = [0.1] * 4 + [0.05] * 4 + [0.025] * 4  # float32 closed forms
    assert [float(row["lr-AdamW/pg2"]) for row in rows] == pytest.approx(expected, rel=1e-6)
    assert [float(row["lr-AdamW/pg1"]) for row in rows] == pytest.approx([0.002] * 12, rel=1e-6)


def test_a_scheduler_tag_no_entry_has_is_refused_naming_the_entries_tags(tmp_path: Path, capfd) -> None:
    misspelt = [{"StepLR": {"initial_learning_rate": 0.1, "step_size": 4, "gamma": 0.5, "param_group_tags": "haed"}}]
    unscaled = [{"tag": "head", "params": ["net.6.*"], "adjust_learning_rate": 1.0}]
    path = _run(tmp_path, param_groups=unscaled, schedulers=misspelt)
    before = snapshot(tmp_path)
    assert main(["fit", "--config", str(path)]) == 2
    line = capfd.readouterr().err
    assert line.startswith("cs-lightning: error: schedulers[0].StepLR") and line.count("\n") == 1
    assert line.endswith("; fix: use a tag of the param_groups: block (head) or add an entry\n")
    assert "untagged group" not in line
    assert snapshot(tmp_path) == before


def _readme_block() -> dict:
    """The README's param_groups: example, for examples/tiny_gpt."""
    text = (REPO / "README.md").read_text()
    start = text.index("```yaml\nparam_groups:") + len("```yaml\n")
    return yaml.safe_load(text[start : text.index("```", start)])


def _tiny_gpt(root: Path, **blocks: object) -> Path:
    """examples/tiny_gpt's config, one step, no checkpoint; `blocks` replace its keys."""
    config = yaml.safe_load((REPO / "examples/tiny_gpt/config.yaml").read_text())
    config["imports"] = [str(REPO / "examples/tiny_gpt/tiny_gpt.py")]
    config["trainer"] = {"max_steps": 1, "limit_val_batches": 0, "enable_checkpointing": False}
    config["model"]["init_args"]["sample_chars"] = 0
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump({**config, **blocks}, sort_keys=False))
    return path


@pytest.mark.parametrize("devices", [1, 2])
def test_globs_on_a_model_built_in_configure_model_are_refused_in_one_line(tmp_path: Path, devices: int) -> None:
    """The installed command: its names are known once configure_model() ran, so the refusal comes from
    configure_optimizers, after Lightning's start-up lines, still as one line and exit 2 (said by rank 0
    alone when every rank refuses it). It leaves no file: config.yaml is written as fit starts (in the log
    folder Lightning makes before configure_model, which stays empty)."""
    block = _readme_block()
    block["param_groups"][0]["params"] = ["layers.*.weight"]
    config = yaml.safe_load(_tiny_gpt(tmp_path, **block).read_text())
    config["trainer"].update(accelerator="cpu", devices=devices)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_cli("fit", "--config", "run.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert [line for line in result.stderr.splitlines() if "error" in line] == [
        "cs-lightning: error: param_groups[0].params: ['layers.*.weight'] match no trainable parameter of the "
        "model (the names most like them: pos.weight, norm.weight, blocks.1.qkv.weight, blocks.1.ln2.weight, of 28 "
        "in all); fix: give globs of the model's parameter names, as model.named_parameters() lists them once built"
    ]
    assert [path for path in (tmp_path / "lightning_logs").rglob("*") if path.is_file()] == []


def _first_loss(caplog: pytest.LogCaptureFixture) -> str:
    """The loss of the first step, from the line the time-to-first-loss clock logs (before any update)."""
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss:")]
    caplog.clear()
    return line.rsplit("first loss ", 1)[1]


def test_the_readme_block_trains_tiny_gpt_from_the_same_weights(tmp_path: Path, caplog) -> None:
    """Tagging groups draws nothing: the run starts from the weights it has without them."""
    caplog.set_level("INFO")
    assert main(["fit", "--config", str(_tiny_gpt(tmp_path))]) == 0
    plain = _first_loss(caplog)
    assert main(["fit", "--config", str(_tiny_gpt(tmp_path, **_readme_block()))]) == 0
    assert _first_loss(caplog) == plain


NEEDS_TRAINER = """
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class NeedsTrainer(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = None

    def configure_model(self) -> None:
        if self.net is None:
            self.net = torch.nn.Linear(4, 1, bias=self.trainer.max_steps > 0)

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).sum()

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.ones(8, 4)), batch_size=4)
"""


@pytest.mark.parametrize("glob, code", [("net.*", 0), ("head.*", 2)])
def test_a_configure_model_that_needs_the_trainer_has_its_globs_checked_when_it_runs(
    glob: str, code: int, tmp_path: Path, capfd
) -> None:
    """The copy's hook fails without a Trainer: that failure is no error; the globs are checked later."""
    module = f"needs_trainer_{code}"  # imported once per process: one name per case
    (tmp_path / f"{module}.py").write_text(NEEDS_TRAINER)
    config = {
        "imports": [f"{module}.py"],
        "model": {"class_path": f"{module}.NeedsTrainer"},
        "optimizer": {"SGD": {"lr": 0.1}},
        "param_groups": [{"tag": "all", "params": [glob], "adjust_learning_rate": 0.5}],
        "schedulers": [{"ScalePerParamLR": {"scheduler": {"ConstantLR": {"learning_rate": 0.1}}}}],
        "trainer": {"max_steps": 1, "logger": False, "enable_checkpointing": False, "enable_progress_bar": False},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    assert main(["fit", "--config", "run.yaml"]) == code
    if code:
        last = capfd.readouterr().err.splitlines()[-1]
        assert last.startswith(
            "cs-lightning: error: param_groups[0].params: ['head.*'] match no trainable parameter of the model "
            "(its names: net.weight, net.bias)"
        )
