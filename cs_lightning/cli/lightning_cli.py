"""`CSLightningCLI`: LightningCLI with the Cerebras-style blocks, the `imports:` key and one-line errors."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import operator
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO, Union, get_args, get_origin

import yaml
from jsonargparse import ArgumentParser, Namespace
from jsonargparse._actions import _ActionPrintConfig  # not exported; says whether --print_config was given
from jsonargparse._typehints import ActionTypeHint  # not exported; block_arguments uses it too
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.strategies import Strategy, StrategyRegistry
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.model_helpers import is_overridden

from cs_lightning import param_groups
from cs_lightning.cli.block_arguments import add_block_arguments
from cs_lightning.cli.checkpoints import (
    check_ckpt_path,
    check_model_class,
    saved_hyperparameters,
)
from cs_lightning.cli.error_lines import (
    csx_option_error,
    instantiation_error,
    missing_package,
    parser_error,
    unknown_key,
)
from cs_lightning.cli.optimization import (
    ADD_AN_OPTIMIZER,
    SchedulersFactory,
    attach_optimizers,
    has_own_optimizers,
    run_factories,
)
from cs_lightning.cli.output_file import folder_problem
from cs_lightning.config_blocks import SEED_MAX, check_whole_number, load_yaml, yaml_problem
from cs_lightning.errors import ConfigError, CSLightningError, KeyPath, did_you_mean
from cs_lightning.optimizers import OptimizerFactory
from cs_lightning.strategies import CSXSystemMixin
from cs_lightning.strategies.checkpoints import SHARDED_REST
from cs_lightning.time_to_first_loss import TimeToFirstLoss
from cs_lightning.user_code import imported_or_none


class _HeldRecords(logging.Filter):
    """Hold some loggers' records, and every warning shown, back until `stop()`; `replay()` then gives
    them out, in the order they came.

    Seeding logs "Seed set to N" before the model is built, an optimizer block written for Model Zoo
    warns of torch's other defaults, and making the Trainer logs the devices found before it checks
    its other arguments; when building then fails on a configuration mistake, those lines would
    spoil the one-line error. Only how a warning is shown is swapped, never the filters, which the
    user's code may set meanwhile (a DataModule silencing Lightning's worker-count warning).
    """

    def __init__(self, *names: str) -> None:
        super().__init__()
        self.loggers = [logging.getLogger(name) for name in names]
        self.held: list[logging.LogRecord | warnings.WarningMessage] = []
        for logger in self.loggers:
            logger.addFilter(self)
        self._shown_by: Any = warnings.showwarning
        warnings.showwarning = self._hold_warning

    def filter(self, record: logging.LogRecord) -> bool:
        self.held.append(record)
        return False

    def _hold_warning(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        self.held.append(warnings.WarningMessage(message, category, filename, lineno, file, line))

    def stop(self) -> None:
        for logger in self.loggers:
            logger.removeFilter(self)
        if warnings.showwarning == self._hold_warning:  # else something replaced it since, and keeps its own
            warnings.showwarning = self._shown_by

    def replay(self) -> None:
        self.stop()  # else the warnings given out would be held again
        for item in self.held:
            if isinstance(item, logging.LogRecord):
                logging.getLogger(item.name).handle(item)
            else:
                warnings.showwarning(item.message, item.category, item.filename, item.lineno)
        self.held = []


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


# Lightning's callbacks that write to the Trainer's logger and refuse to start without one.
_LOGGING_CALLBACKS = ("LearningRateMonitor", "DeviceStatsMonitor")


# Counts Lightning takes as 0 (or below) and divides by later, at the first step or epoch end; why each needs 1
_COUNTS = {
    "accumulate_grad_batches": "each optimizer step needs at least one batch; fix: write 1 or more "
    "(1: no accumulation)",
    "check_val_every_n_epoch": "validation runs every N epochs; fix: write 1 or more (limit_val_batches: 0 turns "
    "validation off; null validates by val_check_interval alone)",
}


def _check_counts(trainer: Mapping[str, Any]) -> None:
    for key, why in _COUNTS.items():
        value = trainer.get(key)
        if isinstance(value, int) and value < 1:
            raise ConfigError(("trainer", key), f"got {value}, and {why}")


def _check_val_check_interval(trainer: Mapping[str, Any]) -> None:
    """Lightning's range, from its docs: an int counts training batches, a float is a fraction of the epoch in
    [0.0, 1.0]. Of those, 0 divides by zero at the first step (after the log folder is written), and 0.0
    validates after every batch, which no one writing 0 means: both refused."""
    value = trainer.get("val_check_interval")
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # None: each epoch's end; str, dict: a time
        return
    if (isinstance(value, int) and value < 1) or (isinstance(value, float) and not 0 < value <= 1):
        raise ConfigError(
            ("trainer", "val_check_interval"),
            f"got {value!r}, and validation runs every N training batches (an integer, 1 or more) or after a "
            "fraction of each epoch (a number above 0 and at most 1.0); fix: write e.g. 100 or 0.25 "
            "(limit_val_batches: 0 turns validation off)",
        )


def _check_callbacks_have_a_logger(trainer: Mapping[str, Any]) -> None:
    """Lightning refuses these at the first step, after the run has written its config.yaml."""
    if trainer.get("logger") is not False:
        return
    for i, callback in enumerate(trainer.get("callbacks") or []):
        name = str(getattr(callback, "class_path", type(callback).__name__)).rpartition(".")[2]
        if name in _LOGGING_CALLBACKS:
            raise ConfigError(
                ("trainer", "callbacks", i),
                f"{name} writes to the logger, and trainer.logger is false; fix: keep a logger, or remove the"
                f" callback (e.g. --trainer.callbacks '[]' drops all of them)",
            )


def _check_strategy_string(trainer: Mapping[str, Any]) -> None:
    """A class path given as trainer.strategy's string: jsonargparse keeps it a string (Union[str, Strategy]
    tries str first), which Lightning takes as a registered name only, and refuses as an invalid name; and
    a name that is not registered (`_check_strategy_name`)."""
    strategy = trainer.get("strategy")
    if isinstance(strategy, str) and strategy.lstrip().startswith("{"):
        _check_inline_strategy(strategy)
    if not isinstance(strategy, str):
        return
    if not re.fullmatch(r"\w+(\.\w+)+", strategy):  # registered names have no dot
        _check_strategy_name(strategy)
        return
    cls = imported_or_none(strategy)  # None: the class_path: form names what is wrong with the path
    # a name standing for the class with its defaults (ddp_spawn, say, stands for DDPStrategy with some set)
    named = [name for name, entry in StrategyRegistry.items() if entry["strategy"] is cls and not entry["init_params"]]
    by_name = f"its registered name {named[0]} (--trainer.strategy {named[0]}), or " if named else ""
    raise ConfigError(
        ("trainer", "strategy"),
        f"{strategy!r} is a class path, and a strategy given as a string must be a registered name; fix: give "
        f"{by_name}the class as class_path: --trainer.strategy.class_path {strategy} (in YAML, strategy: "
        f"{{class_path: {strategy}}})",
    )


def _check_strategy_name(name: str) -> None:
    """A name Lightning does not register (``csxx``): Lightning refuses it only as the Trainer is made, in words
    that list none of the csx strategies. Lightning reads the name in lower case, and "auto" besides."""
    registered = ["auto", *StrategyRegistry]
    if name.lower() in registered:
        return
    hint = did_you_mean(name.lower(), registered)
    csx = [known for known, entry in StrategyRegistry.items() if issubclass(entry["strategy"], CSXSystemMixin)]
    raise ConfigError(
        ("trainer", "strategy"),
        f"{name!r} is not a registered strategy name; {hint}fix: write one of the CS-X strategies "
        f"({', '.join(csx)}) or another name in Lightning's StrategyRegistry (auto, ddp, fsdp, ...)",
    )


def _check_inline_strategy(text: str) -> None:
    """A class_path block given inline (``--trainer.strategy '{class_path: ..., init_args: ...}'``) that the
    parser refused as a Strategy, and so kept as a string: Lightning would call it an invalid strategy
    name. Parse it alone, as a YAML block would be parsed, for the report that names what is wrong in it."""
    try:
        block = load_yaml(text)
    except yaml.YAMLError as err:
        problem = yaml_problem(err, text)
        raise ConfigError(
            ("trainer", "strategy"), f"{text!r} is not a YAML/JSON mapping ({problem}); fix: correct its syntax"
        ) from None
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--trainer.strategy", type=Strategy)
    try:
        parser.parse_object({"trainer": {"strategy": block}})
    except argparse.ArgumentError as err:
        raise parser_error(str(err), ()) from None


def _check_strategy_options(trainer: Mapping[str, Any]) -> None:
    """Check a csx strategy's options as its constructor will, one at a time, to name the key of the one
    refused: the constructor runs inside jsonargparse, whose report of its error names neither."""
    strategy = trainer.get("strategy")
    class_path = getattr(strategy, "class_path", None)  # None: a strategy given by name, which takes no options
    init_args = getattr(strategy, "init_args", None)
    if class_path is None or init_args is None:
        return
    for name, value in vars(init_args).items():
        error = csx_option_error(class_path, ("trainer", "strategy", "init_args", name), value)
        if error is not None:
            raise error


def _check_output_folders(trainer: Mapping[str, Any]) -> None:
    """Refuse a folder the run writes into that cannot be made or written, before anything is built:
    Lightning finds out when it first writes there, after building the model, or, for a checkpoint's
    folder, at the first save, after training (with the log folder written)."""
    for key, folder in _output_folders(trainer):
        if "://" in folder:  # a remote filesystem (s3://, gs://): fsspec's to judge
            continue
        problem = folder_problem(Path(folder))
        if problem is not None:
            raise ConfigError(key, f"{folder!r} {problem}; fix: give a folder that can be made and written")


def _output_folders(trainer: Mapping[str, Any]) -> Iterator[tuple[KeyPath, str]]:
    """The folders the trainer: block names for writing: default_root_dir, each logger's save_dir or
    root_dir, each ModelCheckpoint's dirpath; with their key paths."""
    if trainer.get("default_root_dir") is not None:
        yield ("trainer", "default_root_dir"), str(trainer["default_root_dir"])
    for key, block in _blocks(trainer, "logger"):
        for name in ("save_dir", "root_dir"):
            yield from _init_arg(block, (*key, "init_args", name))
    for key, block in _blocks(trainer, "callbacks"):
        checkpoint = imported_or_none(str(getattr(block, "class_path", "")))
        if isinstance(checkpoint, type) and issubclass(checkpoint, ModelCheckpoint):
            yield from _init_arg(block, (*key, "init_args", "dirpath"))


def _blocks(trainer: Mapping[str, Any], name: str) -> Iterator[tuple[KeyPath, Any]]:
    """The class_path blocks under trainer.<name>: one, or a list of them, with their key paths."""
    value = trainer.get(name)
    if isinstance(value, list):
        yield from ((("trainer", name, i), block) for i, block in enumerate(value))
    elif value is not None:
        yield ("trainer", name), value


def _init_arg(block: Any, key: KeyPath) -> Iterator[tuple[KeyPath, str]]:
    """The init_arg at the end of ``key`` in a class_path block, when it is set."""
    value = getattr(getattr(block, "init_args", None), str(key[-1]), None)
    if value is not None:
        yield key, str(value)


def _ints_stay_ints(parser: LightningArgumentParser) -> None:
    """Keep an integer given to a Trainer argument that takes an int or a float an int: limit_val_batches: 1 is one
    batch, and 1.0 is all of them.

    Lightning writes those as Optional[Union[int, float]], which Python's typing cache can hand back as
    Union[float, int, None] (an equal union built earlier, in that order); jsonargparse tries a union's
    members in order, and float takes 1 as 1.0. Here int goes first; a float given stays a float.
    """
    for action in parser._actions:
        hint = getattr(action, "_typehint", None)
        if (
            not isinstance(action, ActionTypeHint)
            or not action.dest.startswith("trainer.")
            or get_origin(hint) is not Union
        ):
            continue
        members = get_args(hint)
        if float in members and int in members and members.index(float) < members.index(int):
            action._typehint = functools.reduce(operator.or_, [int, *(m for m in members if m is not int)])


def _check_values(config: Mapping[str, Any]) -> None:
    """The checks of a subcommand's values that --print_config makes too: the seed and the strategy."""
    trainer = config.get("trainer") or {}
    if not isinstance(config.get("seed_everything"), bool):  # true draws a seed, false seeds nothing
        check_whole_number("seed_everything", config.get("seed_everything"), 0, SEED_MAX)
    _check_strategy_string(trainer)
    _check_strategy_options(trainer)


class _Parser(LightningArgumentParser):
    """Lightning's parser, whose --print_config refuses the seed, strategy, optimizer:, schedulers: and
    param_groups: values that the command would refuse, in the same line.

    jsonargparse prints that config while it parses, and exits, before `CSLightningCLI.parse_arguments`
    checks the blocks; what it prints is the subcommand parser's `dump`, so the check runs there first.
    Only under --print_config: a run dumps its config.yaml once the check has passed (a second would warn twice).
    """

    def dump(self, namespace: Namespace, *args: Any, **kwargs: Any) -> str:
        if _ActionPrintConfig.is_print_config_requested(self):
            held = _HeldRecords()  # a Model Zoo block's warning: said once the check passes, not before its error
            config = namespace.as_dict()
            try:
                _check_values(config)
                run_factories(config)
            finally:
                held.stop()
            held.replay()
        return super().dump(namespace, *args, **kwargs)


class _SaveConfig(SaveConfigCallback):
    """Lightning's, but for `fit` config.yaml is written once the run is set up, and a refusal to write
    over an earlier run's config.yaml is one line, said before anything is built.

    Lightning writes in `setup`, before `configure_model` and `configure_optimizers`: a refusal of
    theirs (param_groups globs matching none of the names of a model built in `configure_model`)
    then left a log folder holding only config.yaml.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            self._save(trainer, pl_module, stage)
            return
        if self.save_to_log_dir and not self.overwrite and not self.already_saved:
            path = os.path.join(str(trainer.log_dir), self.config_filename)
            exists = get_filesystem(path).isfile(path) if trainer.is_global_zero else False
            if trainer.strategy.broadcast(exists):
                raise _written_over(path)

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._save(trainer, pl_module, "fit")

    def _save(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        try:
            super().setup(trainer, pl_module, stage)
        except RuntimeError as err:
            if "to NOT exist" not in str(err):  # Lightning's wording of that refusal
                raise
            raise _written_over(os.path.join(str(trainer.log_dir), self.config_filename)) from None


def _written_over(path: str) -> ConfigError:
    return ConfigError(
        ("trainer", "default_root_dir"),
        f"{path!r} exists: an earlier run wrote its config there, and this run would write over it; "
        "fix: give another --trainer.default_root_dir, or keep a logger (each run gets its own version_N)",
    )


class CSLightningCLI(LightningCLI):
    """LightningCLI with Cerebras-style `optimizer:`/`schedulers:` blocks and an `imports:` key.

    Defaults that differ from LightningCLI: seed 0 (reproducible unless told otherwise), no
    auto-configured optimizer (ours is built after materialization), parse errors
    raised rather than printed, so `main` can print them as one line, and a --print_config
    that refuses the blocks `fit` refuses (`_Parser`).
    """

    def __init__(self, args: Any = None, imported: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        """`imported`: what `run_imports` returned, so the saved config holds absolute paths."""
        # the clock feeds the Done: line under any strategy; its metrics are logged only when asked
        kwargs.setdefault("trainer_defaults", {"strategy": "csx", "callbacks": [TimeToFirstLoss(log_metrics=False)]})
        kwargs.setdefault("save_config_callback", _SaveConfig)
        kwargs.setdefault("parser_class", _Parser)
        kwargs.setdefault("seed_everything_default", 0)
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault(
            "parser_kwargs",
            {"exit_on_error": False, "allow_abbrev": False, "description": _DESCRIPTION, "epilog": _EPILOG},
        )
        self.make_optimizer: OptimizerFactory | None = None
        self.make_schedulers: SchedulersFactory | None = None
        self.tagged_groups: list[param_groups.TaggedGroup] = []
        self._held_logs: _HeldRecords | None = None
        if imported and isinstance(args, list) and args[:1] and args[0] in self.subcommands():
            # every entry as imported (a .py file by its absolute path), last on the command line:
            # --print_config and the saved config.yaml then work from any folder
            args = [*args, "--imports", json.dumps(list(dict.fromkeys(imported.values())))]
        try:
            super().__init__(args=args, **kwargs)
        except (CSLightningError, argparse.ArgumentError):
            raise  # one line: what was held back would spoil it
        except BaseException:  # a bug's traceback comes with what was said before it
            if self._held_logs is not None:
                self._held_logs.replay()
            raise
        finally:  # a refusal between parsing and building (a checkpoint's) must not leave the logs held
            if self._held_logs is not None:
                self._held_logs.stop()

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        _ints_stay_ints(parser)
        add_block_arguments(parser)
        parser.add_argument(
            "--imports",
            type=list[str] | str | None,
            default=None,
            help="Dotted modules, or .py files, imported before parsing: on the command line relative to the working"
            " directory, under imports: in a config relative to that file.",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then check the optimizer and scheduler blocks before anything is built or written."""
        try:
            super().parse_arguments(parser, args)
        except argparse.ArgumentError as err:
            if isinstance(err.__cause__, ConfigError):  # one that is a TypeError (from _Parser): jsonargparse wraps it
                raise err.__cause__ from None
            # the keys each level takes are the parser's to say: an unknown key is named here, the rest by main
            command = self._command_given(args)
            unknown = unknown_key(str(err), self._parser(command), command)
            if unknown is None:
                raise
            raise unknown from None
        config = self.config.get(str(self.config.get("subcommand")), self.config)
        trainer = config.get("trainer") or {}
        if self.config.get("subcommand") == "fit":  # what only training reads
            _check_callbacks_have_a_logger(trainer)  # validate/test/predict run them without a logger
            _check_counts(trainer)
            _check_val_check_interval(trainer)
        _check_values(config)
        _check_output_folders(trainer)
        self._held_logs = _HeldRecords("lightning.fabric.utilities.seed", "lightning.pytorch.utilities.rank_zero")
        steps = trainer.get("max_steps") if self.config.get("subcommand") == "fit" else None
        # max_steps known: a schedule an update of the run would refuse is refused now, before any output
        known = isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0  # -1: until the epochs end
        self.make_optimizer, self.make_schedulers = run_factories(config, steps=steps if known else None)
        self.tagged_groups = param_groups.parse(config.get("param_groups"))

    def _command_given(self, args: Any) -> str | None:
        """The subcommand in `args` (a list, or a dict keyed by it; None: the command line), before parsing."""
        given = sys.argv[1:] if args is None else args
        names = given if isinstance(given, (list, dict)) else []
        return next((name for name in names if isinstance(name, str) and name in self.subcommands()), None)

    def _parse_ckpt_path(self) -> None:
        """Lightning's: the checkpoint's hyperparameters replace the model arguments of the config.

        Checks the checkpoint first (one line, not torch.load's traceback) and that the configured
        model class wrote it, reads the hyperparameters without reading the weights (from a sharded
        folder's meta.pt), and warns with each model argument the checkpoint changes: the checkpoint
        wins, as in LightningCLI, but not silently.
        """
        config = self.config.get(str(self.config.get("subcommand")))
        if config is None:
            return
        ckpt_path = config.get("ckpt_path")
        if ckpt_path:
            check_ckpt_path(str(ckpt_path), config.get("trainer") or {})
        given = _model_arguments(config)
        if ckpt_path:
            path = Path(str(ckpt_path))
            hparams_file = path / SHARDED_REST if path.is_dir() else path  # a sharded folder keeps them in meta.pt
            if hparams_file.is_file():
                self._take_hyperparameters(str(ckpt_path), hparams_file, config.get("model").class_path)
        loaded = _model_arguments(self.config.get(str(self.config.get("subcommand"))))  # a new config if taken
        changed = sorted(key for key in given if key in loaded and loaded[key] != given[key])
        if changed:
            replaced = ", ".join(f"{key}={given[key]!r} -> {loaded[key]!r}" for key in changed)
            warnings.warn(
                f"ckpt_path: the checkpoint's hyperparameters replace model arguments given in the "
                f"config or command line: {replaced}",
                stacklevel=2,
            )

    def _take_hyperparameters(self, value: str, path: Path, configured_model: str) -> None:
        """Parse the hyperparameters saved in ``path`` into the config's model block, as LightningCLI
        does, once the configured model class is known to have written them."""
        saved = saved_hyperparameters(path)
        saved.pop("_instantiator", None)  # Lightning's record of how the model was built, not an argument
        if not saved:
            return
        check_model_class(value, saved, configured_model)
        model = {"class_path": saved.pop("_class_path"), "dict_kwargs": saved} if "_class_path" in saved else saved
        self.config = self.parser.parse_object({self.config.subcommand: {"model": model}}, self.config)

    def instantiate_classes(self) -> None:
        held_logs = self._held_logs
        assert held_logs is not None, "parse_arguments holds the logs back first"
        try:
            super().instantiate_classes()
        except ConfigError:  # from instantiate_trainer: one line already
            raise
        except (ValueError, TypeError, MisconfigurationException) as err:  # a value refused; a bug keeps its traceback
            config = self.config.get(str(self.subcommand), self.config)
            raise instantiation_error(config, err) from err
        held_logs.replay()  # on a failure, __init__ stops holding (and gives a bug's traceback what was held)
        if self.make_optimizer is not None:
            attach_optimizers(self.model, self.make_optimizer, self.make_schedulers, self.tagged_groups)

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's; a fit refused before its first update (`configure_optimizers`, the trace check) leaves
        no run folder behind: Lightning makes the loggers' folders before the model is set up."""
        unmade = _unmade_log_folders(self.trainer) if subcommand == "fit" else []
        try:
            super()._run_subcommand(subcommand)
        except CSLightningError:
            if self.trainer.global_step == 0:
                _remove_run_folders(unmade)
            raise

    def before_fit(self) -> None:
        self._fit_started = time.time()  # what the Done: line names must be written after this

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Refuse a model that cannot run the subcommand, or whose parameters `param_groups:` globs
        miss, before the Trainer exists: making it logs (devices found) and writes the run's folder,
        which would spoil the one-line error."""
        if self.make_optimizer is None and not has_own_optimizers(self.model) and self.subcommand == "fit":
            raise ConfigError(
                "optimizer",
                f"missing, and {type(self.model).__name__} has no configure_optimizers; {ADD_AN_OPTIMIZER}",
            )
        if self.subcommand in _EVAL_LOOPS:
            _check_eval_loop(str(self.subcommand), self.model, self.datamodule)
        if self.tagged_groups and any(True for _ in self.model.parameters()):
            # a model built eagerly names its parameters now; one built in configure_model() or setup()
            # does not (running those hooks early would run the user's code twice): configure_optimizers
            # refuses its globs, after the Trainer's start
            param_groups.split(param_groups.trainable(self.model), self.tagged_groups)
        self.trainer_defaults = _one_clock(self.trainer_defaults, self._get(self.config_init, "trainer", default={}))
        try:
            return super().instantiate_trainer(**kwargs)
        except ModuleNotFoundError as err:  # Lightning's way of saying an optional package is missing
            config = self.config.get(str(self.subcommand), self.config)
            raise missing_package(err, config.get("trainer") or {}) from err

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(_run_summary(self.trainer, self._fit_started))


def _one_clock(defaults: dict[str, Any], trainer: Mapping[str, Any]) -> dict[str, Any]:
    """The CLI adds a `TimeToFirstLoss` to every run's callbacks, for its Done: line; when the config lists
    one too, that one is the run's clock (a second would print a second, later line)."""
    given = trainer.get("callbacks") or []
    if not any(isinstance(callback, TimeToFirstLoss) for callback in (given if isinstance(given, list) else [given])):
        return defaults
    kept = [callback for callback in defaults.get("callbacks", []) if not isinstance(callback, TimeToFirstLoss)]
    return {**defaults, "callbacks": kept}


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


def _unmade_log_folders(trainer: Trainer) -> list[list[Path]]:
    """Per local logger, its folder and the parents that do not exist yet, deepest first (rank 0 makes them)."""
    unmade: list[list[Path]] = []
    for logger in trainer.loggers if trainer.is_global_zero else []:
        folder = getattr(logger, "log_dir", None)  # CSV and TensorBoard loggers; remote ones have none
        if not isinstance(folder, str) or "://" in folder:
            continue
        # as the logger's filesystem makes it: `~` expanded, `a/../b` is b (whether a exists or not)
        path, missing = Path(os.path.abspath(os.path.expanduser(folder))), []
        while not path.exists():
            missing.append(path)
            path = path.parent
        unmade += [missing] if missing else []
    return unmade


# What a fit writes in its loggers' folders before the first update: SaveConfigCallback's, the loggers' own
# (and a TensorBoardLogger's event file of the hyperparameters, named by its prefix).
_START_FILES = {"config.yaml", "hparams.yaml"}
_EVENTS = "events.out.tfevents."


def _remove_run_folders(unmade: list[list[Path]]) -> None:
    """Remove the folders of `_unmade_log_folders` that hold nothing but what a fit writes as it starts, then
    their parents that are left empty (another logger or run may write there too)."""
    for folder, *parents in unmade:
        written = list(folder.iterdir()) if folder.is_dir() else []
        if not all(path.is_file() and (path.name in _START_FILES or path.name.startswith(_EVENTS)) for path in written):
            continue
        for path in written:
            path.unlink()
        for made in (folder, *parents):
            with contextlib.suppress(OSError):
                made.rmdir()


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


def _model_arguments(config: Any) -> dict[str, Any]:
    """The model's init_args in a parsed config, as a plain dict."""
    model = config.get("model") if config is not None else None
    init_args = model.get("init_args") if model is not None and hasattr(model, "get") else None
    return dict(vars(init_args)) if init_args is not None and hasattr(init_args, "__dict__") else {}
