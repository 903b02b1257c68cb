"""Closed-form schedulers vs torch's nearest equivalents, side by side.

(a) ``values()`` over 1,000,000 steps (one vectorized evaluation) vs stepping torch's
    scheduler 1,000,000 times: the cost of knowing a whole schedule.
(b) the cost of one ``step()`` call, ours vs torch's: the cost inside a training loop.
(c) ``cs-lightning schedule --table`` and ``--out`` on a config with ``max_steps: 1e9`` (as
    Model Zoo's llama 7B/33B configs): wall time and peak RSS of the whole command, beside
    ``cs-lightning schedule --help`` (the same process importing torch and Lightning, and
    nothing else), so the schedule's own share shows. Goal: < 5 s and < 500 MB.

Every measurement runs in a fresh process (this script re-invoked with ``--measure``), so
no case warms another's caches or allocator. The first ``values()`` call of a process is
shown apart: it pays the page faults of memory the process has not touched yet (about 2 ms
per 4 MB on a small VM). Run: ``python benchmarks/schedulers.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

N = 1_000_000
WARMUP = 10_000
REPEATS = 21


def _optimizer():
    import torch

    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def _ours(case: str):
    from cs_lightning import schedulers as cs

    o = _optimizer()
    return {
        "linear": lambda: cs.LinearLR(o, 0.1, 0.0, N),
        "cosine": lambda: cs.CosineAnnealingLR(o, 0.1, T_max=N),
        "step": lambda: cs.StepLR(o, 0.1, step_size=1000, gamma=0.9),
        "warmup_cosine": lambda: cs.SequentialLR(
            o, [cs.LinearLR(o, 0.0, 0.1, WARMUP), cs.CosineDecayLR(o, 0.1, 0.0, N - WARMUP)], [WARMUP]
        ),
    }[case]()


def _torch(case: str):
    from torch.optim import lr_scheduler as t

    o = _optimizer()
    return {
        "linear": lambda: t.LinearLR(o, 1.0, 0.0, N),
        "cosine": lambda: t.CosineAnnealingLR(o, T_max=N),
        "step": lambda: t.StepLR(o, step_size=1000, gamma=0.9),
        "warmup_cosine": lambda: t.SequentialLR(
            o, [t.LinearLR(o, 1e-3, 1.0, WARMUP), t.CosineAnnealingLR(o, T_max=N - WARMUP)], [WARMUP]
        ),
    }[case]()


def _seconds_stepping(scheduler) -> float:
    step = scheduler.step
    start = time.perf_counter()
    for _ in range(N):
        step()
    return time.perf_counter() - start


def measure(case: str, what: str) -> list[float]:
    """Seconds, measured in this (fresh) process: REPEATS calls of values(), else one run."""
    warnings.simplefilter("ignore")  # torch: "scheduler.step() before optimizer.step()"
    if what == "ours_values":
        scheduler = _ours(case)
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            scheduler.values(range(N))
            times.append(time.perf_counter() - start)
        return times
    if what == "ours_steps":
        return [_seconds_stepping(_ours(case))]
    if what == "torch_steps":
        return [_seconds_stepping(_torch(case))]
    raise ValueError(f"unknown measurement {what!r}")


def _fresh(case: str, what: str) -> list[float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", case, what], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


# A warmup + cosine learning rate and a staircase weight decay over 10**9 steps.
HUGE_CONFIG = """\
optimizer: {AdamW: {lr: 3.0e-4}}
schedulers:
  - SequentialLR:
      schedulers:
        - LinearLR: {initial_learning_rate: 0.0, end_learning_rate: 3.0e-4, total_iters: 2000}
        - CosineDecayLR: {initial_learning_rate: 3.0e-4, end_learning_rate: 3.0e-5, total_iters: 999998000}
  - StepWD: {initial_val: 0.1, step_size: 100000000, gamma: 0.5}
trainer: {max_steps: 1000000000}
"""


def _command(args: list[str], cwd: str) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of `cs-lightning *args`, run in a fresh process."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [str(Path(sys.executable).with_name("cs-lightning")), *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"cs-lightning {' '.join(args)} failed: {child.stderr.read().decode()}")
    return seconds, usage.ru_maxrss / 1024  # KB on Linux


def huge_schedule() -> None:
    """(c): the schedule command on 10**9 steps, in fresh processes."""
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "run.yaml").write_text(HUGE_CONFIG)
        print(
            "\n(c) cs-lightning schedule on max_steps 1,000,000,000 (fresh process each; --help is the startup alone)"
        )
        print("  ".join(f"{h:>15}" for h in ("command", "seconds", "peak RSS MB")))
        for name, args in (
            ("--help", ["schedule", "--help"]),
            ("--table", ["schedule", "--config", "run.yaml", "--table"]),
            ("--out", ["schedule", "--config", "run.yaml", "--out", "lr.png", "--force"]),
        ):
            seconds, megabytes = _command(args, folder)
            print("  ".join(f"{cell:>15}" for cell in (name, f"{seconds:.2f}", f"{megabytes:.0f}")), flush=True)


def main() -> None:
    print(f"{N:,} steps; each number from a fresh process. values(): median (and first call) of {REPEATS} calls;")
    print("(a) ratio = torch stepping N times / median values(); (b) = torch step / our step\n")
    header = (
        "case",
        "values() ms",
        "first call ms",
        "torch N steps s",
        "(a) ratio",
        "our step us",
        "torch step us",
        "(b) ratio",
    )
    print("  ".join(f"{h:>15}" for h in header))
    for case in ("linear", "cosine", "step", "warmup_cosine"):
        values = _fresh(case, "ours_values")
        (ours,) = _fresh(case, "ours_steps")
        (theirs,) = _fresh(case, "torch_steps")
        median = statistics.median(values)
        row = (
            case,
            f"{median * 1e3:.2f}",
            f"{values[0] * 1e3:.2f}",
            f"{theirs:.2f}",
            f"{theirs / median:,.0f}x",
            f"{ours / N * 1e6:.3f}",
            f"{theirs / N * 1e6:.3f}",
            f"{theirs / ours:.2f}x",
        )
        print("  ".join(f"{cell:>15}" for cell in row), flush=True)
    huge_schedule()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", nargs=2, metavar=("CASE", "WHAT"))
    parser.add_argument("--huge-only", action="store_true", help="run only (c), the schedule command")
    arguments = parser.parse_args()
    if arguments.measure:
        print(json.dumps(measure(*arguments.measure)))
    elif arguments.huge_only:
        huge_schedule()
    else:
        main()
