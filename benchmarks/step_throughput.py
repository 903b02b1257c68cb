"""Training steps per second of a small model: Lightning default vs csx (and csx compiled).

Each case runs in a fresh process on the same data and model; the first steps (trace
check, compilation, warm-up) are excluded, and the rate is one over the median step time
(batch start to batch start), by the wall clock and by the process's CPU time, which a
shared machine's load disturbs least.
Goal: csx >= 0.95x the default.
Usage: ``python benchmarks/step_throughput.py [--steps 400] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
from torch import nn

CASES = ("default", "csx", "csx compile")
WARMUP = 20


def _case(name: str, steps: int) -> float:
    """Steps per second after warm-up, in this (fresh) process."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    from cs_lightning import CSXStrategy
    from cs_lightning.schedulers import CosineDecayLR

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
            schedule = CosineDecayLR(optimizer, initial_learning_rate=1e-3, end_learning_rate=1e-5, total_iters=steps)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    class Clock(pl.Callback):
        """Steps per second from the median step time, by the wall clock and by this process's CPU time.

        CPU time counts the work a step costs and hardly moves with other processes' load.
        """

        def __init__(self) -> None:
            self.starts: list[tuple[float, float]] = []

        def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
            if trainer.global_step >= WARMUP:
                self.starts.append((time.perf_counter(), time.process_time()))

        def on_train_end(self, trainer: pl.Trainer, *args: Any) -> None:
            self.starts.append((time.perf_counter(), time.process_time()))
            steps = list(zip(self.starts, self.starts[1:]))
            self.rates = [1 / statistics.median(b[i] - a[i] for a, b in steps) for i in (0, 1)]

    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64, generator=generator), torch.randint(0, 10, (4096,), generator=generator))
    strategy = {"default": "auto", "csx": "csx", "csx compile": CSXStrategy(compile=True)}[name]
    clock = Clock()
    torch.manual_seed(0)
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator="cpu",
        max_steps=steps,
        callbacks=[clock],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier(), DataLoader(data, batch_size=64, shuffle=True))
    return clock.rates


def _run_case(name: str, steps: int) -> list[float]:
    command = [sys.executable, __file__, "--case", name, "--steps", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"case {name!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(args.case, args.steps)))
        return
    wall: dict[str, list[float]] = {name: [] for name in CASES}
    cpu: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.repeats):  # interleaved, so load changes on a shared machine hit every case alike
        for name in CASES:
            wall_rate, cpu_rate = _run_case(name, args.steps)
            wall[name].append(wall_rate)
            cpu[name].append(cpu_rate)
    print(
        f"MLP 64-256-256-10, batch 64, AdamW + CosineDecayLR; steps {WARMUP}..{args.steps} (median step);"
        f" {args.repeats} fresh processes per case, interleaved; {torch.get_num_threads()} threads"
    )
    print("wall: steps/s of the least disturbed run (as timeit's min); cpu: steps per CPU-second, median of runs")
    print(f"{'case':<13}{'wall/s':>9}{'x default':>11}{'cpu/s':>9}{'x default':>11}   wall runs")
    for name in CASES:
        best, per_cpu = max(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:<13}{best:>9.1f}{best / max(wall['default']):>11.3f}{per_cpu:>9.1f}"
            f"{per_cpu / statistics.median(cpu['default']):>11.3f}   " + ", ".join(f"{v:.1f}" for v in wall[name])
        )


if __name__ == "__main__":
    main()
