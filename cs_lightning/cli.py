"""`cs-lightning`: one YAML file runs a training.

``cs-lightning fit|validate|test|predict --config run.yaml`` is Lightning's own
``LightningCLI`` (every trainer option, ``--print_config``, several ``--config`` files),
with four top-level keys added:

* ``optimizer:`` one optimizer, as ``{AdamW: {lr: 3.0e-4}}`` (Cerebras Model Zoo) or
  ``{class_path: torch.optim.AdamW, init_args: {...}}`` (Lightning);
* ``schedulers:`` a list of closed-form schedulers in either spelling, e.g.
  ``[{SequentialLR: {schedulers: [{LinearLR: {...}}, {CosineDecayLR: {...}}]}}]``;
  each one steps every optimizer step;
* ``param_groups:`` parameters, by tag and globs on their names, that get a param group of
  their own with an ``adjust_learning_rate`` that ``ScalePerParamLR`` multiplies in (muP's
  per-layer scales; `cs_lightning.param_groups`);
* ``imports:`` modules to import before anything is resolved: dotted module names, or
  ``.py`` files relative to the YAML file that lists them. This is how a model class or a
  custom scheduler living next to the config is found by name.

Both blocks are checked completely before anything is built or written, and become
factories that run in ``configure_optimizers``, after the model is materialized.
``cs-lightning schedule --config run.yaml`` draws or tabulates the configured schedules
without building the model; ``cs-lightning convert modelzoo.yaml -o run.yaml`` turns a
Cerebras Model Zoo config into such a file (`cs_lightning.convert`). Any mistake in the
configuration ends the program with one line naming the YAML key path and the fix, and
exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import logging
import os
import pickletools
import re
import signal
import sys
import threading
import time
import traceback
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MethodType
from typing import Any, NoReturn

import torch
from lightning.fabric.utilities.load import _METADATA_FILENAME
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.model_helpers import is_overridden

from cs_lightning import param_groups
from cs_lightning import schedulers as cs_schedulers
from cs_lightning.cache import cache_dir, cache_variable, write_atomic
from cs_lightning.config_blocks import load_yaml, read_yaml
from cs_lightning.errors import ConfigError, CSLightningError, GraphBreakError, KeyPath, ParamGroupTagsError
from cs_lightning.optimizers import OptimizerFactory, optimizer_factory
from cs_lightning.schedulers.registry import named_tags
from cs_lightning.time_to_first_loss import TimeToFirstLoss

SchedulersFactory = Callable[[torch.optim.Optimizer], list]

# --------------------------------------------------------------------------- imports


def _load_yaml(path: str | Path, key: KeyPath | str = "config") -> dict[str, Any]:
    """One YAML config file as a dict of top-level keys (`config_blocks.read_yaml` reads it)."""
    path = Path(path)
    data, _ = read_yaml(path, key)
    if not isinstance(data, dict):
        what = "nothing" if data is None else type(data).__name__
        raise ConfigError(
            key,
            f"{str(path)!r} holds {what}, not a mapping of keys; "
            "fix: write top-level keys such as model:, trainer:, optimizer:",
        )
    return data


def _import_entry(entry: str, base: Path, key: KeyPath) -> str:
    """Import a dotted module, or a `.py` file relative to `base` under its file stem.

    Returns the entry as it can be imported from anywhere: the module name, or the file's
    absolute path (the config Lightning saves with the run then works from any directory).
    """
    fix = f"fix: give a dotted module name or a .py path relative to {base}"
    if not entry.endswith(".py"):
        _run_user_module(lambda: importlib.import_module(entry), entry, key, fix)
        return entry
    path = (base / entry).resolve()
    if not path.is_file():
        raise ConfigError(key, f"cannot import {entry!r}: no file {str(path)!r}; {fix}")
    loaded = sys.modules.get(path.stem)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path:
            return str(path)
        raise ConfigError(
            key,
            f"{entry!r} would be imported as module {path.stem!r}, which is already "
            f"{getattr(loaded, '__file__', None) or 'a built-in module'}; fix: rename the file",
        )
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:  # a file without the .py loader: not one to run
        raise ConfigError(key, f"cannot import {entry!r}: Python has no loader for it; {fix}")
    module, loader = importlib.util.module_from_spec(spec), spec.loader
    sys.modules[path.stem] = module
    try:
        _run_user_module(lambda: loader.exec_module(module), entry, key, fix)
    except BaseException:
        del sys.modules[path.stem]
        raise
    return str(path)


def _run_user_module(run: Callable[[], object], entry: str, key: KeyPath, fix: str) -> None:
    """Run the import of the user's module; its failure becomes one line saying where."""
    try:
        run()
    except (ImportError, SyntaxError) as err:
        raise ConfigError(key, f"cannot import {entry!r}: {err}; {fix}") from None
    except Exception as err:  # noqa: BLE001 - the user's module failed while running: say where, as one line
        raise ConfigError(
            key, f"importing {entry!r} raised {type(err).__name__}: {err}{_where(err)}; fix: correct that module"
        ) from None


def _where(err: BaseException) -> str:
    """` (file.py, line N)` of the innermost frame of a traceback, or nothing."""
    frames = traceback.extract_tb(err.__traceback__)
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def _option_values(argv: Sequence[str], *names: str) -> list[str]:
    """The values given to any of the options `names` in `argv` (`--opt v` or `--opt=v`), in order."""
    values = []
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.split("=", 1)[0] in names and "=" in arg:
            values.append(arg.split("=", 1)[1])
    return values


def _entries(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(entry) for entry in value or []]


def _run_imports(argv: Sequence[str]) -> dict[str, str]:
    """Import every `imports:` entry, before parsing resolves names; map each entry to its import.

    Entries come from each `--config` file (paths relative to that file) and from
    `--imports` on the command line (relative to the working directory).
    """
    done = {}
    for path in map(Path, _option_values(argv, "--config", "-c")):
        if not path.is_file():
            continue  # the parser reports the missing file with its own key
        for i, entry in enumerate(_entries(_load_yaml(path).get("imports"))):
            done[entry] = _import_entry(entry, path.parent, ("imports", i))
    for value in _option_values(argv, "--imports", "--imports+"):
        for i, entry in enumerate(_entries(load_yaml(value))):
            done[entry] = _import_entry(entry, Path.cwd(), ("imports", i))
    return done


# ------------------------------------------------------------------------ schedulers


def _schedulers_factory(
    spec: Any, make_optimizer: OptimizerFactory, any_tags: bool, tagged: list[param_groups.TaggedGroup]
) -> SchedulersFactory:
    """Validate a `schedulers:` block now, on a throwaway optimizer; return `optimizer -> list`.

    The throwaway optimizer has the groups that the `optimizer:` and `param_groups:` blocks
    build (the untagged one unless a glob tags every parameter, one per `tagged` entry), or,
    with `any_tags` (drawing a schedule needs no model), one more group per other tag the
    block names. `build` reads both spellings and raises `ConfigError`s at the key path
    (`schedulers[0].SequentialLR...`, `schedulers[0].init_args...`).
    """
    try:
        probe = param_groups.probe(tagged, named_tags(spec) if any_tags else ())
        built = cs_schedulers.build(spec, make_optimizer(probe))
    except ParamGroupTagsError as err:
        fix = (
            f"fix: use a tag of the param_groups: block ({', '.join(entry.tag for entry in tagged)}) or add an entry"
            if tagged
            else "the optimizer: block puts every parameter in one untagged group; fix: remove param_group_tags, "
            "add a param_groups: block, or build tagged groups and these schedulers in configure_optimizers"
        )
        raise err.with_fix(fix) from None
    scaling = [i for i, scheduler in enumerate(built) if _scales_per_group(scheduler)]
    if scaling and not any_tags and not tagged:
        raise ConfigError(
            ("schedulers", scaling[0]),
            "ScalePerParamLR multiplies in each param group's "
            "'adjust_learning_rate' (muP's per-layer scales), but the optimizer: block puts every "
            "parameter in one group without it, so it would scale nothing; fix: add a param_groups: "
            "block naming those parameters and their adjust_learning_rate, or build the groups and "
            "these schedulers in configure_optimizers",
        )
    if not scaling:
        _refuse_unapplied_scales(tagged)

    def build(optimizer: torch.optim.Optimizer) -> list:
        return cs_schedulers.build(spec, optimizer)

    return build


def _scales_per_group(scheduler: Any) -> bool:
    """Whether a scheduler is, or composes, a ScalePerParamLR/WD."""
    if isinstance(scheduler, (cs_schedulers.ScalePerParamLR, cs_schedulers.ScalePerParamWD)):
        return True
    children = getattr(scheduler, "schedulers", None) or [getattr(scheduler, "scheduler", None)]
    return any(_scales_per_group(child) for child in children if child is not None)


def _refuse_unapplied_scales(tagged: list[param_groups.TaggedGroup]) -> None:
    """A group's adjust_learning_rate counts only under ScalePerParamLR: without one it would be ignored."""
    entry = param_groups.scaled_entry(tagged)
    if entry is not None:
        raise ConfigError(
            (*entry.key, "adjust_learning_rate"),
            f"{entry.scale} is multiplied into the schedule by ScalePerParamLR, and no scheduler in "
            "schedulers: is one, so it would be ignored; fix: wrap the schedule as "
            "schedulers: [{ScalePerParamLR: {scheduler: {...}}}]",
        )


def _run_factories(
    config: Mapping[str, Any], any_tags: bool = False
) -> tuple[OptimizerFactory | None, SchedulersFactory | None]:
    """The optimizer and scheduler factories of a parsed config, fully validated (`any_tags`:
    as in `_schedulers_factory`)."""
    optimizer_spec, scheduler_spec = config.get("optimizer"), config.get("schedulers")
    tagged = param_groups.parse(config.get("param_groups"))
    make_optimizer = optimizer_factory(optimizer_spec) if optimizer_spec is not None else None
    if make_optimizer is None and (tagged or scheduler_spec not in (None, [])):
        raise ConfigError(
            "param_groups" if tagged else "schedulers",
            f"{'param groups' if tagged else 'schedulers'} need an optimizer to act on; "
            "fix: add an optimizer: block such as {AdamW: {lr: 0.001}}",
        )
    if scheduler_spec in (None, []):
        _refuse_unapplied_scales(tagged)
        return make_optimizer, None
    assert make_optimizer is not None  # refused above
    return make_optimizer, _schedulers_factory(scheduler_spec, make_optimizer, any_tags, tagged)


def _attach_optimizers(
    model: LightningModule,
    make_optimizer: OptimizerFactory,
    make_schedulers: SchedulersFactory | None,
    tagged: list[param_groups.TaggedGroup],
) -> None:
    """Give `model` a `configure_optimizers` that builds from the factories when Lightning calls it.

    Lightning calls it after the strategy has materialized the model, so the optimizer
    sees the real parameters, grouped by the `param_groups:` entries `tagged`. Closed-form
    schedulers step every optimizer step.
    """

    def configure_optimizers(self: LightningModule) -> Any:
        trainable = param_groups.trainable(self)
        optimizer = make_optimizer(param_groups.split(trainable, tagged) if tagged else [p for _, p in trainable])
        if make_schedulers is None:
            return optimizer
        return [optimizer], [cs_schedulers.lightning_config(s) for s in make_schedulers(optimizer)]

    if _has_own_optimizers(model):
        warnings.warn(
            f"{type(model).__name__}.configure_optimizers is replaced by the YAML optimizer: block", stacklevel=2
        )
    # this one model's method, on purpose: the YAML blocks replace what its class defines
    model.configure_optimizers = MethodType(configure_optimizers, model)  # type: ignore[method-assign]


def _has_own_optimizers(model: LightningModule) -> bool:
    return type(model).configure_optimizers is not LightningModule.configure_optimizers


# ------------------------------------------------------------------------ checkpoints

# ckpt_path values Lightning resolves itself, not file paths.
_LIGHTNING_CHECKPOINTS = ("best", "last", "hpc")


# What a sharded checkpoint folder holds (Lightning's ModelParallelStrategy, under csx_fsdp):
# torch.distributed.checkpoint's index of the shards, and Lightning's torch.save of the rest.
_SHARD_INDEX, _SHARDED_REST = ".metadata", _METADATA_FILENAME


def _check_checkpoint(value: str, strategy: Any = None) -> None:
    """Refuse a `ckpt_path` that is no Lightning checkpoint, before anything is built or written.

    A file is read as far as the archive's index and its small pickle of names (torch.save
    writes a zip archive whose tensors are separate members), never the tensors: cheap for any
    size. A folder must be a sharded checkpoint (csx_fsdp's default): the same reading of its
    `meta.pt`, the shards' index and shards next to it, and a ``strategy`` that reads one.
    """
    if value in _LIGHTNING_CHECKPOINTS or value.startswith("registry") or "://" in value:
        return
    fix = (
        "fix: give a .ckpt file that Lightning saved, or a sharded checkpoint folder (csx_fsdp's, holding "
        f"{_SHARD_INDEX} and {_SHARDED_REST}), or leave ckpt_path out"
    )
    path = Path(value)
    if path.is_dir():
        missing = [name for name in (_SHARD_INDEX, _SHARDED_REST) if not (path / name).is_file()]
        if missing:
            raise ConfigError(
                "ckpt_path",
                f"{value!r} is a folder but not a sharded checkpoint (it has no {' and no '.join(missing)}); {fix}",
            )
        _pickled_names(path / _SHARDED_REST, fix)  # the rest of the state must be readable too
        if not any(path.glob("*.distcp")):
            raise ConfigError("ckpt_path", f"{value!r} is a sharded checkpoint without its shards (*.distcp); {fix}")
        if not _reads_sharded(strategy):
            raise ConfigError(
                "ckpt_path",
                f"{value!r} is a sharded checkpoint, which trainer.strategy {_strategy_name(strategy)!r} cannot read;"
                " fix: resume it with trainer.strategy: csx_fsdp, or give a single-file checkpoint (csx_fsdp writes"
                " one with state_dict_type='full')",
            )
        return
    if not path.is_file():
        raise ConfigError("ckpt_path", f"{value!r} does not exist; {fix}")
    if "state_dict" not in _pickled_names(path, fix):
        raise ConfigError("ckpt_path", f"{value!r} is not a Lightning checkpoint (it has no 'state_dict'); {fix}")


def _strategy_name(strategy: Any) -> str:
    """How the config names its strategy: "csx_fsdp", a class path, or the object's class."""
    if strategy is None or isinstance(strategy, str):
        return str(strategy or "auto")
    return str(getattr(strategy, "class_path", None) or type(strategy).__name__)


def _reads_sharded(strategy: Any) -> bool:
    """Whether the strategy loads torch.distributed.checkpoint folders (csx_fsdp, Lightning's
    ModelParallelStrategy and FSDPStrategy, DeepSpeed); csx, csx_ddp and auto read files only."""
    name = _strategy_name(strategy).lower().replace("_", "")
    return any(kind in name for kind in ("fsdp", "modelparallel", "deepspeed"))


def _pickled_names(path: Path, fix: str) -> set[str]:
    """The strings in the pickle of a torch.save archive (its keys, among others), tensors unread."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [name for name in archive.namelist() if name.endswith("data.pkl")]
            if not pickles:
                return set()
            return {arg for _, arg, _ in pickletools.genops(archive.read(pickles[0])) if isinstance(arg, str)}
    except (zipfile.BadZipFile, ValueError, EOFError):  # not a zip, cut short, or a damaged pickle
        raise ConfigError(
            "ckpt_path",
            f"{str(path)!r} is not a checkpoint, or is cut short: it is not the zip archive torch.save writes; {fix}",
        ) from None


def _model_arguments(config: Any) -> dict[str, Any]:
    """The model's init_args in a parsed config, as a plain dict."""
    model = config.get("model") if config is not None else None
    init_args = model.get("init_args") if model is not None and hasattr(model, "get") else None
    return dict(vars(init_args)) if init_args is not None and hasattr(init_args, "__dict__") else {}


# ----------------------------------------------------------------------- error lines

_NOISE = re.compile(r"^(Does not validate against|Subtypes:|Errors:|Expected a <class 'NoneType'>|Given value)")


def _flatten(message: str) -> str:
    """jsonargparse's nested report -> its informative lines, joined on one line."""
    lines = [line.strip().lstrip("- ").strip() for line in message.splitlines()]
    return " ".join(line for line in lines if line and not _NOISE.match(line))


def _parser_error(message: str) -> ConfigError:
    """An argparse/jsonargparse error message -> a `ConfigError` at the key it names, with a fix."""
    unknown = re.search(r"does not accept option '([^']+)'", message) or re.search(
        r"[Uu]nrecognized arguments: (\S+)", message
    )
    if unknown:
        return ConfigError(
            _dotted(unknown.group(1)),
            "unknown key; fix: remove it or correct its spelling (see cs-lightning fit --help)",
        )
    required = re.search(r"arguments are required: (?:\w+\.)?(\S+)", message)
    if required:
        return ConfigError(
            _dotted(required.group(1)), f"missing; fix: add a {required.group(1)}: block (class_path: ...)"
        )
    if "subcommand" in message:
        given = re.search(r"invalid choice: '([^']*)'", message)
        problem = f"unknown command {given.group(1)!r}" if given else "no command given"
        # Lightning's message lists its own commands only: name every one, and how to start
        lightning = "|".join(LightningCLI.subcommands())
        return ConfigError(
            (),
            f"{problem}; fix: cs-lightning {lightning} --config run.yaml, or cs-lightning "
            f"{'|'.join(_OWN_COMMANDS)} (each takes --help)",
        )
    keyed = re.match(r'Parser key "([^"]+)":\s*(.*)', message, flags=re.DOTALL)
    if not keyed:
        return ConfigError((), f"{_flatten(message)}; fix: see cs-lightning --help")
    key, detail = _dotted(keyed.group(1)), _flatten(keyed.group(2))
    if key == ("config",):
        return ConfigError(key, f"{detail}; fix: check the path given to --config")
    class_problem = re.match(r"Problem with given class_path '([^']+)':\s*(.*)", detail)
    if not class_problem:
        return _type_error(key, keyed.group(2)) or ConfigError(key, f"{detail}; fix: correct this value")
    class_path, problem = class_problem.groups()
    option = re.search(r"Option '([^']+)' is not accepted", problem)
    if option:
        return ConfigError(
            (*key, "init_args", option.group(1)),
            f"{class_path} has no such argument; fix: remove it or correct its spelling",
        )
    return ConfigError(
        (*key, "class_path"),
        f"cannot load {class_path!r} ({problem}); "
        "fix: check the dotted path, and list the module or .py file under imports:",
    )


_TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _type_error(key: KeyPath, report: str) -> ConfigError | None:
    """jsonargparse's "Expected a <class 'int'>" for a plain-typed value, said in words, or None."""
    expected = set(re.findall(r"Expected a <class '(\w+)'>", report)) - {"NoneType"}
    if expected == {"int", "float"}:
        expected = {"float"}  # either one: a number
    given = re.search(r"(?:Got value|Given value): (.*)", report)
    if len(expected) != 1 or not expected <= _TYPE_NAMES.keys() or given is None:
        return None
    (name,) = expected
    wanted, value = _TYPE_NAMES[name], given.group(1).strip()
    fix = f"write {wanted}"
    with contextlib.suppress(ValueError, OverflowError):
        if name == "int" and float(value).is_integer():  # 1.0e9 in YAML is a float
            fix += f", e.g. {int(float(value))}"
    return ConfigError(key, f"expected {wanted}, got {value!r}; fix: {fix}")


def _dotted(key: str) -> KeyPath:
    """A key as jsonargparse names it (`trainer.max_steps`: it has no list indices) as a key path."""
    return tuple(key.split("."))


def _instantiation_error(config: Mapping[str, Any], err: Exception) -> ConfigError:
    """A model/data constructor failed: say which key, from the class_path in the report."""
    text = _flatten(str(err))
    for key in ("model", "data"):
        class_path = config.get(f"{key}.class_path") if config.get(key) else None  # jsonargparse Namespace
        if class_path and class_path in str(err):
            return ConfigError(
                (key, "init_args"),
                f"{class_path.rsplit('.', 1)[-1]} failed to build: {text.split(' Given value')[0]}; "
                f"fix: correct {key}.init_args",
            )
    return ConfigError("trainer", f"{type(err).__name__}: {text}; fix: correct the trainer: block")


# ------------------------------------------------------------------------------- CLI


class _HeldRecords(logging.Filter):
    """Hold a logger's records back until `stop()`; `replay()` then logs them.

    Seeding logs "Seed set to N" before the model is built; when building then fails on a
    configuration mistake, that line would spoil the one-line error.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.logger = logging.getLogger(name)
        self.records: list[logging.LogRecord] = []
        self.logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def stop(self) -> None:
        self.logger.removeFilter(self)

    def replay(self) -> None:
        for record in self.records:
            self.logger.handle(record)


_DESCRIPTION = "Train from YAML with Lightning, Cerebras-style optimizer:/schedulers: blocks accepted."
# Commands handled before Lightning's parser sees the arguments, so not among its subcommands.
_EPILOG = (
    "more commands: "
    "'cs-lightning convert modelzoo.yaml -o run.yaml [--force]' turns a Cerebras Model Zoo config into "
    "a run.yaml; "
    "'cs-lightning schedule --config run.yaml [--steps N] [--table | --out lr.png [--force]]' shows the "
    "schedules without building the model; "
    "'cs-lightning cache info|clear' shows or empties cs_lightning's cache (trace-check verdicts, jump tables). "
    "Each takes --help."
)


class CSLightningCLI(LightningCLI):
    """LightningCLI with Cerebras-style `optimizer:`/`schedulers:` blocks and an `imports:` key.

    Defaults that differ from LightningCLI: seed 0 (reproducible unless told otherwise), no
    auto-configured optimizer (ours is built after materialization), and parse errors
    raised rather than printed, so `main` can print them as one line.
    """

    def __init__(self, args: Any = None, imported: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        """`imported`: what `_run_imports` returned, so the saved config holds absolute paths."""
        # the clock feeds the Done: line under any strategy; its metrics are logged only when asked
        kwargs.setdefault("trainer_defaults", {"strategy": "csx", "callbacks": [TimeToFirstLoss(log_metrics=False)]})
        kwargs.setdefault("seed_everything_default", 0)
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("parser_kwargs", {"exit_on_error": False, "description": _DESCRIPTION, "epilog": _EPILOG})
        self.make_optimizer: OptimizerFactory | None = None
        self.make_schedulers: SchedulersFactory | None = None
        self.tagged_groups: list[param_groups.TaggedGroup] = []
        self._seed_log: _HeldRecords | None = None
        self._imported = dict(imported or {})
        super().__init__(args=args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # dict/list, not Any: jsonargparse would turn an Any holding class_path into a Namespace.
        parser.add_argument(
            "--optimizer",
            type=dict | str | None,
            default=None,
            help="Optimizer, {Name: {args}} or class_path/init_args; built after the model.",
        )
        parser.add_argument(
            "--schedulers",
            type=list | dict | None,
            default=None,
            help="Closed-form schedulers, Cerebras YAML shapes or class_path/init_args.",
        )
        parser.add_argument(
            "--param_groups",
            type=list | None,
            default=None,
            help="Param groups by tag: [{tag:, params: [globs on parameter names], adjust_learning_rate:}].",
        )
        parser.add_argument(
            "--imports",
            type=list[str] | str | None,
            default=None,
            help="Modules, or .py files relative to the config, imported before parsing.",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then check the optimizer and scheduler blocks before anything is built or written."""
        super().parse_arguments(parser, args)
        config = self.config.get(str(self.config.get("subcommand")), self.config)
        if config.get("imports"):
            config["imports"] = [self._imported.get(e, e) for e in _entries(config["imports"])]
        self.make_optimizer, self.make_schedulers = _run_factories(config)
        self.tagged_groups = param_groups.parse(config.get("param_groups"))
        self._seed_log = _HeldRecords("lightning.fabric.utilities.seed")

    def _parse_ckpt_path(self) -> None:
        """Lightning's: the checkpoint's hyperparameters replace the model arguments of the config.

        Checks the checkpoint first (one line, not torch.load's traceback), reads a sharded folder's
        hyperparameters from its meta.pt, and warns with each model argument the checkpoint
        changes: the checkpoint wins, as in LightningCLI, but not silently.
        """
        config = self.config.get(str(self.config.get("subcommand")))
        if config is None:
            return
        ckpt_path = config.get("ckpt_path")
        if ckpt_path:
            trainer = config.get("trainer")
            _check_checkpoint(str(ckpt_path), trainer.get("strategy") if trainer is not None else None)
        given = _model_arguments(config)
        if ckpt_path and Path(str(ckpt_path)).is_dir():
            # Lightning reads hyperparameters from a file only; a sharded folder keeps them in meta.pt
            config["ckpt_path"] = str(Path(str(ckpt_path)) / _SHARDED_REST)
        try:
            super()._parse_ckpt_path()
        finally:
            config = self.config.get(str(self.config.get("subcommand")))
            config["ckpt_path"] = ckpt_path
        loaded = _model_arguments(config)
        changed = sorted(key for key in given if key in loaded and loaded[key] != given[key])
        if changed:
            listed = ", ".join(f"{key}={given[key]!r} -> {loaded[key]!r}" for key in changed)
            warnings.warn(
                f"ckpt_path: the checkpoint's hyperparameters replace model arguments given in the "
                f"config or command line: {listed}",
                stacklevel=2,
            )

    def instantiate_classes(self) -> None:
        seed_log = self._seed_log
        assert seed_log is not None, "parse_arguments holds the seed log back first"
        try:
            super().instantiate_classes()
        except ConfigError:  # from instantiate_trainer: one line already
            raise
        except (ValueError, TypeError, MisconfigurationException) as err:  # a value refused; a bug keeps its traceback
            config = self.config.get(str(self.subcommand), self.config)
            raise _instantiation_error(config, err) from err
        finally:
            seed_log.stop()
        seed_log.replay()
        if self.make_optimizer is not None:
            _attach_optimizers(self.model, self.make_optimizer, self.make_schedulers, self.tagged_groups)

    def before_fit(self) -> None:
        self._fit_started = time.time()  # what the Done: line names must be written after this

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Refuse a model that cannot run the subcommand, or whose parameters `param_groups:` globs
        miss, before the Trainer exists: making it logs (devices found) and writes the run's folder,
        which would spoil the one-line error."""
        if self.make_optimizer is None and not _has_own_optimizers(self.model) and self.subcommand == "fit":
            raise ConfigError(
                "optimizer",
                f"missing, and {type(self.model).__name__} has no configure_optimizers; "
                "fix: add an optimizer: block such as {AdamW: {lr: 0.001}}",
            )
        if self.subcommand in _EVAL_LOOPS:
            _check_eval_loop(str(self.subcommand), self.model, self.datamodule)
        if self.tagged_groups and any(True for _ in self.model.parameters()):
            # a model built eagerly names its parameters now; one built in configure_model() or setup()
            # does not (running those hooks early would run the user's code twice): configure_optimizers
            # refuses its globs, after the Trainer's start
            param_groups.split(param_groups.trainable(self.model), self.tagged_groups)
        return super().instantiate_trainer(**kwargs)

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(_run_summary(self.trainer, self._fit_started))


# What validate/test/predict run: the model's step method and the loader it reads.
_EVAL_LOOPS = {
    "validate": ("validation_step", "val_dataloader"),
    "test": ("test_step", "test_dataloader"),
    "predict": ("predict_step", "predict_dataloader"),
}


def _check_eval_loop(subcommand: str, model: LightningModule, data: Any) -> None:
    """Refuse `cs-lightning test` (validate, predict) when the model or data lacks what that loop
    needs, before Lightning starts it and writes its log folder. predict_step has a default."""
    step, loader = _EVAL_LOOPS[subcommand]
    if step != "predict_step" and not is_overridden(step, model):
        raise ConfigError(
            subcommand,
            f"{type(model).__name__} has no {step}(); fix: define "
            f"{step}(self, batch, batch_idx) in it, or run cs-lightning fit",
        )
    if not is_overridden(loader, model) and (data is None or not is_overridden(loader, data)):
        if data is not None:
            problem = f"neither {type(data).__name__} nor {type(model).__name__} defines {loader}()"
        else:
            problem = f"{type(model).__name__} defines no {loader}() and no data: is given"
        raise ConfigError(subcommand, f"{problem}; fix: add {loader}(self) to the data module (data:)")


def _run_summary(trainer: Trainer, since: float) -> str:
    """One line after training: final loss, time to first loss, the checkpoint this run wrote."""
    metrics = trainer.callback_metrics
    losses: list[str] = [k for k in ("train_loss", "loss") if k in metrics] or sorted(
        k for k in metrics if "loss" in k and not k.startswith(("val", "test", "ttfl"))
    )
    loss = f"final {losses[0]} {float(metrics[losses[0]]):.4f}" if losses else "no loss logged"
    # Lightning's Trainer sets `callbacks` in its callback connector and does not declare it
    callbacks = trainer.callbacks  # type: ignore[attr-defined]
    timers = [c for c in callbacks if isinstance(c, TimeToFirstLoss) and "ttfl/total" in c.metrics]
    ttfl = f"time to first loss {timers[0].metrics['ttfl/total']:.2f} s" if timers else "no time to first loss"
    path = _written_checkpoint(trainer, since)
    if path and not os.path.relpath(path).startswith(".."):
        path = os.path.relpath(path)
    checkpoint = f"checkpoint {path}" if path else "no checkpoint written"
    return f"Done: {loss} | {ttfl} | {checkpoint}"


def _written_checkpoint(trainer: Trainer, since: float) -> str | None:
    """The newest checkpoint the checkpoint callback knows of that was written at or after ``since``.

    After a resume, the callback's paths are restored from the checkpoint the run started from;
    a file that was not written by this run is not named.
    """
    saver = trainer.checkpoint_callback
    if not isinstance(saver, ModelCheckpoint):  # the paths below are ModelCheckpoint's
        return None
    known = {saver.last_model_path, saver.best_model_path, *saver.best_k_models}
    # a sharded checkpoint (csx_fsdp) is a folder
    written = [(os.path.getmtime(p), p) for p in known if p and os.path.exists(p) and os.path.getmtime(p) >= since]
    return max(written)[1] if written else None


# -------------------------------------------------------------------- schedule command


class _OneLineParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so errors stay one line."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(self.prog.removeprefix("cs-lightning "), f"{message}; fix: see {self.prog} --help")


def _merged(paths: Sequence[Path]) -> dict[str, Any]:
    """Config files merged like repeated --config: later files override earlier keys."""

    def merge(base: dict, extra: Mapping) -> dict:
        for key, value in extra.items():
            base[key] = (
                merge(dict(base.get(key) or {}), value)
                if isinstance(value, Mapping) and isinstance(base.get(key), Mapping)
                else value
            )
        return base

    merged: dict[str, Any] = {}
    for path in paths:
        merge(merged, _load_yaml(path))
    return merged


def _schedule_command(argv: Sequence[str]) -> None:
    """`cs-lightning schedule --config run.yaml [--steps N] [--out lr.png | --table]`."""
    parser = _OneLineParser(
        prog="cs-lightning schedule",
        description="Draw or tabulate the configured schedules without building the model.",
    )
    parser.add_argument("-c", "--config", action="append", required=True, help="YAML file(s), as for fit")
    parser.add_argument("--steps", type=int, default=None, help="steps to show (default: trainer.max_steps)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--out", default=None, help="write a picture here (png, pdf, svg)")
    output.add_argument("--table", action="store_true", help="print a table (the default)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite --out if it exists")
    opts = parser.parse_args(list(argv))
    paths = [Path(p) for p in opts.config]
    for i, path in enumerate(paths):
        _load_yaml(path, key=("config", i))
    _run_imports(argv)
    config = _merged(paths)
    make_optimizer, make_schedulers = _run_factories(config, any_tags=True)
    if make_optimizer is None:
        raise ConfigError(
            "optimizer",
            "no optimizer: and no schedulers: block, nothing to draw; "
            "fix: add an optimizer: block such as {AdamW: {lr: 0.001}}",
        )
    if make_schedulers is None:
        make_schedulers = _constant_schedule
    steps = _steps_to_show(opts.steps, config)
    probe = param_groups.probe(param_groups.parse(config.get("param_groups")), named_tags(config.get("schedulers")))
    schedulers = make_schedulers(make_optimizer(probe))
    if opts.out:
        out = _picture_path(opts.out, paths, opts.force)
        try:
            figure = cs_schedulers.plot(schedulers, steps)
        except ImportError as err:  # matplotlib is an extra
            raise ConfigError("--out", f"{err}; or use --table") from None
        _write_picture(figure, out)
        print(f"wrote {out} ({steps} steps)")
    else:
        print(cs_schedulers.table(schedulers, steps))


def _steps_to_show(given: int | None, config: Mapping[str, Any]) -> int:
    """`--steps`, else `trainer.max_steps`: a positive integer, as Lightning's Trainer takes it."""
    steps = given if given is not None else (config.get("trainer") or {}).get("max_steps")
    if isinstance(steps, int) and steps > 0:
        return steps
    if isinstance(steps, float) and steps.is_integer() and steps > 0:  # YAML reads 1.0e9 as a float
        fix = f"fix: write it as an integer, max_steps: {int(steps)}"
    else:
        fix = "fix: pass --steps N or set trainer.max_steps, a positive integer"
    key = "--steps" if given is not None else ("trainer", "max_steps")
    raise ConfigError(key, f"need a positive integer number of steps, got {steps!r}; {fix}")


def _constant_schedule(optimizer: torch.optim.Optimizer) -> list:
    """Without schedulers the optimizer's learning rate holds at every step: show that constant."""
    return [cs_schedulers.ConstantLR(optimizer, learning_rate=optimizer.param_groups[0]["lr"])]


def _picture_path(given: str, configs: Sequence[Path], force: bool) -> Path:
    """The file `--out` names: with `.png` added when it has no extension (what matplotlib
    would write, said out loud); refused when it is a config, a folder, in no folder, or
    (without `force`) an existing file."""
    out = Path(given)
    if not out.suffix:
        out = out.with_name(out.name + ".png")
    if out.is_dir():
        raise ConfigError("--out", f"{str(out)!r} is a folder; fix: give a file path such as {str(out / 'lr.png')!r}")
    if not out.parent.is_dir():
        raise ConfigError(
            "--out", f"cannot write {str(out)!r}: no folder {str(out.parent)!r}; fix: give a path in an existing folder"
        )
    if out.exists() and any(os.path.samefile(out, config) for config in configs):
        raise ConfigError("--out", f"{str(out)!r} is a --config file; fix: give another output path")
    if out.exists() and not force:
        raise ConfigError(
            "--out", f"{str(out)!r} already exists; fix: give another path, or pass --force to overwrite it"
        )
    return out


def _write_picture(figure: Any, out: Path) -> None:
    """Render in memory, then write through a temporary file: a failure leaves `out` as it was."""
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format=out.suffix[1:])
    except ValueError as err:  # a format matplotlib does not write
        raise ConfigError(
            "--out", f"cannot write {str(out)!r}: {err}; fix: end the path in .png, .pdf or .svg"
        ) from None
    try:
        write_atomic(out, buffer.getvalue())
    except OSError as err:
        raise ConfigError("--out", f"cannot write {str(out)!r} ({err.strerror}); fix: give a writable path") from None


# ----------------------------------------------------------------------- cache command


def _cache_command(argv: Sequence[str]) -> None:
    """`cs-lightning cache info` and `cs-lightning cache clear`: what cs_lightning keeps on disk
    (the trace check's verdicts, deferred init's generator jump tables)."""
    from cs_lightning.deferred import mt19937
    from cs_lightning.trace_cache import TraceCache

    parser = _OneLineParser(
        prog="cs-lightning cache",
        description="Show or clear cs_lightning's cache (CS_LIGHTNING_CACHE_DIR): trace-check verdicts, jump tables.",
    )
    parser.add_argument("action", choices=["info", "clear"])
    opts = parser.parse_args(list(argv))
    _check_cache_folder(cache_dir())
    cache, tables = TraceCache(), mt19937.stored()
    if opts.action == "clear":
        entries, files = cache.clear(), tables.clear()
        print(f"removed {entries} entr{'y' if entries == 1 else 'ies'} from {cache.folder}")
        print(f"removed {files} jump table{'s' * (files != 1)} from {tables.folder}")
    else:
        print(cache.info())
        count = len(tables.files())
        print(f"jump tables {tables.folder}: {count} file{'s' * (count != 1)}, {tables.size()} bytes")


def _check_cache_folder(folder: Path) -> None:
    """Refuse a cache path that is, or lies under, a file: reading it would find nothing and
    say 0 entries, and clearing it would remove nothing, both silently."""
    existing = next((path for path in (folder, *folder.parents) if path.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "is a file" if existing == folder else f"lies under the file {str(existing)!r}"
        variable = cache_variable()
        fix = {
            "CS_LIGHTNING_CACHE_DIR": "set it to a folder (made when first written), or unset it",
            "XDG_CACHE_HOME": "set it, or CS_LIGHTNING_CACHE_DIR, to a folder",
            None: "set CS_LIGHTNING_CACHE_DIR to a folder (made when first written)",
        }[variable]
        raise ConfigError(variable or "cache", f"{str(folder)!r} cannot be the cache folder: it {where}; fix: {fix}")


# ------------------------------------------------------------------------------ main


def _convert_command(argv: Sequence[str]) -> None:
    """`cs-lightning convert`, imported only when run."""
    from cs_lightning.convert import convert_command

    convert_command(argv)


# Commands run before Lightning's parser sees the arguments (its own: fit, validate, test, predict).
_OWN_COMMANDS: dict[str, Callable[[Sequence[str]], None]] = {
    "schedule": _schedule_command,
    "convert": _convert_command,
    "cache": _cache_command,
}


def main(args: Sequence[str] | None = None) -> int:
    """Entry point of the `cs-lightning` console script; returns the exit code.

    Configuration mistakes print one line (`cs-lightning: error: <key path>: ... fix: ...`)
    and return 2 before anything is written; so does a first step the csx trace check
    refuses (no update was applied; Lightning's log folder may exist by then). Ctrl-C returns
    130 and a closed stdout (`| head`) 141, as the shell counts signals, without a traceback.
    Other errors during training propagate as usual.
    """
    argv = list(sys.argv[1:] if args is None else args)
    interrupted: list[int] = []
    previous_handler = _note_interrupts(interrupted)
    try:
        if argv[:1] and argv[0] in _OWN_COMMANDS:
            _OWN_COMMANDS[argv[0]](argv[1:])
            return 0
        imported = _run_imports(argv)
        with warnings.catch_warnings():
            # We pass argv explicitly for in-process use; Lightning warns when sys.argv is also set.
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
            CSLightningCLI(args=argv, imported=imported)
    except GraphBreakError as err:
        # every rank checks the same step code on the same shapes, so rank 0 says it for all
        return _fail(str(err)) if getattr(rank_zero_only, "rank", 0) == 0 else 2  # Lightning sets .rank per process
    except CSLightningError as err:  # the user's to fix (a config, a scheduler): one line
        return _fail(str(err))
    except argparse.ArgumentError as err:
        return _fail(str(_parser_error(str(err))))
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:  # `cs-lightning schedule | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 128 + signal.SIGPIPE
    except SystemExit as exit_:  # --help, --print_config; Lightning's exit after Ctrl-C in a loop
        if interrupted:
            return _interrupted()
        return exit_.code if isinstance(exit_.code, int) else 0
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
    return 0


def _note_interrupts(seen: list[int]) -> Any:
    """Note each Ctrl-C in `seen`, then interrupt as Python does (Lightning catches that
    KeyboardInterrupt in its loops, shuts down and exits 1: `main` makes it 130). Returns the
    handler replaced, or None off the main thread (signals reach the main thread only)."""

    def on_interrupt(signum: int, frame: Any) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, on_interrupt)


def _interrupted() -> int:
    """Ctrl-C: one line and the shell's code for it (128 + SIGINT); files are written atomically."""
    print("cs-lightning: interrupted", file=sys.stderr)
    return 130


def _fail(line: str) -> int:
    print(f"cs-lightning: error: {' '.join(line.split())}", file=sys.stderr)
    return 2
