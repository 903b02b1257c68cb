"""Look at a schedule before training with it: a plot (matplotlib) or a text table.

Both evaluate only the steps they show, with one ``values()`` call each, and change
nothing: a table about 20 evenly spaced rows, a plot a few thousand evenly spaced points;
both add the steps where a schedule jumps (a new stage, a staircase step), a plot the
step before it too, so a jump shows as one; a table at most 100 of them. Time and memory do not grow with the number of
steps: a schedule of 10**9 steps is drawn as fast as one of 10**3.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from cs_lightning.errors import UsageTypeError
from cs_lightning.schedulers import _checks
from cs_lightning.schedulers.base import MAX_BREAKPOINTS, Scheduler
from cs_lightning.schedulers.composite import _Sequential

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _as_list(owner: str, schedulers: Scheduler | Iterable[Scheduler]) -> list[Scheduler]:
    if isinstance(schedulers, Scheduler):
        return [schedulers]
    listed = isinstance(schedulers, Iterable) and not isinstance(schedulers, (str, bytes, Mapping))
    items: list[Any] = list(schedulers) if listed else [schedulers]
    if not items or not all(isinstance(item, Scheduler) for item in items):
        refused = next((item for item in items if not isinstance(item, Scheduler)), schedulers)
        # a torch scheduler is stateful, not a closed form: it has no values() to draw
        torch_fix = (
            " (a torch scheduler: convert it with cs_lightning.schedulers.from_torch.convert_scheduler)"
            if isinstance(refused, torch.optim.lr_scheduler.LRScheduler)
            else ""
        )
        given = type(refused).__name__ if items else "no scheduler"
        raise UsageTypeError(f"{owner}: got {given}; give a cs_lightning scheduler or a list of them{torch_fix}")
    return items


# Evenly spaced points a plot evaluates, breakpoints aside: more than a figure has pixels across.
_PLOT_POINTS = 2000
# Evenly spaced rows of a table, and the most breakpoints a table lists besides them.
_TABLE_ROWS = 20
_TABLE_BREAKPOINTS = 100


def _breakpoints(schedulers: list[Scheduler], steps: int, limit: int) -> list[int]:
    """Every step in ``(0, steps)`` where one of the schedules may jump; none when there are
    more than ``limit`` (closer together than the samples, which then show the envelope)."""
    points = sorted({b for scheduler in schedulers for b in scheduler._breakpoints(steps)})
    return points if len(points) <= limit else []


def _table_jumps(schedulers: list[Scheduler], steps: int) -> list[int]:
    """The jumps a table lists, at most ``_TABLE_BREAKPOINTS``: each stage start (milestone) of a
    SequentialLR/WD given, where the schedule changes shape, then the first other jumps in step order
    (a StepLR's next few drops; past them the evenly spaced rows show the trend)."""
    stages = sorted({m for s in schedulers if isinstance(s, _Sequential) for m in s.milestones if 0 < m < steps})
    stages = stages[:_TABLE_BREAKPOINTS]
    others = sorted({b for s in schedulers for b in s._breakpoints(steps)} - set(stages))
    return sorted(stages + others[: _TABLE_BREAKPOINTS - len(stages)])


def _columns(schedulers: list[Scheduler], steps: list[int]) -> list[tuple[str, str, list[float]]]:
    """(key, label, values at ``steps``) per scheduled param group."""
    columns = []
    at = torch.tensor(steps, dtype=torch.int64)
    for scheduler in schedulers:
        values = scheduler.values(at)
        for group in range(values.shape[1]):
            column = values[:, group].tolist()
            if not all(math.isnan(v) for v in column):
                label = f"{type(scheduler).__name__} group {group}{_tags(scheduler, group)}"
                columns.append((scheduler.param_group_key, label, column))
    return columns


def _tags(scheduler: Scheduler, group: int) -> str:
    """` (tag, ...)` for a param group that has tags, so a column says whose values it holds."""
    tags = scheduler.optimizer.param_groups[group].get("tags")
    names = [tags] if isinstance(tags, str) else sorted(map(str, tags or ()))
    return f" ({', '.join(names)})" if names else ""


# Legend entries a panel holds inside its axes; more go beside it, in columns of at most _LEGEND_ROWS.
_LEGEND_INSIDE = 6
_LEGEND_ROWS = 24


def _curves(columns: list[tuple[str, str, list[float]]]) -> list[tuple[str, str, list[float]]]:
    """The columns with equal values drawn as one curve, labelled with every group it stands for
    (groups of one scale would be drawn exactly on top of each other, hiding all but the last)."""
    merged: dict[tuple[str, tuple[float, ...]], list[str]] = {}
    for key, label, values in columns:
        merged.setdefault((key, tuple(values)), []).append(label)
    return [(key, _joined(labels), list(values)) for (key, values), labels in merged.items()]


def _joined(labels: list[str]) -> str:
    """``LinearLR group 1 (a)`` and ``LinearLR group 2 (b)`` -> ``LinearLR groups 1 (a), 2 (b)``."""
    if len(labels) == 1:
        return labels[0]
    name = labels[0].split(" group ")[0]
    if not all(label.startswith(f"{name} group ") for label in labels):
        return ", ".join(labels)
    return f"{name} groups " + ", ".join(label.split(" group ", 1)[1] for label in labels)


def plot(schedulers: Scheduler | list[Scheduler], steps: int) -> Figure:
    """Plot the schedules over ``range(steps)``: one panel per key (lr, weight_decay), one curve
    per distinct schedule (groups that follow the same one share a curve and its legend entry).

    Returns the matplotlib figure, which the caller saves (``figure.savefig(path)``; ``cs-lightning
    schedule --out`` writes it atomically, never over an existing file without ``--force``).
    Needs matplotlib (``pip install cs-lightning[plot]``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("plot needs matplotlib: pip install 'cs-lightning[plot]'") from error
    steps = _checks.integer("plot", "steps", steps, 1)
    schedulers = _as_list("plot", schedulers)
    evenly = (
        {round(i * (steps - 1) / (_PLOT_POINTS - 1)) for i in range(_PLOT_POINTS)}
        if steps > _PLOT_POINTS
        else set(range(steps))
    )
    jumps = {k for b in _breakpoints(schedulers, steps, MAX_BREAKPOINTS) for k in (b - 1, b)}
    x = sorted(evenly | jumps)
    columns = _columns(schedulers, x)
    curves = _curves(columns)
    keys = list(dict.fromkeys(key for key, _, _ in curves))
    most = max(sum(key == k for key, _, _ in curves) for k in keys)
    beside = most > _LEGEND_INSIDE  # a long legend goes right of the panels, not over the curves
    columns_of_legend = math.ceil(most / _LEGEND_ROWS)
    width = 7 + (3.2 * columns_of_legend if beside else 0)
    figure = Figure(figsize=(width, max(2.6, 0.17 * min(most, _LEGEND_ROWS)) * len(keys)), layout="constrained")
    axes = figure.subplots(len(keys), 1, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys):
        for curve_key, label, values in curves:
            if curve_key == key:
                ax.plot(x, values, label=label)
        ax.set_ylabel(key)
        if beside:
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), ncols=columns_of_legend)
        else:
            ax.legend(fontsize="small")
    axes[-1].set_xlabel("optimizer step")
    return figure


def table(schedulers: Scheduler | list[Scheduler], steps: int, every: int | None = None) -> str:
    """The schedules as text: a row every ``every`` steps (default: about 20 rows), the
    last step and the steps where a schedule jumps (up to 100 of them: every milestone of a
    SequentialLR/WD given, then the first other jumps), a column per scheduled param group."""
    steps = _checks.integer("table", "steps", steps, 1)
    every = _checks.integer("table", "every", max(1, steps // _TABLE_ROWS) if every is None else every, 1)
    schedulers = _as_list("table", schedulers)
    jumps = _table_jumps(schedulers, steps)
    rows = sorted(set(range(0, steps, every)) | {steps - 1} | set(jumps))
    columns = _columns(schedulers, rows)
    header = ["step"] + [f"{label} {key}" for key, label, _ in columns]
    body = [[str(step)] + [f"{values[i]:.6g}" for _, _, values in columns] for i, step in enumerate(rows)]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in [header, *body])
