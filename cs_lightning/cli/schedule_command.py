"""`cs-lightning schedule`: the configured schedules drawn or tabulated, without building the model."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from cs_lightning import param_groups
from cs_lightning import schedulers as cs_schedulers
from cs_lightning.cli.config_files import merged_config, read_config_file, run_imports
from cs_lightning.cli.error_lines import OneLineParser, unknown_key_error
from cs_lightning.cli.optimization import ADD_AN_OPTIMIZER, check_steps, probe_groups, run_factories
from cs_lightning.cli.output_file import check_output_path, write_output
from cs_lightning.errors import ConfigError

# The top-level keys of a run config (what `fit` takes): `schedule` reads some and passes over the others
RUN_KEYS = (
    "seed_everything", "trainer", "model", "data", "optimizer", "schedulers", "param_groups", "imports", "ckpt_path",
    "weights_only", "lr_scheduler",
)  # fmt: skip


def schedule_command(argv: Sequence[str]) -> None:
    """`cs-lightning schedule --config run.yaml [--steps N] [--out lr.png | --table]`."""
    parser = OneLineParser(
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
    files = [(Path(path), read_config_file(path)) for path in opts.config]
    run_imports(files)
    config = merged_config(files)
    for key in config:  # a misspelt schedulers: would draw a constant learning rate
        if key not in RUN_KEYS:
            raise unknown_key_error([key], 0, sorted(RUN_KEYS), "fit")
    make_optimizer, make_schedulers = run_factories(config, any_tags=True)
    if make_optimizer is None:
        raise ConfigError(
            "optimizer",
            f"no optimizer: and no schedulers: block, nothing to draw; {ADD_AN_OPTIMIZER}",
        )
    if make_schedulers is None:
        make_schedulers = _constant_schedule
    steps = _steps_to_show(opts.steps, config)
    tagged = param_groups.parse(config.get("param_groups"))
    schedulers = make_schedulers(make_optimizer(probe_groups(tagged, config.get("schedulers"), any_tags=True)))
    check_steps(schedulers, steps)  # a value fit would stop at: show nothing
    if opts.out:
        out = _picture_path(opts.out, [path for path, _ in files], opts.force)
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
    if isinstance(steps, int) and 0 < steps <= _MOST_STEPS:
        return steps
    if isinstance(steps, float) and steps.is_integer() and steps > 0:  # YAML reads 1.0e9 as a float
        fix = f"fix: write it as an integer, max_steps: {int(steps)}"
    elif isinstance(steps, int) and steps > _MOST_STEPS:
        fix = f"fix: give at most {_MOST_STEPS} (2**62)"
    else:
        fix = "fix: pass --steps N or set trainer.max_steps, a positive integer"
    key = "--steps" if given is not None else ("trainer", "max_steps")
    raise ConfigError(key, f"need a positive integer number of steps up to 2**62, got {steps!r}; {fix}")


# Steps are int64 tensors; the evenly spaced steps a plot or table samples pass through float64, which
# near 2**63 rounds beyond int64
_MOST_STEPS = 2**62


def _constant_schedule(optimizer: torch.optim.Optimizer) -> list:
    """Without schedulers the optimizer's learning rate holds at every step: show that constant."""
    return [cs_schedulers.ConstantLR(optimizer, learning_rate=optimizer.param_groups[0]["lr"])]


def _picture_path(given: str, configs: Sequence[Path], force: bool) -> Path:
    """The file `--out` names, with `.png` added when it has no extension (what matplotlib
    would write, said out loud), checked as every command's output is."""
    out = Path(given)
    if not out.suffix and not out.is_dir():  # `--out runs`, a folder, means it, not runs.png beside it
        out = out.with_name(out.name + ".png")
    check_output_path(out, configs, force, inputs_are="a --config file", example="lr.png")
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
    write_output(out, buffer.getvalue())
