"""Every real Cerebras Model Zoo config in ../shared/modelzoo_configs converts and schedules.

The folder (294 configs of releases 1.9.1, 2.2.1 and 2.10.0) sits next to the project's
checkout on the team's machines and is never copied into the repository: where it does not
exist (a user's clone) these tests are skipped. The CLI's entry point runs in this process
(a fresh process per config would take an hour); the subprocess tests of test_cli and
test_convert cover the installed command itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO

from cs_lightning.cli import main
from cs_lightning.config_blocks import read_yaml
from cs_lightning.convert import convert, dump
from cs_lightning.errors import ConfigError, format_key_path
from cs_lightning.optimizers import optimizer_factory

CONFIGS_DIR = REPO.parent / "shared" / "modelzoo_configs"
CONFIGS = sorted(CONFIGS_DIR.rglob("*.yaml")) if CONFIGS_DIR.is_dir() else []


@pytest.mark.skipif(not CONFIGS, reason=f"no Model Zoo configs at {CONFIGS_DIR} (only on the team's machines)")
@pytest.mark.parametrize("source", CONFIGS, ids=[str(p.relative_to(CONFIGS_DIR)) for p in CONFIGS])
def test_model_zoo_config_converts_and_schedules(source: Path, tmp_path: Path, capfd) -> None:
    before = source.read_bytes()
    assert main(["convert", str(source), "-o", "run.yaml"]) == 0, capfd.readouterr().err
    assert capfd.readouterr().out.endswith("wrote run.yaml\n")
    assert source.read_bytes() == before
    converted = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert main(["schedule", "--config", "run.yaml"]) == 0, capfd.readouterr().err  # over trainer.max_steps
    out, err = capfd.readouterr()
    header, *rows = out.splitlines()
    values = [[float(v) for v in row.split()[1:]] for row in rows]
    steps = converted["trainer"]["max_steps"]
    assert err == "" and len(rows) >= min(steps, 20) and all(len(row) == len(values[0]) >= 1 for row in values)
    assert int(rows[-1].split()[0]) == steps - 1
    if "schedulers" not in converted:  # a constant learning rate: the optimizer's, at every step
        ((_name, args),) = converted["optimizer"].items()
        assert header.split() == ["step", "ConstantLR", "group", "0", "lr"]
        assert values == [[pytest.approx(args["lr"])]] * len(rows)


@pytest.mark.skipif(not CONFIGS, reason=f"no Model Zoo configs at {CONFIGS_DIR} (only on the team's machines)")
def test_all_releases_are_walked() -> None:
    releases = {path.relative_to(CONFIGS_DIR).parts[0] for path in CONFIGS}
    assert releases == {"1.9.1", "2.2.1", "2.10.0"} and len(CONFIGS) == 294


# muP configs: the per-layer scales each release applies, by tag (2.10's GPT-3 derives its own from mup_base_*).
MUP_SCALES = {
    "1.9.1/transformers/pytorch/gpt3/configs/Cerebras_GPT/2p7b_mup.yaml": {"decoder_kernel": 0.1},
    "2.2.1/models/nlp/gpt3/configs/muP/params_gpt3_111M.yaml": {"decoder_kernel": 1 / 3},
    "2.10.0/models/nlp/gpt3/configs/muP/params_gpt3_111M.yaml": {
        "decoder_attention": 1 / 3,
        "decoder_input_ffn": 1 / 3,
        "decoder_output_ffn": 1 / 3,
    },
    "2.10.0/models/nlp/mixtral/configs/params_moe_111M_base.yaml": {"decoder_kernel": 1 / 3},
}


def _gpt3_111m(step: int) -> float:
    """Model Zoo's GPT-3 111M muP schedule: 0 -> 6e-3 over 1525 steps, then down to 6e-4 over 7512."""
    return 6e-3 * step / 1525 if step < 1525 else 6e-3 + (6e-4 - 6e-3) * (step - 1525) / 7512


@pytest.mark.skipif(not CONFIGS, reason=f"no Model Zoo configs at {CONFIGS_DIR} (only on the team's machines)")
@pytest.mark.parametrize("relative", sorted(MUP_SCALES))
def test_mup_config_schedules_each_layer_group_at_its_scale(relative: str, tmp_path: Path, capfd) -> None:
    scales = MUP_SCALES[relative]
    assert main(["convert", str(CONFIGS_DIR / relative), "-o", "run.yaml"]) == 0, capfd.readouterr().err
    capfd.readouterr()
    converted = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert {entry["tag"]: entry["adjust_learning_rate"] for entry in converted["param_groups"]} == scales
    assert [next(iter(block)) for block in converted["schedulers"]] == ["ScalePerParamLR"]
    assert main(["schedule", "--config", "run.yaml"]) == 0, capfd.readouterr().err
    header, *rows = capfd.readouterr().out.splitlines()
    assert [f"({tag})" in header for tag in scales] == [True] * len(scales)
    for row in rows:
        step, base, *scaled = (float(v) for v in row.split())
        assert scaled == [pytest.approx(scale * base, rel=2e-5, abs=1e-12) for scale in scales.values()]
        if "111M" in relative and "gpt3" in relative:
            assert base == pytest.approx(_gpt3_111m(int(step)), rel=1e-5, abs=1e-12)


@pytest.mark.skipif(not CONFIGS, reason=f"no Model Zoo configs at {CONFIGS_DIR} (only on the team's machines)")
def test_mup_config_whose_globs_tag_every_parameter_has_no_untagged_column(tmp_path: Path, capfd) -> None:
    """The user scales every layer: `params: ['*']` leaves no untagged group, so no column for one."""
    relative = "2.2.1/models/nlp/gpt3/configs/muP/params_gpt3_111M.yaml"
    assert main(["convert", str(CONFIGS_DIR / relative), "-o", "run.yaml"]) == 0, capfd.readouterr().err
    capfd.readouterr()
    converted = yaml.safe_load((tmp_path / "run.yaml").read_text())
    converted["param_groups"][0]["params"] = ["*"]
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(converted, sort_keys=False))
    assert main(["schedule", "--config", "run.yaml", "--steps", "2000"]) == 0, capfd.readouterr().err
    header, *rows = capfd.readouterr().out.splitlines()
    assert header.split() == ["step", "ScalePerParamLR", "group", "0", "(decoder_kernel)", "lr"]
    for row in rows:
        step, scaled = row.split()
        assert float(scaled) == pytest.approx(_gpt3_111m(int(step)) / 3, rel=2e-5, abs=1e-12)


# 2.x trainer configs whose optimizer block, pasted into fit's optimizer:, torch cannot run as written.
REFUSED_OPTIMIZER_ARGUMENTS = {
    "2.10.0/models/nlp/mixtral/configs/params_moe_111M_base.yaml": "adjust_learning_rate",
    "2.10.0/models/nlp/mixtral/configs/params_moe_111M_with_shared_expert.yaml": "adjust_learning_rate",
    "2.10.0/models/vision/dino/configs/params_dinov2_large_224_bs2048.yaml": "params",
}


@pytest.mark.skipif(not CONFIGS, reason=f"no Model Zoo configs at {CONFIGS_DIR} (only on the team's machines)")
def test_model_zoo_optimizer_blocks_pasted_into_fit_are_accepted_or_refused_pointing_to_convert() -> None:
    accepted, refused = [], {}
    for path in CONFIGS:
        config, _ = read_yaml(path, "config", same_value_ok=True)
        init = (config.get("trainer") or {}).get("init") if isinstance(config, dict) else None
        if not path.relative_to(CONFIGS_DIR).parts[0].startswith("2.") or not init or "optimizer" not in init:
            continue
        name = str(path.relative_to(CONFIGS_DIR))
        try:
            optimizer_factory(init["optimizer"])
            accepted.append(name)
        except ConfigError as err:
            refused[name] = err
    assert len(accepted) + len(refused) == 115
    assert {name: err.path[-1] for name, err in refused.items()} == REFUSED_OPTIMIZER_ARGUMENTS
    assert all("`cs-lightning convert" in str(err) for err in refused.values())
    assert len(accepted) == 112


# Model Zoo's optimizer argument spellings -> (torch's argument, index in it), written from the Model Zoo docs,
# apart from the code under test: the converted optimizer must hold the source's number there.
TORCH_ARGUMENT = {
    "learning_rate": ("lr", None),
    "lr": ("lr", None),
    "eps": ("eps", None),
    "epsilon": ("eps", None),
    "weight_decay": ("weight_decay", None),
    "weight_decay_rate": ("weight_decay", None),
    "momentum": ("momentum", None),
    "betas": ("betas", None),
    "beta1": ("betas", 0),
    "beta2": ("betas", 1),
}


def _optimizer_block(config: dict) -> tuple[tuple[str, ...], dict]:
    """(key path, arguments) of a config's optimizer block, in either layout."""
    if "trainer" in config:
        ((name, args),) = config["trainer"]["init"]["optimizer"].items()
        return ("trainer", "init", "optimizer", name), args or {}
    return ("optimizer",), {k: v for k, v in config["optimizer"].items() if k != "optimizer_type"}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.mark.skipif(not CONFIGS, reason=f"no Model Zoo configs at {CONFIGS_DIR} (only on the team's machines)")
def test_no_numeric_optimizer_setting_is_lost_without_a_comment() -> None:
    """Every number of every optimizer block is in the converted optimizer where torch has the argument
    (the source's value, never a default), else mapped elsewhere (trainer.*) or in the file's comments."""
    lost, checked = [], 0
    for path in CONFIGS:
        config, _ = read_yaml(path, "source", same_value_ok=True)
        if isinstance(config.get("trainer"), list):
            continue  # multi-phase: refused as a whole
        converted, report = convert(config, source=str(path))
        text = dump(converted, report)
        comments = "\n".join(line for line in text.splitlines() if line.startswith("# "))
        mapped = {tuple(src) for src, _ in report.mapped}
        prefix, args = _optimizer_block(config)
        ((_torch_name, torch_args),) = converted["optimizer"].items()
        for arg, value in args.items():
            if not (_is_number(value) or (isinstance(value, list) and value and all(map(_is_number, value)))):
                continue
            checked += 1
            target, index = TORCH_ARGUMENT.get(arg, (None, None))
            key = format_key_path((*prefix, arg))
            if target in torch_args:
                got = torch_args[target] if index is None else torch_args[target][index]
                if got != value:
                    lost.append(f"{path.relative_to(CONFIGS_DIR)}: {key}: {value!r} became {target}={got!r}")
            elif (*prefix, arg) not in mapped and f"# {key}: " not in comments:
                lost.append(f"{path.relative_to(CONFIGS_DIR)}: {key}: {value!r} neither converted nor in a comment")
    assert lost == []
    assert checked == 891  # every number of the 294 blocks was seen
