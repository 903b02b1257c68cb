"""How `--optimizer`, `--schedulers` and `--param_groups` combine with what was given before.

Lightning merges a later ``--config`` file or ``--optimizer.init_args.lr 0.001`` into its
class_path optimizer: the arguments merged, later wins; for another class, only the earlier
arguments it takes are kept. jsonargparse sees our ``optimizer:`` as a plain dict, which it replaces whole and
into which a dotted key writes a string; `OptimizerArgument` gives it Lightning's rule, in
both spellings, with command-line values read as YAML. ``schedulers:`` and ``param_groups:``
are lists, which jsonargparse replaces whole; a dotted key into one is refused by
`WholeListArgument`, since it could only write a malformed entry.

Both subclass jsonargparse's ActionTypeHint (the action that ``type=`` makes), because only
that action receives dotted keys and the value before it (``cfg``): parsing, ``--config``
files and ``--print_config`` then all see the merged block.
"""

from __future__ import annotations

from typing import Any, cast

from jsonargparse import ArgumentParser
from jsonargparse._typehints import ActionTypeHint  # not exported; see the module docstring

from cs_lightning.config_blocks import load_inline
from cs_lightning.errors import ConfigError
from cs_lightning.optimizers import merge_optimizer_blocks, optimizer_help, torch_optimizers


class _BlockArgument(ActionTypeHint):
    """ActionTypeHint that makes actions of its own class when argparse builds one."""

    @classmethod
    def of(cls, typehint: object) -> _BlockArgument:
        """The action to pass as add_argument's `action=` for values of `typehint`."""
        return cls(typehint=cast(type, typehint))  # annotated `type`, takes any type hint (a union here)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args:  # argparse making the action from add_argument's keywords, as the parent does
            kwargs["_typehint"] = self._typehint
            kwargs["_enable_path"] = self._enable_path
            return type(self)(**kwargs)
        return self.parse(*args)

    def parse(self, parser: Any, cfg: Any, value: Any, option: str) -> None:
        super().__call__(parser, cfg, value, option)


class OptimizerArgument(_BlockArgument):
    """`--optimizer`: a later block for the same optimizer merges into the earlier one."""

    def parse(self, parser: Any, cfg: Any, value: Any, option: str) -> None:
        base = self.option_strings[0]
        if option == f"{base}.help":  # --optimizer.help AdamW, as in LightningCLI
            print(optimizer_help(str(value), base))
            parser.exit()
        if isinstance(value, str):  # read as YAML, as in a --config file; jsonargparse would keep a list as text
            value = load_inline(option.removeprefix("--"), value)
        if option != base:  # --optimizer.AdamW.lr 0.001
            value = _dotted_block(option[len(base) + 1 :].split("."), value)
        # what the parent's __call__ does, without its class_path handling, which expects a Namespace
        cfg.update(self._check_type_(value, cfg=cfg, mode=parser.parser_mode), self.dest)

    def _check_type(self, value: Any, append: bool = False, cfg: Any = None, mode: Any = None) -> Any:
        later = super()._check_type(value, append=append, cfg=cfg, mode=mode)
        earlier = cfg.get(self.dest) if cfg else None
        return merge_optimizer_blocks(earlier, later)


def _dotted_block(keys: list[str], value: Any) -> Any:
    """`--optimizer.<keys> value` as a block holding that one value. A single key that is neither
    class_path, init_args nor an optimizer name is an argument: Lightning's `--optimizer.lr 0.001`."""
    if len(keys) == 1 and keys[0] not in ("class_path", "init_args") and keys[0].lower() not in torch_optimizers():
        keys = ["init_args", *keys]
    for key in reversed(keys):
        value = {key: value}
    return value


class WholeListArgument(_BlockArgument):
    """`--schedulers`, `--param_groups`: given whole; a dotted key into the list is refused."""

    def parse(self, parser: Any, cfg: Any, value: Any, option: str) -> None:
        if option not in self.option_strings:
            base = next(o for o in self.option_strings if option.startswith(f"{o}."))
            raise ConfigError(
                option[2:],
                f"a command-line key cannot reach into the {base[2:]}: list (a later value replaces a "
                f"list whole); fix: give the whole block, {base} '[{{...}}]', or put it in a second --config file",
            )
        super().parse(parser, cfg, value, option)


class NullOnlyArgument(_BlockArgument):
    """`--lr_scheduler`: Lightning's key, which a config Lightning's own CLI wrote holds as null; a schedule
    there is refused, saying where it goes."""

    def parse(self, parser: Any, cfg: Any, value: Any, option: str) -> None:
        if value not in (None, "null"):
            raise ConfigError(option.removeprefix("--"), SCHEDULERS_INSTEAD)
        cfg.update(None, self.dest)

    def _check_type(self, value: Any, append: bool = False, cfg: Any = None, mode: Any = None) -> Any:
        if value is not None:  # from a --config file
            raise ConfigError(self.dest, SCHEDULERS_INSTEAD)
        return None


# Where a Lightning scheduler key's schedule goes instead
SCHEDULERS_INSTEAD = (
    "cs-lightning takes a schedulers: list instead, of closed-form schedulers (Cerebras or Lightning spelling), "
    "each stepping every optimizer step; fix: e.g. schedulers: [{StepLR: {initial_learning_rate: 0.001, "
    "step_size: 3, gamma: 0.5}}], or the same as class_path: cs_lightning.schedulers.StepLR with init_args"
)

# The top-level keys `add_block_arguments` adds
BLOCK_KEYS = ("optimizer", "schedulers", "param_groups", "lr_scheduler")


def add_block_arguments(parser: ArgumentParser) -> None:
    """Add --optimizer, --schedulers and --param_groups to ``parser``: `fit` and `schedule` both read the
    blocks of their --config files through these actions, so several files combine alike in both."""
    # dict/list, not Any: jsonargparse would turn an Any holding class_path into a Namespace.
    parser.add_argument(
        "--optimizer",
        action=OptimizerArgument.of(dict | str | None),
        default=None,
        help="Optimizer, {Name: {args}} or class_path/init_args; built after the model. A later "
        "block, or --optimizer.AdamW.lr 0.001, merges its arguments in. --optimizer.help NAME lists its arguments.",
    )
    parser.add_argument(
        "--schedulers",
        action=WholeListArgument.of(list | dict | None),
        default=None,
        help="Closed-form schedulers, Cerebras YAML shapes or class_path/init_args; a later value replaces them.",
    )
    parser.add_argument(
        "--lr_scheduler",
        action=NullOnlyArgument.of(dict | str | None),
        default=None,
        help="Lightning's scheduler key: taken only as null (as Lightning's own configs hold it); schedules go "
        "under schedulers:.",
    )
    parser.add_argument(
        "--param_groups",
        action=WholeListArgument.of(list | None),
        default=None,
        help="Param groups by tag: [{tag:, params: [globs on parameter names], adjust_learning_rate:}].",
    )
