"""The trace check's cache on disk: hits skip the capture, anything changed misses, damage is repaired."""

import argparse
import dataclasses
import enum
import functools
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning_models import Regressor, SkipsFirst, fit
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import cs_lightning
from cs_lightning import CSXStrategy, GraphBreakError, TimeToFirstLoss
from cs_lightning.cache import cache_dir
from cs_lightning.cli import main
from cs_lightning.deferred import mt19937
from cs_lightning.trace_cache import TraceCache, Uncached, _Describer, fingerprint, input_signature

MODEL_SOURCE = """
import torch
from lightning.pytorch import LightningModule
from torch import nn

import user_helper


class Net(LightningModule):
    def __init__(self, clip=False):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.clip = clip

    def forward(self, x):
        y = user_helper.scale(self.layer(x))
        {extra}
        if self.clip:
            y = y.clamp(max=float(y.max()))  # a host read only this setting makes
        return y

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def _write_model(folder: Path, extra: str = "pass", helper: str = "return y") -> Path:
    """user_model.py, and the user_helper.py it imports, in ``folder``."""
    (folder / "user_helper.py").write_text(f"def scale(y):\n    {helper}\n")
    path = folder / "user_model.py"
    path.write_text(MODEL_SOURCE.replace("{extra}", extra))
    return path


def _importable(folder: Path, monkeypatch: pytest.MonkeyPatch, sources: dict[str, str]) -> None:
    """Write each file of ``sources`` (a path under ``folder``, folders made) and put ``folder`` on sys.path."""
    for name, text in sources.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    monkeypatch.syspath_prepend(str(folder))


def _load(path: Path) -> type[LightningModule]:
    """The Net class of freshly written files, as a new process importing them would see it."""
    import importlib.util

    for name in ("user_helper", "user_model"):
        sys.modules.pop(name, None)
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("user_model", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # as an imported module is: its source file can be found
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module.Net


def _fit(net_class: type[LightningModule], rows: int = 8) -> dict[str, float]:
    data = TensorDataset(torch.randn(rows, 4), torch.randn(rows, 1))
    clock = TimeToFirstLoss()
    trainer = Trainer(
        strategy="csx",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock],
    )
    trainer.fit(net_class(), DataLoader(data, batch_size=4))
    return clock.metrics


def test_cache_location_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CS_LIGHTNING_CACHE_DIR", str(tmp_path / "given"))
    assert cache_dir() == tmp_path / "given"
    monkeypatch.delenv("CS_LIGHTNING_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "cs_lightning"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "cs_lightning"


def test_second_run_hits_and_skips_the_capture(tmp_path: Path) -> None:
    net = _load(_write_model(tmp_path))
    first = _fit(net)
    assert "ttfl/trace" in first
    assert len(TraceCache().entries()) == 1
    second = _fit(_load(_write_model(tmp_path)))  # a new process would see the same file
    assert "ttfl/trace" not in second
    assert second["ttfl/loss"] != 0


def test_changed_code_misses_and_a_graph_break_is_caught_despite_a_warm_cache(tmp_path: Path) -> None:
    _fit(_load(_write_model(tmp_path)))
    assert len(TraceCache().entries()) == 1
    broken = _load(_write_model(tmp_path, "y = y * 2 if y.sum() > 0 else y"))
    with pytest.raises(GraphBreakError, match="user_model.py"):
        _fit(broken)
    assert len(TraceCache().entries()) == 1  # a refused step is not remembered


def test_other_input_shapes_miss(tmp_path: Path) -> None:
    net = _load(_write_model(tmp_path))
    _fit(net, rows=8)
    data = TensorDataset(torch.randn(6, 4), torch.randn(6, 1))
    trainer = Trainer(
        strategy="csx",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(net(), DataLoader(data, batch_size=3))
    assert len(TraceCache().entries()) == 2


def test_a_skipped_step_leaves_no_pass_and_the_next_run_checks_the_step_after_it() -> None:
    fit(SkipsFirst(reads=True), "csx", steps=1)  # only the skipped batch ran: it vouches for nothing
    assert TraceCache().entries() == []
    with pytest.raises(GraphBreakError, match="loss.item()"):
        fit(SkipsFirst(reads=True), "csx", steps=2)


class _ManualReturnsNothing(Regressor):
    """Manual optimization: the step makes its own update and returns nothing, as such steps often do."""

    def __init__(self) -> None:
        super().__init__(optimizer="sgd")
        self.automatic_optimization = False

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(super().training_step(batch, batch_idx))
        optimizer.step()


def test_under_manual_optimization_a_step_returning_none_is_a_verdict(caplog: pytest.LogCaptureFixture) -> None:
    """It ran its update under the check: its pass is remembered and the clock reports at its end."""
    with caplog.at_level(logging.INFO):
        fit(_ManualReturnsNothing(), "csx", steps=1)
    assert len(TraceCache().entries()) == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time to first loss")]
    assert len(lines) == 1 and "first loss" not in lines[0].removeprefix("Time to first loss")


@pytest.mark.parametrize("changed", ["torch", "cs_lightning"])
def test_a_version_change_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: str) -> None:
    net = _load(_write_model(tmp_path))
    _fit(net)
    if changed == "torch":
        monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    else:
        monkeypatch.setattr(cs_lightning, "__version__", "999.0")
    assert "ttfl/trace" in _fit(net)
    assert len(TraceCache().entries()) == 2


@pytest.mark.parametrize("damage", [b"", b'{"format": 1, "ke', b"\xff\xfe not json", b'{"format": 1, "key": "other"}'])
def test_a_damaged_entry_warns_once_and_is_rewritten(tmp_path: Path, damage: bytes) -> None:
    net = _load(_write_model(tmp_path))
    _fit(net)
    (entry,) = TraceCache().entries()
    entry.write_bytes(damage)
    with pytest.warns(UserWarning, match="ignoring .*trace check runs again") as caught:
        metrics = _fit(net)
    assert len([w for w in caught if "trace cache" in str(w.message)]) == 1
    assert "ttfl/trace" in metrics
    assert json.loads(entry.read_text())["key"] == entry.stem
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*trace cache.*")
        assert "ttfl/trace" not in _fit(net)


def test_an_unwritable_cache_warns_and_training_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("CS_LIGHTNING_CACHE_DIR", str(blocker))
    with pytest.warns(UserWarning, match="cannot write to"):
        metrics = _fit(_load(_write_model(tmp_path)))
    assert "ttfl/loss" in metrics


def _store_many(folder: str, worker: int) -> None:
    os.environ["CS_LIGHTNING_CACHE_DIR"] = folder
    cache = TraceCache()
    for k in range(50):
        cache.store(f"key{k}", {"worker": worker})


def test_concurrent_writers_leave_whole_entries(tmp_path: Path) -> None:
    folder = str(tmp_path / "shared")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_store_many, args=(folder, w)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join()
        assert process.exitcode == 0
    cache = TraceCache(folder)
    assert [p.name for p in cache.folder.iterdir() if p.name.startswith(".tmp-")] == []
    assert all(cache.hit(f"key{k}") for k in range(50))
    assert {json.loads(p.read_text())["worker"] for p in cache.entries()} <= {0, 1, 2}


def test_cli_cache_info_and_clear(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _fit(_load(_write_model(tmp_path)))
    mt19937._POWERS.clear()  # what this process found: forgotten, as in a fresh one
    mt19937._digits.cache_clear()
    mt19937.advance(torch.get_rng_state(), 40_000_000)  # a jump table found, and kept
    (cache_dir() / "mt19937" / "phi.bin").write_bytes(b"an earlier version's file")  # not a jump table
    assert len(mt19937.stored().files()) == 1  # the power of x (phi ships with the package)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "1 entry" in out and f"jump tables {cache_dir() / 'mt19937'}: 1 file," in out
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 entry from" in out and "removed 1 jump table from" in out
    assert TraceCache().entries() == [] and mt19937.stored().files() == []
    assert main(["cache", "nonsense"]) == 2
    assert "cache: argument action" in capsys.readouterr().err


def test_a_folder_in_an_entrys_place_warns_and_cache_clear_removes_it(tmp_path: Path) -> None:
    net = _load(_write_model(tmp_path))
    _fit(net)
    (entry,) = TraceCache().entries()
    entry.unlink()
    (entry / "inside").mkdir(parents=True)
    with pytest.warns(UserWarning, match="cs-lightning cache clear"):
        _fit(net)
    assert main(["cache", "clear"]) == 0
    assert not entry.exists()
    _fit(net)
    assert entry.is_file()


def test_trace_check_off_neither_reads_nor_writes_the_cache(tmp_path: Path) -> None:
    shutil.rmtree(cache_dir(), ignore_errors=True)
    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    trainer = Trainer(
        strategy=CSXStrategy(trace_check=False),
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(_load(_write_model(tmp_path))(), DataLoader(data, batch_size=4))
    assert not cache_dir().exists()


def test_a_module_global_the_step_branches_on_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same source, a flag read from the environment at import: the source does not hold its value."""
    path = _write_model(tmp_path, extra="if DEBUG:\n            y = y * float(y.sum())")
    source = path.read_text().replace("import user_helper\n", "import user_helper\nimport os\n")
    path.write_text(source + "\nDEBUG = os.environ.get('USER_MODEL_DEBUG') == '1'\n")
    _fit(_load(path))
    monkeypatch.setenv("USER_MODEL_DEBUG", "1")
    with pytest.raises(GraphBreakError, match="user_model.py"):
        _fit(_load(path))


def test_a_changed_helper_module_misses(tmp_path: Path) -> None:
    _fit(_load(_write_model(tmp_path)))
    assert len(TraceCache().entries()) == 1
    with pytest.raises(GraphBreakError, match="user_helper.py"):
        _fit(_load(_write_model(tmp_path, helper="return y * 2 if y.sum() > 0 else y")))


def test_a_file_edited_after_its_import_does_not_vouch_for_the_code_that_runs(tmp_path: Path) -> None:
    """A notebook's kernel runs the code it imported, whatever the file holds now: the key is that code's."""
    good = fingerprint(_load(_write_model(tmp_path))())
    running = _load(_write_model(tmp_path, helper="return y * 2 if y.sum() > 0 else y"))()
    _write_model(tmp_path)  # the file back as it was, the process still running the edit
    assert fingerprint(running) != good
    assert fingerprint(_load(_write_model(tmp_path))()) == good


def test_a_helper_the_step_imports_as_it_runs_is_checked_for_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Imported inside the step, the helper is not loaded when the key is made: the entry keeps its digest."""
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _write_model(tmp_path, extra="from user_lazy import post\n        y = post(y)")
    (tmp_path / "user_lazy.py").write_text("def post(y):\n    return y\n")
    _fit(_load(path))
    (entry,) = TraceCache().entries()
    assert list(json.loads(entry.read_text())["imported"]) == [str(tmp_path / "user_lazy.py")]
    (tmp_path / "user_lazy.py").write_text("def post(y):\n    return y * 2 if y.sum() > 0 else y\n")
    sys.modules.pop("user_lazy")  # as in a new process
    with pytest.raises(GraphBreakError, match="user_lazy.py"):
        _fit(_load(path))


def test_a_global_of_another_user_module_the_step_reads_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "user_flags.py").write_text("import os\nSYNC = os.environ.get('USER_FLAGS_SYNC') == '1'\n")
    path = _write_model(tmp_path, extra="if user_flags.SYNC:\n            y = y * float(y.sum())")
    path.write_text(path.read_text().replace("import user_helper\n", "import user_helper\nimport user_flags\n"))
    sys.modules.pop("user_flags", None)
    _fit(_load(path))
    monkeypatch.setenv("USER_FLAGS_SYNC", "1")
    sys.modules.pop("user_flags", None)
    with pytest.raises(GraphBreakError, match="user_model.py"):
        _fit(_load(path))


def test_a_changed_helper_file_of_the_installed_package_a_model_comes_from_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site-packages" / "their_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import torch\nfrom their_models.util import scale\n\nclass Net(torch.nn.Linear):\n"
        "    def forward(self, x):\n        return scale(super().forward(x))\n"
    )
    (package / "util.py").write_text("def scale(y):\n    return y\n")
    monkeypatch.syspath_prepend(str(package.parent))
    from their_models import Net

    model = Net(2, 2)
    before = fingerprint(model)
    (package / "util.py").write_text("def scale(y):\n    return y * float(y.sum())\n")  # an upgrade
    assert fingerprint(model) != before
    for name in ("their_models", "their_models.util"):
        sys.modules.pop(name)


def test_a_setting_that_switches_a_branch_misses(tmp_path: Path) -> None:
    net = _load(_write_model(tmp_path))
    _fit(net)
    with pytest.raises(GraphBreakError, match="user_model.py"):
        _fit(lambda: net(clip=True))


class Activation(enum.Enum):
    RELU = "relu"
    GELU = "gelu"


@dataclasses.dataclass
class Config:
    activation: str = "relu"
    sizes: tuple = (4, 4)


def _double(x: torch.Tensor, sync: bool = False) -> torch.Tensor:
    return x * 2


class Post:
    def __init__(self, clip: bool) -> None:
        self.clip = clip

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        return y.clamp(max=float(y.max())) if self.clip else y


class Teacher(nn.Module):
    def __init__(self, host_read: bool) -> None:
        super().__init__()
        self.host_read = host_read


@dataclasses.dataclass(slots=True)
class SlotsConfig:
    sync: bool


class PrivateConfig:
    def __init__(self, sync: bool) -> None:
        self._sync = sync


def _notebook_function(body: str) -> object:
    """A function as a notebook cell defines it: a file name that holds no source."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(f"def loss(x):\n    {body}\n", "/tmp/ipykernel_4242/3.py", "exec"), namespace)
    return namespace["loss"]


def test_what_no_file_holds_changes_the_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module's private setting, a function from a notebook cell, data set on a class at run time."""
    model = nn.Sequential(nn.Linear(4, 4))
    before = fingerprint(model)
    model[0]._sync = True
    assert fingerprint(model) != before
    del model[0]._sync
    model[0].loss = _notebook_function("return x")
    first = fingerprint(model)
    model[0].loss = _notebook_function("return x if x.sum() > 0 else -x")
    assert fingerprint(model) != first
    del model[0].loss
    assert fingerprint(model) == before
    unchanged = fingerprint(DataclassModule())
    monkeypatch.setattr(DataclassModule, "debug", True, raising=False)
    assert fingerprint(DataclassModule()) != unchanged


def test_a_hook_registered_on_a_module_changes_the_fingerprint() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    before = fingerprint(model)
    handle = model[0].register_forward_hook(lambda module, args, out: out.sum().item())
    assert fingerprint(model) != before
    handle.remove()
    assert fingerprint(model) == before


CONFIG_MODULE = """
import os
from torch import nn

import installed_flags


class Config:
    HOST_READ = False


class Net(nn.Linear):
    class Block(nn.Module):
        def forward(self, x):
            return x * 2 if NESTED else x

    def forward(self, x):
        return super().forward(x) if Config.HOST_READ or installed_flags.FLAGS.sync else x


NESTED = False
"""


def test_data_the_models_code_reads_elsewhere_changes_the_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config class's attribute, a global a nested class reads, a flag of an installed package's module."""
    installed = tmp_path / "site-packages"
    installed.mkdir()
    (installed / "installed_flags.py").write_text("import types\nFLAGS = types.SimpleNamespace(sync=False)\n")
    (tmp_path / "config_model.py").write_text(CONFIG_MODULE)
    monkeypatch.syspath_prepend(str(installed))
    monkeypatch.syspath_prepend(str(tmp_path))
    import config_model
    import installed_flags

    model = config_model.Net(2, 2)
    seen = [fingerprint(model)]
    for owner, name in ((config_model.Config, "HOST_READ"), (config_model, "NESTED"), (installed_flags.FLAGS, "sync")):
        monkeypatch.setattr(owner, name, True)
        seen.append(fingerprint(model))
    assert len(set(seen)) == 4
    for name in ("config_model", "installed_flags"):
        sys.modules.pop(name)


REBINDS_MODULE = """
import functools
from torch import nn

from their_lib.config import Settings


def plain(x):
    return x


ACT = plain  # rebound from the command line


def deco(fn):  # no functools.wraps: the function it runs is in its closure
    def wrapper(*args):
        return fn(*args)

    return wrapper


@deco
def helper(x):
    return x * 2 if DEBUG else x


class Net(nn.Linear):
    @functools.cached_property
    def slow(self):
        return CACHED

    def forward(self, x):
        return ACT(helper(super().forward(x))) if Settings.HOST_CHECK else x


DEBUG = False
CACHED = False
"""


def test_what_the_models_code_reaches_through_names_changes_the_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A global rebound to another function, one read behind a decorator without functools.wraps or in a
    cached_property, a class-level setting of an installed package's config class (a second review)."""
    installed = tmp_path / "site-packages" / "their_lib"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    (installed / "config.py").write_text("class Settings:\n    HOST_CHECK = False\n")
    (tmp_path / "rebinds_model.py").write_text(REBINDS_MODULE)
    monkeypatch.syspath_prepend(str(installed.parent))
    monkeypatch.syspath_prepend(str(tmp_path))
    import rebinds_model
    from their_lib.config import Settings

    model = rebinds_model.Net(2, 2)
    seen = [fingerprint(model)]
    for owner, name, value in (
        (rebinds_model, "ACT", _double),
        (rebinds_model, "DEBUG", True),
        (rebinds_model, "CACHED", True),
        (Settings, "HOST_CHECK", True),
    ):
        monkeypatch.setattr(owner, name, value)
        seen.append(fingerprint(model))
    assert len(set(seen)) == 5
    for name in ("rebinds_model", "their_lib", "their_lib.config"):
        sys.modules.pop(name)


def test_the_key_holds_the_modules_the_models_code_reaches_not_every_module_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config object's module, reached only through a setting, counts with the globals its code reads; a
    module of the user's that the model never reaches does not (a test suite loads hundreds: with them all in
    the key it outgrew its budget, and the cache was off)."""
    _importable(
        tmp_path,
        monkeypatch,
        {
            "reach_config.py": "FLASH = False\n\nclass Config:\n    def use_flash(self):\n        return FLASH\n",
            "reach_unrelated.py": "DEBUG = False\n\nclass Other:\n    LEVEL = 0\n",
            "reach_model.py": "from torch import nn\n\nclass Net(nn.Linear):\n    def __init__(self, config):\n"
            "        super().__init__(2, 2)\n        self.config = config\n\n    def forward(self, x):\n"
            "        return x * 2 if self.config.use_flash() else x\n",
        },
    )
    import reach_config
    import reach_model
    import reach_unrelated

    model = reach_model.Net(reach_config.Config())
    before = fingerprint(model)
    monkeypatch.setattr(reach_unrelated, "DEBUG", True)
    monkeypatch.setattr(reach_unrelated.Other, "LEVEL", 1)
    assert fingerprint(model) == before
    monkeypatch.setattr(reach_config, "FLASH", True)
    assert fingerprint(model) != before
    for name in ("reach_config", "reach_model", "reach_unrelated"):
        sys.modules.pop(name)


def test_a_module_of_the_users_the_model_does_not_reach_counts_by_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module imported at start may patch what the model runs (`F.gelu = fast_gelu`) without the model's
    code naming it: an edit to it misses."""
    patch = tmp_path / "reach_patches.py"
    patch.write_text("def fast_gelu(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import reach_patches  # noqa: F401 - imported for its effect, as a patch module is

    model = nn.Linear(2, 2)
    before = fingerprint(model)
    patch.write_text("def fast_gelu(x):\n    return x * float(x.sum())\n")
    assert fingerprint(model) != before
    sys.modules.pop("reach_patches")


MADE_MODULE = """
import functools
import os

from torch import nn

ON = os.environ.get("MADE_ON") == "1"  # read at import only: no function names it
WHICH = os.environ.get("MADE_WHICH")


def gate(flag):
    def deco(f):
        @functools.wraps(f)
        def wrapper(x):
            return x * 2 if flag else f(x)

        return wrapper

    return deco


@gate(ON and WHICH == "closure")
def act(x):
    return x


def scale(x, strict=ON and WHICH == "default"):
    return x * 2 if strict else x


def clip(x):
    return x * 2 if clip.strict else x


clip.strict = ON and WHICH == "attribute"


class Net(nn.Linear):
    def forward(self, x):
        return clip(scale(act(super().forward(x))))
"""


@pytest.mark.parametrize("which", ["closure", "default", "attribute"])
def test_what_a_function_was_made_with_changes_the_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """A decorator's closure behind functools.wraps, a default argument, an attribute set on a function: each
    set from a value read at import that no function names (a probe's stale hits)."""
    _importable(tmp_path, monkeypatch, {"made_model.py": MADE_MODULE})
    monkeypatch.setenv("MADE_WHICH", which)
    seen = []
    for on in ("0", "1"):
        monkeypatch.setenv("MADE_ON", on)
        sys.modules.pop("made_model", None)
        import made_model

        seen.append(fingerprint(made_model.Net(2, 2)))
    sys.modules.pop("made_model")
    assert seen[0] != seen[1]


def test_eval_mode_and_a_bound_method_of_a_dict_change_the_fingerprint() -> None:
    """A frozen backbone (`self.block.eval()`) and `self.option = options.get` were read as the same settings."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
    model.option = {"log_norm": False}.get
    seen = [fingerprint(model)]
    model[1].eval()
    seen.append(fingerprint(model))
    model.option = {"log_norm": True}.get
    seen.append(fingerprint(model))
    assert len(set(seen)) == 3


def test_a_numpy_array_of_objects_is_described_by_its_items_not_their_addresses() -> None:
    np = pytest.importorskip("numpy")

    def tags(*words: str) -> object:  # new string objects each call: equal values at other addresses
        return np.array(["".join(["tag-", word]) for word in words], dtype=object)

    assert _Describer()(tags("a", "b")) == _Describer()(tags("a", "b")) != _Describer()(tags("a", "c"))


def test_a_module_failing_when_read_leaves_the_fit_going(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package whose __getattr__ (PEP 562) imports submodules, a proxy global raising on any read: the key
    was read with getattr, and the fit died with ModuleNotFoundError or the proxy's error."""
    _importable(
        tmp_path,
        monkeypatch,
        {
            "lazy_ops/__init__.py": "import importlib\n\ndef __getattr__(name):\n"
            "    return importlib.import_module(f'.{name}', __name__)\n",
            "lazy_ops/double.py": "def double(x):\n    return x * 2\n",
            "lazy_model.py": "from torch import nn\nimport lazy_ops\n\nclass Proxy:\n"
            "    def __getattribute__(self, name):\n        raise RuntimeError('no context')\n\nPROXY = Proxy()\n\n"
            "class Net(nn.Linear):\n    def forward(self, x):\n"
            "        return lazy_ops.double.double(super().forward(x)) if PROXY else x\n",
        },
    )
    import lazy_model

    try:
        assert fingerprint(lazy_model.Net(2, 2))
    except Uncached as why:  # a check at every fit is the worst a module may cost
        assert "no context" in str(why)
    for name in ("lazy_model", "lazy_ops", "lazy_ops.double"):
        sys.modules.pop(name, None)


REVIEWED_MODULE = """
from torch import nn

import rev_flags


class deco:  # a class-based decorator: `act` is this object, keeping the function
    def __init__(self, f):
        self.f = f

    def __call__(self, x):
        return self.f(x)


@deco
def act(x):
    return x * 2 if rev_flags.STRICT else x


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.strict = False

    def forward(self, x):
        return x * 2 if self.strict else x


GATE = Gate()  # kept at module level, not in the model


def make(width):  # classes of one name, in no fixed order
    class Block:
        cfg = [width]

    return Block


A, B = make(1), make(2)
SHARED = [3]
TABLE = dict.fromkeys({"q", "k", "v", "o"}, SHARED)  # in the set's order, which varies by process


def helper(x):
    return x


helper.__wrapped__ = helper  # a cycle inspect.unwrap refuses


class Net(nn.Linear):
    def forward(self, x):
        y = GATE(act(helper(super().forward(x))))
        return y * A.cfg[0] * B.cfg[0] * TABLE["q"][0]


Net.forward.__wrapped__ = Net.forward
"""


def _reviewed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    _importable(tmp_path, monkeypatch, {"rev_flags.py": "STRICT = False\n", "rev_model.py": REVIEWED_MODULE})
    for name in ("rev_flags", "rev_model"):
        sys.modules.pop(name, None)
    import rev_model

    return rev_model


def test_a_class_based_decorator_and_a_module_level_module_are_in_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review's stale hits: a flag read inside a function a decorator object keeps, a setting of an
    nn.Module kept as a module global; wrapper cycles (`f.__wrapped__ = f`) hung the key or failed the fit."""
    model_module = _reviewed(tmp_path, monkeypatch)
    model = model_module.Net(2, 2)
    seen = [fingerprint(model)]
    monkeypatch.setattr(sys.modules["rev_flags"], "STRICT", True)
    seen.append(fingerprint(model))
    monkeypatch.setattr(model_module.GATE, "strict", True)
    seen.append(fingerprint(model))
    assert len(set(seen)) == 3


class _BaseFailure(BaseException):
    """Raised by a proxy on any read: not an Exception, as pytest's own outcomes are not."""


class _Proxy:
    def __getattribute__(self, name: str) -> Any:
        raise _BaseFailure(name)


def test_a_proxy_raising_a_base_exception_leaves_the_check_uncached_not_the_fit_failed() -> None:
    model = nn.Linear(2, 2)
    model.__dict__["context"] = _Proxy()  # nn.Module.__setattr__ would read it
    with pytest.raises(Uncached, match="reading one of its settings failed"):
        fingerprint(model)


def test_a_module_kept_under_an_alias_ends_the_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config class whose __module__ names an alias in sys.modules made the search for held modules loop."""
    _importable(tmp_path, monkeypatch, {"rev_cfg.py": "class Cfg:\n    flag = False\n"})
    import rev_cfg

    monkeypatch.setitem(sys.modules, "rev_cfg_alias", rev_cfg)
    monkeypatch.setattr(rev_cfg.Cfg, "__module__", "rev_cfg_alias")
    model = nn.Linear(2, 2)
    model.cfg = rev_cfg.Cfg()
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(fingerprint(model)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert done
    sys.modules.pop("rev_cfg")


def test_the_key_is_the_same_in_processes_of_other_hash_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Classes of one name and a dict filled from a set were described in an order that varied by process."""
    _reviewed(tmp_path, monkeypatch)
    script = (
        "import rev_model\nfrom cs_lightning.trace_cache import fingerprint\nprint(fingerprint(rev_model.Net(2, 2)))\n"
    )
    keys = set()
    for seed in ("1", "2", "3"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": seed,
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
        keys.add(run.stdout.split()[-1])
    assert len(keys) == 1


def test_a_lazily_imported_module_is_neither_loaded_nor_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """importlib.util.LazyLoader's module loads on any attribute read: reading its __file__ ran an optional
    dependency's failing import, which failed the fit."""
    import importlib.util

    (tmp_path / "optional_dep.py").write_text("raise ImportError('optional_dep is not installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.find_spec("optional_dep")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    lazy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "optional_dep", lazy)
    spec.loader.exec_module(lazy)
    assert fingerprint(nn.Linear(2, 2))


def test_a_module_hook_for_every_module_changes_the_fingerprint() -> None:
    model = nn.Linear(2, 2)
    before = fingerprint(model)
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out.sum().item())
    try:
        assert fingerprint(model) != before
    finally:
        handle.remove()


def test_a_description_holds_no_address_nor_a_sets_order() -> None:
    """Either differs from run to run: the key would never be found again."""
    describe = _Describer()
    text = describe({"gain": {nn.functional.gelu: 1.7, _double: 1.4}, "stop": {f"w{i}" for i in range(300)}})
    assert " at 0x" not in text
    words, backwards = [f"w{i}" for i in range(300)], set()
    for word in reversed(words):  # the same set, another iteration order (its slots fill differently)
        backwards.add(word)
    assert repr(set(words)) != repr(backwards)
    assert _Describer()(set(words)) == _Describer()(backwards)


def test_an_object_many_modules_hold_is_described_once() -> None:
    """A model library's config in each of 1000 blocks took 0.75 s, writing its text 1000 times."""
    config = argparse.Namespace(**{f"field{i}": [i] for i in range(400)})
    describe = _Describer()
    assert "field399" in describe([config])
    again = describe([config])
    assert again.startswith("builtins.list[<as #") and len(again) < 40


def test_a_deep_structure_is_described_in_linear_space() -> None:
    """Descriptions nested by repr() escaped every quote once more per level: 2**depth characters, which
    filled 24 GB in the test suite."""
    deep: object = "leaf"
    for _ in range(20):  # 2**20 characters before: a failure here stays small
        deep = [deep]
    assert len(_Describer()(deep)) < 1000


def test_a_closure_holding_itself_is_described() -> None:
    def walk(n: int) -> int:
        return n if n == 0 else walk(n - 1)

    model = nn.Linear(2, 2)
    model.walk = walk
    assert fingerprint(model)


def test_a_setting_too_large_to_describe_or_failing_when_read_leaves_the_model_always_checked() -> None:
    model = nn.Linear(4, 4)
    model.samples = [{"text": str(i)} for i in range(100_000)]  # a dataset held on the model
    with pytest.raises(Uncached, match="more than 200,000 values .* fix: keep data on the DataModule"):
        fingerprint(model)
    model.samples = LazyMapping(size=3)  # its items are read when used: never a crash here
    with pytest.raises(Uncached, match="reading one of its settings failed .*not loaded yet"):
        fingerprint(model)


class LazyMapping(dict):
    def items(self) -> None:
        raise RuntimeError("not loaded yet")


def test_a_batch_object_torch_does_not_flatten_counts_by_its_tensors_shapes() -> None:
    assert input_signature((SlotsConfig(torch.zeros(16, 4)), 0)) == input_signature((SlotsConfig(torch.ones(16, 4)), 7))
    assert input_signature((SlotsConfig(torch.zeros(16, 4)), 0)) != input_signature(
        (SlotsConfig(torch.zeros(32, 4)), 0)
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Activation.RELU, Activation.GELU),
        (Config(), Config(activation="gelu")),
        (torch.relu, _double),
        ([4, 4], [4, 8]),
        ({"norm": "layer"}, {"norm": "batch"}),
        (argparse.Namespace(depth=2), argparse.Namespace(depth=3)),
        # a config nested deeper than a few levels, in slots, behind a partial, private: all read
        ({"a": {"b": {"c": {"d": {"debug": False}}}}}, {"a": {"b": {"c": {"d": {"debug": True}}}}}),
        (SlotsConfig(sync=False), SlotsConfig(sync=True)),
        (functools.partial(_double, sync=False), functools.partial(_double, sync=True)),
        (PrivateConfig(False), PrivateConfig(True)),
        (list(range(300)), [*range(299), 0]),  # long: hashed whole
        (np.zeros(3), np.ones(3)),
        (Post(clip=False).apply, Post(clip=True).apply),  # a bound method: its object configures it
        ([Teacher(host_read=False)], [Teacher(host_read=True)]),  # a module kept outside the tree
    ],
)
def test_any_setting_a_forward_may_branch_on_changes_the_fingerprint(first: object, second: object) -> None:
    def fingerprint_with(setting: object) -> str:
        model = nn.Sequential(nn.Linear(4, 4))
        model[0].setting = setting  # a plain attribute, as `self.act = act` in a constructor
        return fingerprint(model)

    assert fingerprint_with(first) == fingerprint_with(first)
    assert fingerprint_with(first) != fingerprint_with(second)


def test_a_class_built_by_exec_in_a_script_has_no_fingerprint() -> None:
    """Its module is this file but its methods come from ``<string>``: hashing this file would vouch
    for code it does not hold, so such a model is always checked."""
    namespace = {"__name__": __name__, "nn": nn}
    exec(
        compile("class Exec(nn.Linear):\n    def forward(self, x):\n        return x.relu()\n", "<string>", "exec"),
        namespace,
    )
    with pytest.raises(Uncached, match="class Exec has no source file .* fix: define it in a .py file"):
        fingerprint(namespace["Exec"](4, 4))
    assert fingerprint(nn.Linear(4, 4))


def test_a_fit_says_once_why_its_check_is_not_remembered(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A model defined where no file holds its code is checked at every fit: the user is told why, once."""
    namespace: dict[str, object] = {"__name__": "notebook_cell"}
    exec(compile(MODEL_SOURCE.replace("{extra}", "pass"), "<ipython-input-1>", "exec"), namespace)
    sys.path.insert(0, str(_write_model(tmp_path).parent))  # for its `import user_helper`
    try:
        with caplog.at_level(logging.INFO):
            _fit(namespace["Net"])
            _fit(namespace["Net"])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("user_helper", None)
    told = [r.getMessage() for r in caplog.records if "is not remembered" in r.getMessage()]
    assert told == [
        "cs_lightning trace cache: the check of Net is not remembered, it runs at every fit: class Net has no source"
        " file to hash (defined in `python -c`, a notebook cell or by exec); fix: define it in a .py file"
    ]
    assert TraceCache().entries() == []


@dataclasses.dataclass(eq=False)
class DataclassModule(nn.Module):
    width: int = 4

    def __post_init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(self.width, self.width)


def test_a_dataclass_module_keeps_its_fingerprint() -> None:
    """@dataclass writes __init__ and __repr__ from <string>: those do not make the class unfingerprinted."""
    assert fingerprint(DataclassModule()) == fingerprint(DataclassModule())
    assert fingerprint(DataclassModule()) != fingerprint(DataclassModule(width=8))


SELF_PRINT_DDP = """
import torch, cs_lightning
from torch import nn
from lightning.pytorch import Trainer, LightningModule, seed_everything
from torch.utils.data import DataLoader, TensorDataset


class PrintsLoss(LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.print("loss", loss)  # rank 0 alone formats it
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


seed_everything(0, verbose=False)
data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
Trainer(strategy="csx_ddp", devices=2, accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False).fit(PrintsLoss(), data)
"""


def test_a_read_only_rank_0_makes_is_refused_on_every_run(tmp_path: Path) -> None:
    """Rank 1 passed the check and cached the verdict, so the next run skipped it on every rank."""
    import subprocess

    (tmp_path / "prints_loss.py").write_text(SELF_PRINT_DDP)
    env = {**os.environ, "CS_LIGHTNING_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "prints_loss.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode != 0 and "GraphBreakError" in run.stderr, run.stderr[-2000:]


READ_ON_RANK_1_DDP = SELF_PRINT_DDP.replace(
    'self.print("loss", loss)  # rank 0 alone formats it',
    "if self.global_rank == 1:\n            loss = loss * float(loss)  # rank 1 alone reads it",
)


def test_a_pass_is_not_remembered_when_another_rank_was_refused(tmp_path: Path) -> None:
    """Rank 0 vouched for every rank as soon as its own step passed, so the next run skipped rank 1's check:
    the pass is remembered once the step's update is done, which a refused rank never joins."""
    import subprocess

    assert "float(loss)" in READ_ON_RANK_1_DDP
    (tmp_path / "reads_on_rank_1.py").write_text(READ_ON_RANK_1_DDP)
    env = {**os.environ, "CS_LIGHTNING_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "reads_on_rank_1.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode != 0 and "GraphBreakError" in run.stderr, run.stderr[-2000:]
    assert TraceCache(tmp_path / "cache").entries() == []
