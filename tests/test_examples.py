"""Every example runs from its README command, for a few steps, on the files in the repo."""

from __future__ import annotations

import csv
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO

from cs_lightning.cli import main

EXAMPLES = sorted(p.parent.name for p in (REPO / "examples").glob("*/README.md"))
FEW_STEPS = ["--trainer.max_steps", "3", "--trainer.limit_val_batches", "2", "--trainer.log_every_n_steps", "1"]
SHORTER = {"tiny_gpt": ["--model.init_args.sample_chars", "20"]}  # the full sample costs seconds


def readme_command(example: str) -> list[str]:
    """The example's one-line run command, from its README, with repo paths made absolute."""
    text = (REPO / "examples" / example / "README.md").read_text()
    commands = re.findall(r"```bash\n(cs-lightning [^\n]*)\n```", text)
    assert len(commands) == 1, f"{example}/README.md must hold exactly one run command"
    argv = shlex.split(commands[0])
    assert argv[0] == "cs-lightning"
    return [str(REPO / a) if a.startswith("examples/") else a for a in argv[1:]]


def test_every_example_folder_has_a_readme_config_and_small_data() -> None:
    assert EXAMPLES == ["custom_scheduler", "image_classifier", "tiny_gpt"]
    for folder in (REPO / "examples").iterdir():
        assert (folder / "README.md").is_file() and (folder / "config.yaml").is_file()
        assert all(f.stat().st_size < 1_000_000 for f in folder.iterdir() if f.is_file())


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs_from_its_readme_command(example: str, tmp_path: Path, capfd) -> None:
    assert main(readme_command(example) + FEW_STEPS + SHORTER.get(example, [])) == 0
    out, err = capfd.readouterr()
    assert "Epoch 0: 100%" in out + err  # Lightning's progress bar, on by default
    summary = out.strip().splitlines()[-1]
    assert re.fullmatch(
        r"Done: final train_loss \d+\.\d{4} \| time to first loss \d+\.\d\d s \| "
        r"checkpoint lightning_logs/version_0/checkpoints/epoch=0-step=3\.ckpt",
        summary,
    ), summary
    assert (tmp_path / "lightning_logs/version_0/checkpoints/epoch=0-step=3.ckpt").is_file()
    if example == "tiny_gpt":
        assert (tmp_path / "lightning_logs/version_0/lr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "--- sample ---\nMACBETH.\n" in out


def test_custom_scheduler_is_found_by_name_and_drives_the_learning_rate(tmp_path: Path) -> None:
    assert main(readme_command("custom_scheduler") + FEW_STEPS + ["--trainer.enable_progress_bar", "false"]) == 0
    rows = list(csv.DictReader((tmp_path / "lightning_logs/version_0/metrics.csv").open()))
    logged = {int(r["step"]): float(r["lr-AdamW"]) for r in rows if r.get("lr-AdamW")}
    # The YAML's WSD schedule: warmup 0 -> 3e-3 over 20 steps, so 1.5e-4 per step at first.
    assert logged == pytest.approx({0: 0.0, 1: 1.5e-4, 2: 3.0e-4}, rel=1e-6)
    module = sys.modules["warmup_stable_decay"]
    probe = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = module.WarmupStableDecayLR(
        probe, peak_learning_rate=3e-3, warmup_steps=20, decay_steps=60, total_iters=230
    )
    assert [logged[k] for k in range(3)] == schedule.values(range(3))[:, 0].tolist()


def test_custom_scheduler_refuses_its_bad_values_in_one_line(tmp_path: Path, capfd) -> None:
    """Its UsageError is said as the catalogue's refusals are: one line, exit code 2, nothing written."""
    example = REPO / "examples" / "custom_scheduler"
    config = yaml.safe_load((example / "config.yaml").read_text())
    config["imports"] = [str(example / module) for module in config["imports"]]
    config["schedulers"][0]["WarmupStableDecayLR"]["warmup_steps"] = 0
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    assert main(["fit", "--config", "run.yaml"]) == 2
    out, err = capfd.readouterr()
    assert (out, err) == (
        "",
        "cs-lightning: error: schedulers[0].WarmupStableDecayLR: WarmupStableDecayLR: got warmup_steps=0, "
        "decay_steps=60, total_iters=230; need warmup_steps >= 1, decay_steps >= 1 and warmup_steps + "
        "decay_steps <= total_iters; fix: correct the value\n",
    )
    assert [p.name for p in tmp_path.iterdir()] == ["run.yaml"]


def test_the_config_saved_with_a_run_reruns_from_another_directory(tmp_path: Path, monkeypatch) -> None:
    """Relative imports: entries are saved as absolute paths, so the saved config stands alone."""
    quiet = [*FEW_STEPS, "--trainer.enable_progress_bar", "false", "--trainer.limit_val_batches", "0"]
    assert main(readme_command("custom_scheduler") + quiet) == 0
    saved = tmp_path / "lightning_logs/version_0/config.yaml"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["fit", "--config", str(saved), *quiet]) == 0

    def losses(root: Path) -> list[str]:
        rows = csv.DictReader((root / "lightning_logs/version_0/metrics.csv").open())
        return [r["train_loss"] for r in rows if r.get("train_loss")]

    assert len(losses(tmp_path)) == 3
    assert losses(tmp_path / "elsewhere") == losses(tmp_path)


def test_tiny_gpt_runs_sharded_over_two_processes(tmp_path: Path) -> None:
    # Lightning starts the second process by running this command again: a script, not main() in pytest
    script = tmp_path / "fit.py"
    script.write_text("import sys\nfrom cs_lightning.cli import main\nsys.exit(main())\n")
    argv = readme_command("tiny_gpt") + FEW_STEPS + SHORTER["tiny_gpt"]
    argv += ["--trainer.strategy", "csx_fsdp", "--trainer.devices", "2", "--trainer.enable_progress_bar", "false"]
    run = subprocess.run(
        [sys.executable, str(script), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"Done: final train_loss \d+\.\d{4} \| time to first loss \d+\.\d\d s \| "
        r"checkpoint lightning_logs/version_0/checkpoints/epoch=0-step=3\.ckpt",
        summary,
    ), summary
    assert (tmp_path / "lightning_logs/version_0/checkpoints/epoch=0-step=3.ckpt").is_dir()  # sharded: a folder
    assert "the whole model is one sharded group" not in run.stderr  # block by block: its blocks are a ModuleList
    assert "--- sample ---\nMACBETH.\n" in run.stdout
