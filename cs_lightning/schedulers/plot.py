"""Look at a schedule before training with it: a plot (matplotlib) or a text table.

Both read ``values()``, so they cost one vectorized evaluation and change nothing.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from cs_lightning.schedulers import _checks
from cs_lightning.schedulers.base import Scheduler

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _as_list(schedulers: Scheduler | list[Scheduler]) -> list[Scheduler]:
    items = [schedulers] if isinstance(schedulers, Scheduler) else list(schedulers)
    if not items or not all(isinstance(item, Scheduler) for item in items):
        raise TypeError(f"got {schedulers!r}; give a scheduler or a list of schedulers")
    return items


def _columns(schedulers: list[Scheduler], steps: int) -> list[tuple[str, str, list[float]]]:
    """(key, label, values) per scheduled param group."""
    columns = []
    for scheduler in schedulers:
        values = scheduler.values(steps)
        for group in range(values.shape[1]):
            column = values[:, group].tolist()
            if not all(math.isnan(v) for v in column):
                label = f"{type(scheduler).__name__} group {group}"
                columns.append((scheduler.param_group_key, label, column))
    return columns


def plot(
    schedulers: Scheduler | list[Scheduler], steps: int, out: str | None = None
) -> Figure:
    """Plot the schedules over ``range(steps)``: one panel per key (lr, weight_decay).

    Returns the matplotlib figure, and saves it to ``out`` (format from the extension)
    when given. Needs matplotlib (``pip install cs-lightning[plot]``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("plot needs matplotlib: pip install 'cs-lightning[plot]'") from error
    steps = _checks.integer("plot", "steps", steps, 1)
    columns = _columns(_as_list(schedulers), steps)
    keys = list(dict.fromkeys(key for key, _, _ in columns))
    figure = Figure(figsize=(7, 2.6 * len(keys)), layout="constrained")
    axes = figure.subplots(len(keys), 1, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys):
        for column_key, label, values in columns:
            if column_key == key:
                ax.plot(range(steps), values, label=label)
        ax.set_ylabel(key)
        ax.legend(fontsize="small")
    axes[-1].set_xlabel("optimizer step")
    if out is not None:
        figure.savefig(out)
    return figure


def table(schedulers: Scheduler | list[Scheduler], steps: int, every: int | None = None) -> str:
    """The schedules as text: a row every ``every`` steps (default: about 20 rows) and the
    last step, a column per scheduled param group."""
    steps = _checks.integer("table", "steps", steps, 1)
    every = _checks.integer("table", "every", max(1, steps // 20) if every is None else every, 1)
    columns = _columns(_as_list(schedulers), steps)
    rows = sorted(set(range(0, steps, every)) | {steps - 1})
    header = ["step"] + [f"{label} {key}" for key, label, _ in columns]
    body = [[str(step)] + [f"{values[step]:.6g}" for _, _, values in columns] for step in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in [header, *body]
    )
