"""Cerebras Model Zoo YAML -> cs-lightning YAML (`cs-lightning convert modelzoo.yaml -o run.yaml`).

Two Model Zoo layouts are read:

* the Trainer config of Model Zoo 2.x::

      trainer:
        init: {backend, model, optimizer, schedulers, precision, loop, checkpoint,
               logging, callbacks, seed, ...}
        fit: {train_dataloader, val_dataloader, ckpt_path}

* the legacy layout: ``train_input``, ``eval_input``, ``model``, ``optimizer``
  (``optimizer_type``, ``learning_rate`` as a float or a list of
  ``{scheduler: Linear, ...}``, ...) and ``runconfig``.

The result is a LightningCLI config for ``cs-lightning fit``: ``seed_everything``,
``trainer`` (Lightning's own arguments), ``optimizer``, ``param_groups`` (muP's per-layer
learning-rate scales, `cs_lightning.mup`) and ``schedulers`` (Cerebras
shapes, canonical class names, every SequentialLR's milestones written out) and
``ckpt_path``. Every leaf of the source is either mapped or listed as unmapped, with the
reason, in the `Report` and in a comment block at the end of the written YAML, followed by
the report's notes (comments keep the file valid for ``cs-lightning fit``). Nothing is
dropped silently.

`convert` is a pure function of the parsed YAML and `dump` writes its text; the command
line (`cs_lightning.cli.convert_command`) reads and writes the files. Mistakes (unknown
scheduler, inconsistent milestones, a count out of range, an optimizer number that is not
one, not a Model Zoo config) raise `ConfigError` naming the Model Zoo key path;
`cs-lightning` prints that as one line and exits with code 2, writing nothing.
"""

from __future__ import annotations

import difflib
import inspect
import json
import textwrap
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import yaml

from cs_lightning import mup, param_groups, schedulers
from cs_lightning.config_blocks import SEED_MAX, check_whole_number, parse_block
from cs_lightning.errors import ConfigError, KeyPath, format_key_path
from cs_lightning.optimizers import CEREBRAS_DEFAULTS, MODEL_ZOO_ALIASES, number_in_text, torch_optimizers
from cs_lightning.schedulers.registry import as_written, named_tags, with_new_names

_CHECKPOINT_CALLBACK = "cs_lightning.StepCheckpoint"  # every N steps and the last, as Model Zoo saves

# Model Zoo's mixed-precision formats -> Lightning precision strings.
_PRECISION = {"bfloat16": "bf16-mixed", "cbfloat16": "bf16-mixed", "float16": "16-mixed"}


# Legacy (Model Zoo 1.9) scheduler arguments that 1.9's scheduler builder accepted and never
# read, by converted class: what each one did (nothing) and what the schedule does instead.
_IGNORED_BY_1_9 = {
    "PiecewiseConstantLR": {
        "initial_learning_rate": "Model Zoo 1.9 built PiecewiseConstant from values and "
        "boundaries only; the schedule starts at values[0]"
    },
    "LinearLR": {
        "alpha": "Model Zoo 1.9's Linear never read alpha and decayed to end_learning_rate; "
        "so does the converted schedule (for a floor at alpha * initial_learning_rate, set "
        "end_learning_rate to it)"
    },
}

# cerebras.pytorch 2.10's optimizers that torch.optim lacks (lowercase); its others share torch's names.
_CEREBRAS_ONLY_OPTIMIZERS = frozenset({"lamb", "lion"})

# Why a whole section has no counterpart, by its key path prefix (longest match wins).
_INIT: KeyPath = ("trainer", "init")
_REASONS: dict[KeyPath, str] = {
    (*_INIT, "model"): "Model Zoo model: write a LightningModule and set model: class_path",
    ("model",): "Model Zoo model: write a LightningModule and set model: class_path",
    ("trainer", "fit", "train_dataloader"): "Model Zoo data processor: write a LightningDataModule "
    "(its batch size is one micro-batch)",
    ("trainer", "fit", "val_dataloader"): "Model Zoo data processor: write a LightningDataModule",
    ("train_input",): "Model Zoo data processor: write a LightningDataModule (its batch size is one micro-batch)",
    ("eval_input",): "Model Zoo data processor: write a LightningDataModule",
    (*_INIT, "callbacks"): "Model Zoo callback: add a Lightning callback under trainer.callbacks",
    (*_INIT, "loggers"): "Model Zoo logger: set trainer.logger",
    (*_INIT, "sparsity"): "weight sparsity is not emulated by cs-lightning",
    (*_INIT, "backend"): "Cerebras cluster setting: no counterpart in the emulated CS-X",
}
_DEFAULT_REASON = "no cs-lightning counterpart"


@dataclass
class Report:
    """What `convert` did: every source leaf is in `mapped` or in `unmapped`, by its key path
    in the source (a tuple; `format` writes it with `format_key_path`)."""

    source: str
    layout: str
    mapped: list[tuple[KeyPath, str]] = field(default_factory=list)
    unmapped: list[tuple[KeyPath, Any, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def format(self) -> str:
        """The human-readable report `cs-lightning convert` prints at the end."""
        lines = [
            f"converted {self.source} ({self.layout} layout): "
            f"{len(self.mapped)} keys mapped, {len(self.unmapped)} unmapped"
        ]
        lines += [f"  {format_key_path(src)} -> {dst}" for src, dst in self.mapped]
        if self.unmapped:
            # one line per reason, not per key: a model's fifty settings share one (their values are in the file)
            lines.append("unmapped, by reason (each with its value at the end of the output file):")
            by_reason: dict[str, list[str]] = {}
            for key, _, why in self.unmapped:
                by_reason.setdefault(why, []).append(format_key_path(key))
            for why, keys in by_reason.items():
                lines.append(f"  {why}:")
                lines += textwrap.wrap(", ".join(keys), 100, initial_indent="    ", subsequent_indent="    ",
                                       break_long_words=False, break_on_hyphens=False)  # fmt: skip
        if self.notes:
            lines.append("notes:")
            lines += [f"  - {note}" for note in self.notes]
        return "\n".join(lines)


# ----------------------------------------------------------------------------- source


def _under(path: KeyPath, prefix: KeyPath) -> bool:
    """Whether key path `path` is `prefix` or lies below it."""
    return path[: len(prefix)] == prefix


def _leaves(value: Any, path: KeyPath) -> list[tuple[KeyPath, Any]]:
    """Key paths of every leaf; lists are leaves unless they hold mappings."""
    if isinstance(value, Mapping) and value:
        return [leaf for key, child in value.items() for leaf in _leaves(child, (*path, key))]
    if isinstance(value, list) and any(isinstance(item, Mapping) for item in value):
        return [leaf for i, child in enumerate(value) for leaf in _leaves(child, (*path, i))]
    return [(path, value)]


class _Source:
    """The Model Zoo config being read; remembers which key paths were used."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.used: set[KeyPath] = set()
        self.reasons: dict[KeyPath, str] = {}
        self.read: set[KeyPath] = set()  # every key path looked up, there or not: the keys convert knows

    def get(self, path: KeyPath, default: Any = None) -> Any:
        """Value at a key path (mappings only), or `default`."""
        self.read.update(path[:depth] for depth in range(1, len(path) + 1))
        node: Any = self.config
        for key in path:
            if not isinstance(node, Mapping) or key not in node:
                return default
            node = node[key]
        return node

    def use(self, path: KeyPath) -> None:
        """Mark `path` and everything below it as converted."""
        self.used.add(path)

    def why(self, path: KeyPath, reason: str) -> None:
        """Say why `path` (and what is below it) stays unmapped."""
        self.reasons[path] = reason

    def reason(self, path: KeyPath) -> str:
        """The most specific reason known for an unmapped key path."""
        reasons = {**_REASONS, **self.reasons}
        matches = [prefix for prefix in reasons if _under(path, prefix)]
        return reasons[max(matches, key=len)] if matches else _DEFAULT_REASON

    def refuse_misspelt(self, path: KeyPath) -> None:
        """Refuse the unused key path `path` when a key in it is a misspelling of one convert reads at its level
        (`loop: {max_step: ...}`), which would leave the run without what the config meant."""
        for depth in range(len(path)):
            if path[: depth + 1] not in self.read:
                known = {read[depth] for read in self.read if len(read) > depth and read[:depth] == path[:depth]}
                parent: Any = self.config
                for key in path[:depth]:  # read without being recorded as read
                    parent = parent[key]
                if isinstance(parent, Mapping):
                    _refuse_misspelt(path[: depth + 1], map(str, known), parent)
                return

    def unused(self) -> list[tuple[KeyPath, Any]]:
        """Every leaf not converted, in file order."""
        return [
            (path, value)
            for path, value in _leaves(self.config, ())
            if not any(_under(path, used) for used in self.used)
        ]


class _Output:
    """The cs-lightning config being written, and the report of where each value came from."""

    def __init__(self, source: _Source, report: Report) -> None:
        self.config: dict[str, Any] = {}
        self.source = source
        self.report = report

    def set(self, dst: str, value: Any, src: KeyPath | None) -> None:
        node = self.config
        *parents, last = dst.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
        if src is not None:
            self.record(src, dst)

    def record(self, src: KeyPath, dst: str) -> None:
        """Say that the source key `src` (and all below it) went into `dst`."""
        self.source.use(src)
        self.report.mapped.append((src, dst))

    def take(self, src: KeyPath, dst: str, check: type | tuple[type, ...] | None = None) -> Any:
        """Copy the source value at `src` (if present) to `dst`; returns it."""
        value = self.source.get(src)
        if value is None:
            return None
        if check is not None and (isinstance(value, bool) or not isinstance(value, check)):
            raise ConfigError(src, f"expected {_type_names(check)}, got {value!r}; fix: correct this value")
        self.set(dst, value, src)
        return value


# torch and Lightning count steps in int64
_INT64_MAX = 2**63 - 1


def _take_count(out: _Output, src: KeyPath, dst: str, minimum: int = 1, maximum: int = _INT64_MAX) -> int | None:
    """Copy the whole number at `src` (if present) to `dst` after checking it lies in [minimum, maximum]."""
    value = out.source.get(src)
    if value is None:
        return None
    check_whole_number(src, value, minimum, maximum)
    out.set(dst, value, src)
    return value


def _type_names(check: type | tuple[type, ...]) -> str:
    types = check if isinstance(check, tuple) else (check,)
    return " or ".join(t.__name__ for t in types)


# ---------------------------------------------------------------------- shared parts


def _precision(out: _Output, enabled_key: KeyPath, type_key: KeyPath, half_type: str | None = None) -> None:
    """Mixed-precision switch and format -> trainer.precision (`half_type`: the format, when `type_key`
    holds a switch rather than its name, as legacy `use_bfloat16` does)."""
    enabled, given = out.source.get(enabled_key), out.source.get(type_key)
    if enabled is None and given is None:
        return
    if enabled is False:
        out.set("trainer.precision", "32-true", enabled_key)
        if given is not None:
            out.record(type_key, "trainer.precision")
        return
    fp16_type = half_type or given or "float16"  # cerebras.pytorch's default half type
    if fp16_type not in _PRECISION:
        raise ConfigError(type_key, f"unknown half-precision type {fp16_type!r}; fix: use one of {sorted(_PRECISION)}")
    for key, value in ((enabled_key, enabled), (type_key, given)):  # the keys the source has
        if value is not None:
            out.set("trainer.precision", _PRECISION[fp16_type], key)
    if fp16_type == "cbfloat16":
        out.report.notes.append("cbfloat16 is a CS-X format; bf16-mixed is the closest Lightning precision")
    if fp16_type == "float16":
        out.report.notes.append("16-mixed needs a GPU; on CPU use bf16-mixed")


def _clipping(out: _Output, prefix: KeyPath) -> None:
    """max_gradient_norm / max_gradient_value -> trainer.gradient_clip_val/_algorithm."""
    norm, value = (*prefix, "max_gradient_norm"), (*prefix, "max_gradient_value")
    if out.source.get(norm) is not None and out.source.get(value) is not None:
        raise ConfigError(
            prefix,
            "both max_gradient_norm and max_gradient_value are set; fix: keep one (Lightning clips one way)",
        )
    for key, algorithm in ((norm, "norm"), (value, "value")):
        if out.take(key, "trainer.gradient_clip_val", (int, float)) is not None:
            out.set("trainer.gradient_clip_algorithm", algorithm, None)


def _loop(out: _Output, keys: Mapping[str, KeyPath]) -> None:
    """Steps, epochs, evaluation cadence and gradient accumulation -> trainer.*.

    Model Zoo counts optimizer steps; Lightning's val_check_interval counts batches,
    so an integer eval_frequency is multiplied by grad_accum_steps.
    """
    get = out.source.get
    accum = _take_count(out, keys["grad_accum_steps"], "trainer.accumulate_grad_batches") or 1
    systems = out.config.get("trainer", {}).get("devices", 1)  # num_csx, taken before
    if accum * systems > 1:
        split = " * ".join(
            [*([f"num_csx={systems}"] if systems > 1 else []), *([f"grad_accum_steps={accum}"] if accum > 1 else [])]
        )
        out.report.notes.append(
            f"{split}: Model Zoo's batch_size is the global batch, a Lightning batch is one micro-batch of one "
            f"device: use batch_size / {accum * systems} in your DataModule"
        )
    max_steps = _take_count(out, keys["max_steps"], "trainer.max_steps")
    if max_steps is None:
        _take_count(out, keys["num_steps"], "trainer.max_steps")
    else:  # Model Zoo: each run trains num_steps more, up to max_steps in all; Lightning has the total only
        out.source.why(keys["num_steps"], "Lightning's trainer.max_steps, from max_steps, is the only step count")
        num_steps = get(keys["num_steps"])
        if type(num_steps) is int and num_steps < max_steps:  # not a bool
            out.report.notes.append(
                f"num_steps={num_steps} < max_steps={max_steps}: a Model Zoo run stops after num_steps more steps, "
                f"the converted one trains up to step {max_steps} (pass --trainer.max_steps to stop sooner)"
            )
    _take_count(out, keys["num_epochs"], "trainer.max_epochs")
    frequency = get(keys["eval_frequency"])
    if isinstance(frequency, bool) or not isinstance(frequency, (int, float, type(None))):
        raise ConfigError(keys["eval_frequency"], f"expected a number of steps, got {frequency!r}")
    if isinstance(frequency, int) and not 1 <= frequency * accum <= _INT64_MAX:
        raise ConfigError(
            keys["eval_frequency"],
            f"expected a whole number of steps from 1 to {_INT64_MAX // accum}, got {frequency!r}; "
            "fix: give one in that range",
        )
    if isinstance(frequency, float) and not 0 < frequency <= 1:
        raise ConfigError(
            keys["eval_frequency"],
            f"a fraction of an epoch must lie in (0, 1], got {frequency!r}; fix: give one, or a whole number of steps",
        )
    if isinstance(frequency, int):
        out.set("trainer.val_check_interval", frequency * accum, keys["eval_frequency"])
        out.set("trainer.check_val_every_n_epoch", None, None)
    elif isinstance(frequency, float):
        out.set("trainer.val_check_interval", frequency, keys["eval_frequency"])
    _take_count(out, keys["eval_steps"], "trainer.limit_val_batches")


def _checkpoint_every(out: _Output, key: KeyPath) -> None:
    steps = out.source.get(key)
    if steps is None:
        return
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= _INT64_MAX:
        raise ConfigError(
            key, f"expected a whole number of steps from 1 to {_INT64_MAX}, got {steps!r}; fix: give one in that range"
        )
    callback = {"class_path": _CHECKPOINT_CALLBACK, "init_args": {"every_n_train_steps": steps, "save_top_k": -1}}
    out.set("trainer.callbacks", [callback], key)


def _optimizer(
    out: _Output,
    name: str,
    args: Mapping[str, Any],
    args_key: KeyPath,
    read_apart: Collection[str] = (),
    name_key: KeyPath | None = None,
) -> None:
    """A Model Zoo optimizer -> `optimizer: {TorchName: {args}}`, argument by argument.

    Model Zoo's spellings become torch's (`epsilon` is `eps`, `beta1`/`beta2` are `betas`); the
    config's numbers always win over the cerebras.pytorch defaults written out where torch's
    differ. Arguments torch's class does not take stay unmapped, with that reason; a misspelling of one, or of
    a key of the block ``read_apart`` (the legacy layout's clipping, accumulation...), is refused, as is
    a name neither torch nor cerebras.pytorch has (said at ``name_key``, by default ``args_key``).
    """
    torch_cls = torch_optimizers().get(name.lower())
    if torch_cls is None and name.lower() not in _CEREBRAS_ONLY_OPTIMIZERS:
        known = sorted({*(cls.__name__ for cls in torch_optimizers().values()), "Lamb", "Lion"})
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        raise ConfigError(
            name_key or args_key,
            f"unknown optimizer {name!r}, neither cerebras.pytorch's nor torch.optim's; fix: "
            + (f"did you mean {' or '.join(close)}?" if close else f"name one of {', '.join(known)}"),
        )
    if torch_cls is None:
        out.source.why(
            args_key,
            f"{name} is a cerebras.pytorch optimizer with no torch.optim "
            "counterpart: write an optimizer: block by hand",
        )
        return
    params = inspect.signature(torch_cls).parameters
    accepted = set(params) - {"params"}
    converted: dict[str, Any] = {}
    for arg, value in args.items():
        arg_key = (*args_key, arg)
        target = _RENAMED_BY_TORCH.get(torch_cls, {}).get(arg) or MODEL_ZOO_ALIASES.get(arg, arg)
        if arg == "adjust_learning_rate":
            _per_layer_scales(out, arg_key)
        elif arg == "correct_bias" and value is True and torch_cls in (torch.optim.Adam, torch.optim.AdamW):
            out.record(arg_key, "optimizer (torch's Adam always corrects the bias)")
        elif arg in _BETAS and "betas" in accepted:
            continue  # joined into betas below
        elif target in accepted:
            if target != arg and target in args:
                raise ConfigError(arg_key, f"Model Zoo's spelling of {target}, which is given too; fix: keep only one")
            converted[target] = _numeric(params[target].default, value, arg_key, out.report.notes)
            out.record(arg_key, f"optimizer.{torch_cls.__name__}.{target}")
        elif arg == "params" and isinstance(value, list):
            _tagged_groups(out, value, arg_key)
        else:
            betas = _BETAS if "betas" in accepted else ()
            _refuse_misspelt(arg_key, [*accepted, *MODEL_ZOO_ALIASES, *betas, *_READ_BY_CONVERT, *read_apart], args)
            out.source.why(arg_key, f"torch.optim.{torch_cls.__name__} has no argument {target!r}")
    if "betas" in accepted:
        _joined_betas(out, torch_cls, args, args_key, converted)
    for arg, default in CEREBRAS_DEFAULTS.get(name.lower(), {}).items():  # written out: the config keeps its numbers
        if arg not in converted:
            converted[arg] = default
            out.report.notes.append(
                f"optimizer {torch_cls.__name__}: {arg}={default} written out, "
                "cerebras.pytorch's default, which differs from torch's"
            )
    if torch_cls in _DIFFERENT_ALGORITHM:
        out.report.notes.append(f"optimizer {torch_cls.__name__}: {_DIFFERENT_ALGORITHM[torch_cls]}")
    out.set("optimizer", {torch_cls.__name__: converted}, None)


# Optimizer arguments convert reads that are no torch argument (nor a spelling of one).
_READ_BY_CONVERT = ("adjust_learning_rate", "correct_bias", "params")


# How alike a key must be to one convert reads to be taken for its misspelling: typos score 0.88-0.97
# (optimiser, max_step, grad_accum_step), the real Model Zoo keys convert leaves out at most 0.79
# (load_checkpoint_states: checkpoint_steps).
_CLOSE = 0.85


def _refuse_misspelt(key: KeyPath, known: Iterable[str], given: Iterable[Any]) -> None:
    """Refuse the key at ``key`` when it is a misspelling of one of the ``known`` names not ``given``: left
    unmapped, it would be a setting the run silently goes without."""
    known = set(known)
    close = difflib.get_close_matches(str(key[-1]), sorted(known - set(given)), n=1, cutoff=_CLOSE)
    if close and key[-1] not in known:
        raise ConfigError(
            key, f"no key of this name is read here; did you mean {close[0]!r}? fix: correct its spelling"
        )


# Model Zoo 1.x writes torch's `betas` pair as two keys.
_BETAS = ("beta1", "beta2")

# Arguments torch's class of the same name calls otherwise, with the same meaning.
_RENAMED_BY_TORCH: dict[type, dict[str, str]] = {
    torch.optim.Adafactor: {"decay_rate": "beta2_decay", "clip_threshold": "d"}
}

# Where torch's algorithm of the same name is not cerebras.pytorch's, for the notes (and so the file's comments).
_DIFFERENT_ALGORITHM = {
    torch.optim.Adafactor: (
        "not the same algorithm as cerebras.pytorch's (and Model Zoo's) Adafactor, which is HuggingFace's with "
        "scale_parameter=True, relative_step=False: (1) Cerebras steps by lr * max(eps2, RMS(param)), torch by "
        "min(lr, 1/sqrt(step)) * max(eps2, RMS(param)), so the two part once step > 1/lr**2; (2) Cerebras adds "
        "eps1=1e-30 to the squared gradient, torch floors the variance estimates at its eps1 (None: the dtype's "
        "machine epsilon), kept here since 1e-30 squared is 0 in float32; (3) weight decay: Cerebras subtracts "
        "weight_decay * lr * max(eps2, RMS(param)) * param, torch multiplies by 1 - lr * weight_decay. Alike: "
        "decay_rate is torch's beta2_decay (-0.8), clip_threshold its d (1.0), no first moment (beta1=None)"
    )
}


def _joined_betas(
    out: _Output, torch_cls: type, args: Mapping[str, Any], args_key: KeyPath, converted: dict[str, Any]
) -> None:
    """Model Zoo 1.x's `beta1`/`beta2` -> torch's `betas: [beta1, beta2]`; a missing one takes the
    default, as cerebras.pytorch did (its betas default, (0.9, 0.999) for every class torch also has,
    is torch's)."""
    given = [beta for beta in _BETAS if beta in args]
    if not given:
        return
    if "betas" in args:
        raise ConfigError(
            (*args_key, given[0]), "Model Zoo's spelling of a part of betas, which is given too; fix: keep only betas"
        )
    default = inspect.signature(torch_cls).parameters["betas"].default
    betas = [
        _numeric(fallback, args[beta], (*args_key, beta), out.report.notes) if beta in args else fallback
        for beta, fallback in zip(_BETAS, default)
    ]
    converted["betas"] = betas
    for beta in given:
        out.record((*args_key, beta), f"optimizer.{torch_cls.__name__}.betas")
    missing = [f"{beta}={fallback}" for beta, fallback in zip(_BETAS, default) if beta not in args]
    if missing:
        out.report.notes.append(
            f"optimizer {torch_cls.__name__}: betas {betas}: {', '.join(missing)} not given, cerebras.pytorch's default"
        )


def _numeric(default: Any, value: Any, key: KeyPath, notes: list[str]) -> Any:
    """`value` checked as a number where torch's default (`default`) is one, element-wise for a tuple.

    Text that reads as a number (`"2.0e-4"`) is that number, noted, as Model Zoo float()s a
    learning rate given as text; other text, or a bool, is refused.
    """
    if isinstance(default, tuple) and isinstance(value, list) and len(value) == len(default):
        return [_numeric(part, item, (*key, i), notes) for i, (part, item) in enumerate(zip(default, value))]
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    number = number_in_text(value)  # None for a bool too: torch would run lr=True as 1.0
    if number is None:
        raise ConfigError(key, f"expected a number, got {value!r}; fix: write a number such as 1.0e-4")
    notes.append(f"{format_key_path(key)}: the text {value!r} read as the number {number!r}")
    return number


def _tagged_groups(out: _Output, groups: list[Any], key: KeyPath) -> None:
    """Model Zoo 2.x's per-tag parameter groups (`params: [{params: [globs], tag: ...}]`): no `param_groups:` shape."""
    tags = [group.get("tag") for group in groups if isinstance(group, Mapping)]
    out.source.why(key, "Model Zoo parameter group: see the notes")
    out.report.notes.append(
        f"{format_key_path(key)}: {len(groups)} parameter groups by tag ({', '.join(map(str, tags))}) not converted: "
        "in cerebras.pytorch a parameter takes every tag whose globs match it, and the tags pick the groups each "
        "scheduler sets; cs-lightning's param_groups: put each parameter in one group, to scale one schedule "
        "(ScalePerParamLR). Build these groups, tagged, in your LightningModule's configure_optimizers"
    )


# ------------------------------------------------------------------------ schedulers


def _scheduler_class(name: str, key: KeyPath) -> type:
    """A scheduler name as Model Zoo wrote it (`Linear`, `CosineDecay`, `LinearLR`) -> class; an
    unknown one is refused in the words `cs-lightning schedule` uses for it."""
    try:
        return schedulers.resolve(name)
    except ConfigError as err:
        raise err.under(*key) from None


def _canonical(block: Any, key: KeyPath) -> dict[str, Any]:
    """One scheduler block -> `{ClassName: {args}}` with the class's own names, children too."""
    name, args, args_key = parse_block(block, key, "scheduler")
    cls = _scheduler_class(name, args_key)  # the name is the key, as in schedulers[0].Name
    args = with_new_names(cls, args, args_key)
    if isinstance(args.get("schedulers"), list):
        args["schedulers"] = [
            _canonical(child, (*args_key, "schedulers", i)) for i, child in enumerate(args["schedulers"])
        ]
    if isinstance(args.get("scheduler"), Mapping):
        args["scheduler"] = _canonical(args["scheduler"], (*args_key, "scheduler"))
    return {cls.__name__: args}


def _legacy_item(item: Any, key: KeyPath, notes: list[str]) -> tuple[dict[str, Any], str | None]:
    """`{scheduler: Linear, steps: 10, ...}` -> (`{LinearLR: {total_iters: 10, ...}}`, main_scheduler).

    Arguments Model Zoo 1.9 accepted and never read are dropped, each with a warning in `notes`.
    """
    if not isinstance(item, Mapping) or not isinstance(item.get("scheduler"), str):
        raise ConfigError(
            key,
            f"expected {{scheduler: Name, ...}}, got {item!r}; fix: name the schedule, e.g. "
            "{scheduler: Linear, initial_learning_rate: 0.0, end_learning_rate: 0.001, steps: 100}",
        )
    args = dict(item)
    cls = _scheduler_class(args.pop("scheduler"), (*key, "scheduler"))
    main = args.pop("main_scheduler", None)
    for ignored, meaning in _IGNORED_BY_1_9.get(cls.__name__, {}).items():
        if ignored in args:
            notes.append(f"warning: {format_key_path((*key, ignored))}: {args.pop(ignored)!r} dropped: {meaning}")
    return {cls.__name__: with_new_names(cls, args, key)}, main


def _legacy_schedule(spec: Any, key: KeyPath, notes: list[str]) -> list[dict[str, Any]]:
    """Legacy `learning_rate: [...]` (or one dict) -> a list with one Cerebras-shape block."""
    items = spec if isinstance(spec, list) else [spec]
    converted = [
        _legacy_item(item, (*key, i) if isinstance(spec, list) else key, notes) for i, item in enumerate(items)
    ]
    blocks = [block for block, _ in converted]
    mains = {str(main).lower() for _, main in converted if main is not None}
    if len(mains) > 1:
        raise ConfigError(key, f"conflicting main_scheduler values {sorted(mains)}; fix: use one")
    if len(blocks) == 1:
        return blocks
    if mains & {"chained", "chainedlr", "chainedscheduler"}:
        return [{"ChainedScheduler": {"schedulers": blocks}}]
    return [{"SequentialLR": {"schedulers": blocks}}]


def _legacy_schedulers(out: _Output, learning_rate: Mapping[str, Any] | list[Any]) -> None:
    """`optimizer.learning_rate: [...]` -> `schedulers:`; a refusal is said at the key as written."""
    key: KeyPath = ("optimizer", "learning_rate")
    blocks = _legacy_schedule(learning_rate, key, out.report.notes)
    (block,), at = blocks, (*key, 0)
    if "param_groups" in out.config:  # as Model Zoo 2.x writes muP schedules
        blocks, at = [{"ScalePerParamLR": {"scheduler": block}}], (*at, "ScalePerParamLR", "scheduler")
    try:
        _schedulers(out, blocks, key)
    except ConfigError as error:
        raise _legacy_as_written(error, learning_rate, key, block, at) from None


def _legacy_as_written(error: ConfigError, spec: Any, key: KeyPath, block: dict[str, Any], at: KeyPath) -> ConfigError:
    """``error`` from building ``block``, which the legacy list ``spec`` at ``key`` became, at ``at``: said at
    the key and in the argument names the list was written with (``learning_rate[0].steps``)."""
    items = spec if isinstance(spec, list) else [spec]
    written = [(*key, i) for i in range(len(items))] if isinstance(spec, list) else [key]
    ((name, args),) = block.items()
    if len(items) == 1:
        built = [(*at, name)]
    else:
        built = [(*at, name, "schedulers", i, *child) for i, child in enumerate(args["schedulers"])]
    return as_written(error, items, written, built, key)


def _with_milestones(block: dict[str, Any], built: Any) -> dict[str, Any]:
    """`block` with every SequentialLR's milestones written out, as `build` inferred them."""
    ((name, args),) = block.items()
    args = dict(args)
    if isinstance(args.get("schedulers"), list):
        args["schedulers"] = [
            _with_milestones(child, child_built) for child, child_built in zip(args["schedulers"], built.schedulers)
        ]
        if "milestones" not in args and hasattr(built, "milestones"):
            args["milestones"] = list(built.milestones)
    if isinstance(args.get("scheduler"), Mapping):
        args["scheduler"] = _with_milestones(args["scheduler"], built.scheduler)
    return {name: args}


def _schedulers(out: _Output, blocks: list[dict[str, Any]], src: KeyPath) -> None:
    """Check the converted blocks by building them, then write `schedulers:` with milestones.

    Errors name the key path in the Model Zoo file (`src`[i]...), where `build` would say schedulers[i].
    """
    written = []
    for i, block in enumerate(blocks):
        (built,) = schedulers.build(block, probe_optimizer(block), key=(*src, i))
        written.append(_with_milestones(block, built))
    out.set("schedulers", written, src)
    tags = named_tags(blocks)
    if tags:
        out.report.notes.append(
            f"the schedules target param groups tagged {tags}, but an optimizer: block "
            "builds one untagged group: build the optimizer with those 'tags' and these "
            "schedulers in your LightningModule's configure_optimizers instead"
        )


def probe_optimizer(*blocks: Any) -> torch.optim.Optimizer:
    """A throwaway SGD with one untagged group plus one group per tag the blocks name.

    Building a schedule on it checks names, arguments and milestones without a model.
    """
    return torch.optim.SGD(param_groups.probe([], named_tags(list(blocks))), lr=0.1)


# ---------------------------------------------------------------------------- layouts


def _trainer_layout(out: _Output) -> None:
    src = out.source
    trainer = src.get(("trainer",))
    if isinstance(trainer, Mapping) and "init" not in trainer and "max_steps" in trainer:
        raise ConfigError(  # trainer: holds Lightning's Trainer arguments: what convert writes
            "trainer",
            "this looks like a cs-lightning run.yaml already (trainer: holds Lightning's Trainer arguments, such"
            " as max_steps); fix: run it with cs-lightning fit --config, or convert the Model Zoo YAML it came from",
        )
    if not isinstance(src.get(_INIT), Mapping):
        raise ConfigError(
            _INIT,
            "a Model Zoo Trainer config needs trainer: {init: {...}}; fix: check the file is a Trainer config",
        )
    _take_count(out, (*_INIT, "seed"), "seed_everything", 0, SEED_MAX)
    out.take((*_INIT, "model_dir"), "trainer.default_root_dir", str)
    backend_type = (*_INIT, "backend", "backend_type")
    backend = src.get(backend_type)
    if backend is not None:
        out.set("trainer.accelerator", "csx", backend_type)
        out.set("trainer.strategy", "csx", None)
        if str(backend).upper() != "CSX":
            out.report.notes.append(
                f"backend_type {backend}: cs-lightning emulates a CS-X on this machine's CPU or GPU either way"
            )
    _take_count(out, (*_INIT, "backend", "cluster_config", "num_csx"), "trainer.devices")
    precision = (*_INIT, "precision")
    _precision(out, (*precision, "enabled"), (*precision, "fp16_type"))
    _clipping(out, precision)
    _loss_scaling(out, (*precision, "loss_scaling_factor"))
    _loop(
        out,
        {
            k: (*_INIT, "loop", k)
            for k in ("max_steps", "num_steps", "num_epochs", "eval_frequency", "eval_steps", "grad_accum_steps")
        },
    )
    _checkpoint_every(out, (*_INIT, "checkpoint", "steps"))
    _take_count(out, (*_INIT, "logging", "log_steps"), "trainer.log_every_n_steps")
    _model_scales(out, (*_INIT, "model"))
    optimizer = src.get((*_INIT, "optimizer"))
    if optimizer is not None:
        name, args, args_key = parse_block(optimizer, (*_INIT, "optimizer"), "optimizer")
        if not args and name.lower() in torch_optimizers():
            out.record(args_key, "optimizer")
        _optimizer(out, name, args, args_key)
    spec = src.get((*_INIT, "schedulers"))
    if spec:
        items = spec if isinstance(spec, list) else [spec]
        blocks = [_canonical(block, (*_INIT, "schedulers", i)) for i, block in enumerate(items)]
        if "param_groups" in out.config:
            # muP scales apply through ScalePerParamLR, which Model Zoo adds where a config leaves it out
            blocks = [
                block if "ScalePerParamLR" in block else {"ScalePerParamLR": {"scheduler": block}} for block in blocks
            ]
        _schedulers(out, blocks, (*_INIT, "schedulers"))
    out.take(("trainer", "fit", "ckpt_path"), "ckpt_path", str)


def _legacy_layout(out: _Output) -> None:
    src = out.source
    _take_count(out, ("runconfig", "seed"), "seed_everything", 0, SEED_MAX)
    out.take(("runconfig", "model_dir"), "trainer.default_root_dir", str)
    _take_count(out, ("runconfig", "num_csx"), "trainer.devices")
    out.take(("runconfig", "checkpoint_path"), "ckpt_path", str)
    mixed, use_bfloat16 = ("model", "mixed_precision"), ("model", "use_bfloat16")
    bfloat16 = src.get(use_bfloat16)
    if bfloat16 is None or src.get(("model", "fp16_type")) is not None:
        _precision(out, mixed, ("model", "fp16_type"))
    elif bfloat16 or src.get(mixed) is not None:
        # Model Zoo 1.x: mixed_precision switches half precision on; use_bfloat16 picks bfloat16 over float16
        _precision(out, mixed, use_bfloat16, "bfloat16" if bfloat16 else "float16")
    _clipping(out, ("optimizer",))
    _loss_scaling(out, ("optimizer", "loss_scaling_factor"))
    accum = ("optimizer" if src.get(("optimizer", "grad_accum_steps")) is not None else "runconfig", "grad_accum_steps")
    _loop(
        out,
        {
            **{k: ("runconfig", k) for k in ("max_steps", "num_steps", "num_epochs", "eval_frequency", "eval_steps")},
            "grad_accum_steps": accum,
        },
    )
    every = "checkpoint_steps" if src.get(("runconfig", "checkpoint_steps")) is not None else "save_checkpoint_steps"
    _checkpoint_every(out, ("runconfig", every))
    _take_count(out, ("runconfig", "log_steps"), "trainer.log_every_n_steps")
    optimizer = src.get(("optimizer",))
    if not isinstance(optimizer, Mapping) or not isinstance(optimizer.get("optimizer_type"), str):
        raise ConfigError(
            ("optimizer", "optimizer_type"),
            "a legacy Model Zoo config names its optimizer here; fix: add optimizer_type: AdamW (or SGD, ...)",
        )
    out.record(("optimizer", "optimizer_type"), "optimizer")
    learning_rate = optimizer.get("learning_rate")
    handled = {
        "optimizer_type",
        "learning_rate",
        "max_gradient_norm",
        "max_gradient_value",
        "loss_scaling_factor",
        "grad_accum_steps",
        "adjust_learning_rate",
        "log_summaries",
        "disable_lr_steps_reset",
        *_LOSS_SCALING,
    }
    args = {k: v for k, v in optimizer.items() if k not in handled}
    if learning_rate is not None and not isinstance(learning_rate, (Mapping, list)):
        args["learning_rate"] = learning_rate  # a number, or text Model Zoo float()ed: checked as the optimizer's lr
    _optimizer(
        out,
        optimizer["optimizer_type"],
        args,
        ("optimizer",),
        read_apart=handled,
        name_key=("optimizer", "optimizer_type"),
    )
    _decay_exemptions(out)
    _per_layer_scales(out, ("optimizer", "adjust_learning_rate"))
    if isinstance(learning_rate, (Mapping, list)):
        _legacy_schedulers(out, learning_rate)
    if "disable_lr_steps_reset" in optimizer:
        out.record(("optimizer", "disable_lr_steps_reset"), "schedulers (each stage counts from its milestone)")
        out.report.notes.append(
            f"optimizer.disable_lr_steps_reset: {optimizer['disable_lr_steps_reset']!r}: in Model Zoo 1.9 it was "
            "handed to the CS system's schedulers only, asking a scheduler in a sequence to go on counting the "
            "global step instead of restarting from 0 at its milestone (the CPU/GPU path and cerebras.pytorch 2.x "
            "always restart, and 2.x removed the flag); the converted SequentialLR restarts each scheduler's count "
            "at its milestone, as 2.x does"
        )
    src.why(("optimizer", "log_summaries"), "Model Zoo summaries: use Lightning loggers")
    for key in _LOSS_SCALING:
        src.why(
            ("optimizer", key),
            "Cerebras dynamic loss scaling: Lightning's 16-mixed scales with torch's GradScaler and its own "
            "settings; bf16-mixed needs no scaling",
        )


def _decay_exemptions(out: _Output) -> None:
    """Say that the layout's Model Zoo trainer exempted biases and normalization layers from weight decay.

    Its optim_utils (``partition_params_groups_with_weight_decay``) split the parameters into two groups, one of
    every bias and every LayerNorm/BatchNorm/InstanceNorm/GroupNorm parameter with weight_decay 0: the
    optimizer: block decays them all."""
    optimizer = out.config.get("optimizer")
    ((name, args),) = optimizer.items() if isinstance(optimizer, Mapping) else ((None, {}),)
    decay = args.get("weight_decay") if isinstance(args, Mapping) else None
    if isinstance(decay, (int, float)) and decay > 0:
        out.report.notes.append(
            f"optimizer {name}: weight_decay {decay} applies to every parameter here, while Model Zoo's trainer of "
            "this layout gave biases and normalization-layer parameters (LayerNorm, BatchNorm, InstanceNorm, "
            "GroupNorm) none, in a second group with weight_decay 0.0; to match, return those two groups from "
            "configure_optimizers"
        )


# Model Zoo 1.x's dynamic loss scaling settings, read by its GradScaler, not by the optimizer.
_LOSS_SCALING = ("initial_loss_scale", "min_loss_scale", "max_loss_scale", "steps_per_increase")


def _per_layer_scales(out: _Output, key: KeyPath) -> None:
    """muP's `adjust_learning_rate: {layer tag: scale}` -> `param_groups:` entries, found by
    parameter name as that Model Zoo release did (`cs_lightning.mup`); the schedule is wrapped
    in ScalePerParamLR, which multiplies each group's scale in."""
    scales = out.source.get(key)
    if not scales:
        return
    entries, notes, skipped = mup.param_group_entries(scales, key, out.report.layout)
    for path in skipped:
        out.source.why(path, "muP per-layer learning-rate scale not converted: see the warning in the notes")
    _add_param_groups(out, entries)
    for entry in entries:
        out.record((*key, entry["tag"]), "param_groups")
    out.report.notes.extend(notes)


def _model_scales(out: _Output, key: KeyPath) -> None:
    """The per-layer learning-rate scales a Model Zoo 2.3+ model derives from its muP base sizes."""
    model = out.source.get(key)
    entries, notes = mup.derived_entries(model, key)
    _add_param_groups(out, entries)
    out.report.notes.extend(notes)
    if entries:  # the base sizes became the groups' scales: not "unmapped"
        for name in model:
            if str(name).startswith("mup_base_"):
                out.record((*key, name), "param_groups")


def _add_param_groups(out: _Output, entries: list[dict[str, Any]]) -> None:
    """Add `param_groups:` entries; one for a tag already there replaces its scale (Model Zoo:
    the optimizer's adjust_learning_rate overrides the scale the model sets). A scale of 1
    needs no group (Model Zoo 2.3+ makes none)."""
    merged = {entry["tag"]: entry for entry in out.config.pop("param_groups", [])}
    merged.update((entry["tag"], entry) for entry in entries)
    kept = [entry for entry in merged.values() if entry["adjust_learning_rate"] != 1]
    if kept:
        out.set("param_groups", kept, None)


def _scaled_constant_rate(out: _Output) -> None:
    """Per-layer scales beside a constant learning rate: ScalePerParamLR over ConstantLR applies them.

    A schedule is what multiplies the scales in, so `fit` refuses scales that no ScalePerParamLR
    reads; written without one, the converted file would not run."""
    optimizer = out.config.get("optimizer")
    if "param_groups" not in out.config or "schedulers" in out.config or not isinstance(optimizer, Mapping):
        return
    ((name, args),) = optimizer.items()
    if not isinstance(args, Mapping) or args.get("lr") is None:
        return
    out.set("schedulers", [{"ScalePerParamLR": {"scheduler": {"ConstantLR": {"learning_rate": args["lr"]}}}}], None)
    out.report.notes.append(
        f"the learning rate is constant ({name} lr {args['lr']}) and param_groups scale it per layer: "
        "schedulers: ScalePerParamLR over ConstantLR multiplies each group's scale in"
    )


def _loss_scaling(out: _Output, key: KeyPath) -> None:
    """'dynamic' loss scaling is what Lightning's 16-mixed does; bf16 needs none."""
    value = out.source.get(key)
    if value == "dynamic":
        out.record(key, "trainer.precision (16-mixed scales dynamically; bf16 needs no scaling)")


def _layout(config: Any) -> str:
    if not isinstance(config, Mapping):
        raise ConfigError(
            "<top level>",
            f"expected a mapping of sections, got {type(config).__name__}; "
            "fix: give a Cerebras Model Zoo config (trainer: {init: ...} or "
            "train_input/model/optimizer/runconfig)",
        )
    if "trainer" in config:
        if isinstance(config["trainer"], list):
            raise ConfigError(
                "trainer",
                "a multi-phase Trainer config (trainer: [...]) holds several runs; "
                "fix: convert each phase as its own file",
            )
        return "trainer"
    if "runconfig" in config or (
        isinstance(config.get("optimizer"), Mapping) and "optimizer_type" in config["optimizer"]
    ):
        return "legacy"
    raise ConfigError(
        "<top level>",
        f"not a Cerebras Model Zoo config: found keys {sorted(map(str, config))}; "
        "fix: give a Trainer config (trainer: {init: ..., fit: ...}) or a legacy one "
        "(train_input/model/optimizer/runconfig)",
    )


def model_zoo_layout(config: Mapping[str, Any]) -> str | None:
    """The Model Zoo layout a config read by ``fit`` is in, or None for a cs-lightning config.

    Stricter than `convert`'s reading, where any ``trainer:`` is the Trainer layout: here it must
    hold what Lightning's Trainer never takes (Model Zoo's phases, ``init``/``fit``)."""
    trainer = config.get("trainer")
    if isinstance(trainer, list) or (isinstance(trainer, Mapping) and {"init", "fit"} & set(trainer)):
        return "Trainer layout, trainer: {init: ...}"
    if {"runconfig", "train_input"} & set(config):
        return "legacy layout, train_input/model/optimizer/runconfig"
    return None


def convert(config: Mapping[str, Any], source: str = "<config>") -> tuple[dict[str, Any], Report]:
    """Model Zoo config (parsed YAML) -> (cs-lightning config, report). Pure: touches no file.

    Raises `ConfigError` (a ValueError) naming the Model Zoo key path and the fix.
    """
    layout = _layout(config)
    report = Report(source=source, layout=layout)
    out = _Output(_Source(config), report)
    (_trainer_layout if layout == "trainer" else _legacy_layout)(out)
    _scaled_constant_rate(out)
    out.config.setdefault("trainer", {}).setdefault("strategy", "csx")
    report.unmapped = [(path, value, out.source.reason(path)) for path, value in out.source.unused()]
    for path, _, why in report.unmapped:
        if why == _DEFAULT_REASON:  # a key with a reason of its own is known, not misspelt
            out.source.refuse_misspelt(path)
    return _ordered(out.config), report


def _ordered(config: dict[str, Any]) -> dict[str, Any]:
    order = ["seed_everything", "trainer", "optimizer", "param_groups", "schedulers", "ckpt_path"]
    return {key: config[key] for key in order if key in config}


# ------------------------------------------------------------------------------ files


# What YAML reads as a line break, written escaped.
_ESCAPED_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r", "\x85": "\\x85", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _flow(value: Any) -> str:
    """A value on one line, as YAML flow style (JSON's, a subset, where YAML would break the line: text
    holding a line break)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...")
    return text if "\n" not in text else json.dumps(value, default=str)


def dump(config: Mapping[str, Any], report: Report) -> str:
    """The output file's text: the config, then every unmapped key as a comment."""
    lines = [
        f"# Converted by `cs-lightning convert` from {report.source} ({report.layout} layout).",
        "# Run with: cs-lightning fit --config <this file> --model <your LightningModule> "
        "--data <your LightningDataModule>",
        yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=False).rstrip(),
    ]
    if report.unmapped:
        lines.append("# ---- unmapped: Model Zoo keys with no cs-lightning counterpart (not used) ----")
        # a comment ends at a line break: one in a key (a quoted YAML key may hold one) is written escaped
        lines += [
            f"# {format_key_path(key)}: {_flow(value)}  ({why})".translate(_ESCAPED_BREAKS)
            for key, value, why in report.unmapped
        ]
    if report.notes:  # what differs from the Model Zoo run, next to the numbers it concerns
        lines.append("# ---- notes ----")
        lines += ["# - " + note.replace("\n", " ") for note in report.notes]
    return "\n".join(lines) + "\n"
