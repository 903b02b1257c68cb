"""Closed-form schedulers vs torch's nearest equivalents, side by side.

(a) ``values()`` over 1,000,000 steps (one vectorized evaluation) vs stepping torch's
    scheduler 1,000,000 times: the cost of knowing a whole schedule.
(b) the cost of one ``step()`` call, ours vs torch's: the cost inside a training loop.

Every measurement runs in a fresh process (this script re-invoked with ``--measure``), so
no case warms another's caches or allocator. The first ``values()`` call of a process is
shown apart: it pays the page faults of memory the process has not touched yet (about 2 ms
per 4 MB on a small VM). Run: ``python benchmarks/schedulers.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings

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


def main() -> None:
    print(f"{N:,} steps; each number from a fresh process. values(): median (and first call) "
          f"of {REPEATS} calls;")
    print("(a) ratio = torch stepping N times / median values(); (b) = torch step / our step\n")
    header = ("case", "values() ms", "first call ms", "torch N steps s", "(a) ratio", "our step us",
              "torch step us", "(b) ratio")
    print("  ".join(f"{h:>15}" for h in header))
    for case in ("linear", "cosine", "step", "warmup_cosine"):
        values = _fresh(case, "ours_values")
        (ours,) = _fresh(case, "ours_steps")
        (theirs,) = _fresh(case, "torch_steps")
        median = statistics.median(values)
        row = (case, f"{median * 1e3:.2f}", f"{values[0] * 1e3:.2f}", f"{theirs:.2f}",
               f"{theirs / median:,.0f}x", f"{ours / N * 1e6:.3f}", f"{theirs / N * 1e6:.3f}",
               f"{theirs / ours:.2f}x")
        print("  ".join(f"{cell:>15}" for cell in row), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", nargs=2, metavar=("CASE", "WHAT"))
    arguments = parser.parse_args()
    if arguments.measure:
        print(json.dumps(measure(*arguments.measure)))
    else:
        main()
