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

The ``optimizer:``, ``schedulers:`` and ``param_groups:`` blocks are checked completely before
anything is built, written or printed (``--print_config``), and become factories that run in
``configure_optimizers``, after the model is materialized.
``cs-lightning schedule --config run.yaml`` draws or tabulates the configured schedules
without building the model; ``cs-lightning convert modelzoo.yaml -o run.yaml`` turns a
Cerebras Model Zoo config into such a file (`cs_lightning.convert`); ``cs-lightning cache``
shows or clears what earlier runs cached. Any mistake in the
configuration ends the program with one line naming the YAML key path and the fix, and
exit code 2.

`main` is here; the parts: `config_files` (the YAML files and their ``imports:``),
`optimization` (the three blocks, checked and made factories), `block_arguments` (how a later
file or a command-line key combines with them), `checkpoints` (``ckpt_path``
checked), `lightning_cli` (`CSLightningCLI`), `error_lines` (parser errors as one line),
`output_file` (what a command writes), `schedule_command`, `convert_command` and `cache_command`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from tqdm import tqdm

from cs_lightning.cli.cache_command import cache_command
from cs_lightning.cli.config_files import given_config_files, run_imports
from cs_lightning.cli.convert_command import convert_command
from cs_lightning.cli.error_lines import parser_error
from cs_lightning.cli.lightning_cli import CSLightningCLI
from cs_lightning.cli.schedule_command import schedule_command
from cs_lightning.errors import CSLightningError, UsageError, UsageTypeError
from cs_lightning.user_code import users_line

__all__ = ["CSLightningCLI", "main"]


# Commands run before Lightning's parser sees the arguments (its own: fit, validate, test, predict).
_OWN_COMMANDS: dict[str, Callable[[Sequence[str]], None]] = {
    "schedule": schedule_command,
    "convert": convert_command,
    "cache": cache_command,
}


def main(args: Sequence[str] | None = None) -> int:
    """Entry point of the `cs-lightning` console script; returns the exit code.

    Configuration mistakes print one line (`cs-lightning: error: <key path>: ... fix: ...`)
    and return 2 before anything is written; so does a first step the csx trace check
    refuses (no update was applied; the log folder Lightning made is removed), and any other
    cs_lightning refusal during the run (a scheduler that ``configure_optimizers`` builds with a
    bad argument: a `UsageError`, also a CSLightningError, said with the user's line that made
    the call). Ctrl-C returns
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
        imported = run_imports(given_config_files(argv), argv)
        with warnings.catch_warnings():
            # We pass argv explicitly for in-process use; Lightning warns when sys.argv is also set.
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
            # Lightning 2.6's own pytree use, deprecated by torch 2.13: said on every run, nothing for the user to do
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
            CSLightningCLI(args=argv, imported=imported)
    except CSLightningError as err:  # the user's to fix (a config, a scheduler, a step): one line
        _close_progress_bars()
        # under devices=N every rank runs the same config and code into it, so rank 0 says it for all
        return _fail(str(err) + _users_line(err)) if _is_rank_zero() else 2
    except argparse.ArgumentError as err:
        return _fail(str(parser_error(str(err), _OWN_COMMANDS)))
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


def _users_line(err: CSLightningError) -> str:
    """Where the user's code called what refused its arguments (a scheduler built in configure_optimizers):
    the line a traceback would have shown. Empty for a config's mistake: its key path says where."""
    if not isinstance(err, (UsageError, UsageTypeError)):
        return ""
    return users_line(err.__traceback__)


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
    if _is_rank_zero():  # the terminal interrupts every rank of devices=N: rank 0 says it for all
        print("cs-lightning: interrupted", file=sys.stderr)
    return 130


def _is_rank_zero() -> bool:
    return getattr(rank_zero_only, "rank", 0) == 0  # Lightning sets .rank per process


def _close_progress_bars() -> None:
    """End the lines of the progress bars a refused step left drawn: the error then starts a line."""
    for bar in list(getattr(tqdm, "_instances", ())):  # tqdm's own registry of open bars
        bar.close()


def _fail(line: str) -> int:
    print(f"cs-lightning: error: {' '.join(line.split())}", file=sys.stderr)
    return 2
