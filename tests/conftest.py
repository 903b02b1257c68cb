"""Every test runs on CPU, from a fixed seed, in its own working directory."""

import os

# Hide any GPU before torch initialises CUDA: the suite is CPU-only by design.
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent

# Shared CI machines are noisy: judge hypothesis examples by value, not by time.
settings.register_profile("cs_lightning", deadline=None, max_examples=25)
settings.load_profile("cs_lightning")


@pytest.fixture(autouse=True)
def _deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed every generator; keep Lightning's logs out of the checkout and start from an empty trace cache."""
    random.seed(0)
    torch.manual_seed(0)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CS_LIGHTNING_CACHE_DIR", str(tmp_path / "cs_lightning_cache"))


_DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")


@pytest.fixture(autouse=True)
def _no_process_group_left() -> Iterator[None]:
    """An in-process csx_ddp/csx_fsdp run (even one refused at its checkpoint) starts a process group
    listening on MASTER_PORT, which Lightning sets in this process's environment: both are ended
    after every test, or a later test's training subprocesses would inherit that port and find it taken."""
    saved = {name: os.environ.get(name) for name in _DISTRIBUTED_ENV}
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


CS_LIGHTNING = Path(sys.executable).with_name("cs-lightning")


def run_cli(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """The installed `cs-lightning` command in a fresh process, as a user runs it."""
    return subprocess.run(
        [str(CS_LIGHTNING), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes), to prove a command changed nothing."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "cs_lightning_cache" not in path.parts
    }


def flat_state(state: object) -> list:
    """A checkpoint's nested state as comparable leaves (tensors as their bytes): equal only bit for bit."""
    if isinstance(state, dict):
        return [(k, flat_state(v)) for k, v in sorted(state.items(), key=lambda item: str(item[0]))]
    if isinstance(state, (list, tuple)):
        return [flat_state(v) for v in state]
    if isinstance(state, torch.Tensor):
        return [str(state.dtype), list(state.shape), state.contiguous().view(-1).view(torch.uint8).tolist()]
    return [state]
