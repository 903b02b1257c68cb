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
