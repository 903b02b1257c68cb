"""Crash and resume: SIGKILL mid-run, resume from "last", end bit-identical to an uninterrupted run."""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from conftest import REPO, flat_state

# 64 samples in batches of 8: 8 steps an epoch; a checkpoint every epoch; 20 steps in all.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Callback, seed_everything
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning_models import Regressor, fit

    mode = sys.argv[1]

    class KillAt(Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 13:
                os.kill(os.getpid(), signal.SIGKILL)

    seed_everything(5)
    model = Regressor(build_in="configure_model", scheduler=True)
    callbacks = [ModelCheckpoint(dirpath="ckpt", every_n_train_steps=8, save_top_k=-1, save_last=True)]
    callbacks += [KillAt()] if mode == "crash" else []
    resume_from = "last" if mode == "resume" else None
    run, _ = fit(model, "csx", steps=20, enable_checkpointing=True, callbacks=callbacks, ckpt_path=resume_from)
    torch.save({{"weights": model.state_dict(), "optimizer": run.optimizers[0].state_dict(),
                "lr": run.optimizers[0].param_groups[0]["lr"], "step": run.global_step}}, f"{{mode}}.pt")
    """
)


def _run(script: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), mode], cwd=script.parent, capture_output=True, text=True, timeout=240
    )


def test_killed_run_resumed_from_last_ends_bit_identical(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tests=str(REPO / "tests")))
    uninterrupted = _run(script, "uninterrupted")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    (tmp_path / "ckpt").rename(tmp_path / "ckpt_uninterrupted")

    crashed = _run(script, "crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["epoch=0-step=8.ckpt", "last.ckpt"]

    resumed = _run(script, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Restoring states from the checkpoint path at" in resumed.stderr

    expected = torch.load(tmp_path / "uninterrupted.pt", weights_only=False)
    actual = torch.load(tmp_path / "resume.pt", weights_only=False)
    assert actual["step"] == expected["step"] == 20
    assert actual["weights"].keys() == expected["weights"].keys()
    assert all(torch.equal(actual["weights"][k], expected["weights"][k]) for k in expected["weights"])
    assert flat_state(actual["optimizer"]) == flat_state(expected["optimizer"])
    assert actual["lr"] == expected["lr"]
