"""`cs-lightning convert modelzoo.yaml -o run.yaml`: a Model Zoo config turned into a run.yaml."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cs_lightning.cli.error_lines import OneLineParser
from cs_lightning.cli.optimization import run_factories
from cs_lightning.cli.output_file import check_output_path, write_output
from cs_lightning.config_blocks import read_yaml
from cs_lightning.convert import Report, convert, dump
from cs_lightning.errors import ConfigError


def convert_file(src: str | Path, out: str | Path, force: bool = False) -> Report:
    """Convert the Model Zoo YAML at `src` and write the cs-lightning YAML to `out`.

    `out` is refused when it is `src` itself (even with `force`: the input would be lost)
    or, unless `force`, when it exists. The text goes through a temporary file renamed
    into place, so an interrupted or failed convert leaves `out` as it was.
    """
    src, out = Path(src), Path(out)
    config, repeated = read_yaml(src, "source", same_value_ok=True)
    check_output_path(out, [src], force, inputs_are="the input file", example="run.yaml")
    text, report = _converted(src, config, repeated)
    write_output(out, text.encode())
    return report


def _converted(src: Path, config: Any, repeated: list[str]) -> tuple[str, Report]:
    """The output file's text and the report, for the Model Zoo config read from ``src``. Its optimizer:,
    schedulers: and param_groups: blocks are checked as `fit` and `schedule` check them: a block they would
    refuse (two schedules of one param group's rate, an argument torch's optimizer rejects) is refused now."""
    converted, report = convert(config, source=str(src))
    # an optimizer left for the user to write (cerebras.pytorch's Lamb) is one the schedules are checked on
    checked = converted if "optimizer" in converted else {**converted, "optimizer": {"SGD": {"lr": 0.1}}}
    try:
        run_factories(checked, any_tags=True)
    except ConfigError as err:
        raise type(err)(f"{err.key} (as converted from {src.name})", err.message) from None
    report.notes += repeated
    return dump(converted, report), report


def convert_command(argv: Sequence[str]) -> None:
    """Print the report once the file is written.

    A mistake raises `ConfigError`; `cs_lightning.cli.main` turns it into the one error line
    and exit code 2 that every subcommand gives, before anything is printed or written.
    """
    parser = OneLineParser(
        prog="cs-lightning convert", description="Convert a Cerebras Model Zoo YAML into a cs-lightning YAML."
    )
    parser.add_argument("source", help="Model Zoo YAML (Trainer or legacy layout)")
    parser.add_argument(
        "-o", "--out", required=True, help="cs-lightning YAML to write (never the input); - prints it instead"
    )
    parser.add_argument("-f", "--force", action="store_true", help="overwrite --out if it exists")
    if any(arg == "--config" or arg.startswith("--config=") for arg in argv):  # as fit and schedule take theirs
        raise ConfigError(
            "--config",
            "convert takes the Model Zoo file as its first argument, not --config; "
            "fix: cs-lightning convert modelzoo.yaml -o run.yaml",
        )
    opts = parser.parse_args(list(argv))
    if opts.out == "-":  # the YAML alone on stdout (to pipe or redirect it), the report on stderr
        text, report = _converted(Path(opts.source), *read_yaml(Path(opts.source), "source", same_value_ok=True))
        sys.stdout.write(text)
        print(report.format(), file=sys.stderr)
        return
    report = convert_file(opts.source, opts.out, force=opts.force)
    print(report.format())
    print(f"wrote {opts.out}")
