"""Time to first loss of GPT-style models on CPU: Lightning's default strategy vs csx, path by path.

For each model (163M: 12 layers, width 768; 355M: 24 layers, width 1024; vocabulary 50304,
tied head, a batch of 1 x 16 tokens) and each path, Lightning's default and csx run side
by side, every case in a fresh process, the cases of a repeat interleaved:

* resume, plain, cold: resume from a checkpoint written by the default strategy, csx's trace
  cache empty (a project switching to csx);
* fresh, cold cache:   csx exact, with an empty trace cache (the check runs);
* fresh, warm cache:   csx exact, the trace cache holding this model's entry;
* fresh, independent:  csx with ``init_mode="independent"`` (warm cache);
* resume, plain ckpt:  resume from the default strategy's checkpoint (warm cache);
* resume, csx ckpt:    resume from a checkpoint written by csx (warm cache).

Before every resume, on both sides, the checkpoint is read once so that it starts in the page
cache (the state right after a run wrote it; this machine pages out idle file pages). The
clock starts after the imports, just before the LightningModule is constructed (eager init
happens there for the default strategy), and stops at the first loss. Printed per
case: the medians of total, setup (until the first batch starts), first step, the csx
phases (materialize, trace) and the peak RSS of each side, the ratio default / csx, and
whether the first losses agree. Usage:
``python benchmarks/time_to_first_loss.py [--models 163M 355M] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

MODELS = {"163M": {"layers": 12, "width": 768, "heads": 12}, "355M": {"layers": 24, "width": 1024, "heads": 16}}
VOCAB, TOKENS = 50304, 16


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, -1).transpose(1, 3).unbind(2)
        attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


class GPT(nn.Module):
    """GPT-2 style: token and position embeddings, pre-norm blocks, a head tied to the embedding."""

    def __init__(self, layers: int, width: int, heads: int, vocab: int = VOCAB, context: int = 1024) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight
        self.apply(self._init_weights)
        for block in self.blocks:  # GPT-2's scaled init of the residual projections
            nn.init.normal_(block.down.weight, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _case(model: str, strategy: str, checkpoint: str | None, save_to: str | None) -> dict:
    """One run in this (fresh) process: the clock, then fit until the first loss."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from cs_lightning import CSXStrategy, TimeToFirstLoss

    shape = MODELS[model]

    class LanguageModel(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = GPT(**shape) if strategy == "default" else None

        def configure_model(self) -> None:
            if self.gpt is None:
                self.gpt = GPT(**shape)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.gpt(tokens)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            logits = self(batch[:, :-1])
            return nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1e-3)  # stateless: the checkpoint is the weights

    batches = torch.randint(0, VOCAB, (4, 1, TOKENS + 1), generator=torch.Generator().manual_seed(0))
    clock = TimeToFirstLoss()
    torch.manual_seed(0)
    clock.start()
    module = LanguageModel()
    chosen = "auto" if strategy == "default" else CSXStrategy(init_mode=strategy.removeprefix("csx "))
    steps = 1 if checkpoint is None else 2  # the checkpoints are taken after one step
    trainer = pl.Trainer(
        strategy=chosen,
        accelerator="cpu",
        max_steps=steps,
        callbacks=[clock],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(list(batches), batch_size=None), ckpt_path=checkpoint)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: kilobytes; before saving a checkpoint
    if save_to:
        trainer.save_checkpoint(save_to)
    return {**clock.metrics, "peak_gb": peak_kb / 2**20}


def _run(model: str, strategy: str, cache: str, checkpoint: str | None = None, save_to: str | None = None) -> dict:
    if checkpoint:  # both sides start from the file in the page cache, whatever evicted it since
        with open(checkpoint, "rb") as file:
            while file.read(1 << 24):
                pass
    command = [sys.executable, __file__, "--case", model, strategy]
    command += ["--checkpoint", checkpoint] if checkpoint else []
    command += ["--save-to", save_to] if save_to else []
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "CS_LIGHTNING_CACHE_DIR": cache}
    )
    if done.returncode != 0:
        raise RuntimeError(f"{model} {strategy} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _repeat(model: str, folder: Path, first: bool) -> dict[str, tuple[dict, dict]]:
    """One run of every path: {path: (default metrics, csx metrics)}."""
    plain, csx = str(folder / f"{model}-plain.ckpt"), str(folder / f"{model}-csx.ckpt")
    cache = folder / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    default = _run(model, "default", str(cache), save_to=plain if first else None)
    resume_plain = _run(model, "default", str(cache), plain)
    return {
        "resume, plain, cold": (resume_plain, _run(model, "csx exact", str(cache), plain)),
        "fresh, cold cache": (
            default,
            _run(model, "csx exact", str(shutil.rmtree(cache) or cache), save_to=csx if first else None),
        ),
        # from here on the trace cache holds the entry the cold run wrote
        "fresh, warm cache": (default, _run(model, "csx exact", str(cache))),
        "fresh, independent": (default, _run(model, "csx independent", str(cache))),
        "resume, plain ckpt": (resume_plain, _run(model, "csx exact", str(cache), plain)),
        "resume, csx ckpt": (_run(model, "default", str(cache), csx), _run(model, "csx exact", str(cache), csx)),
    }


def _median(runs: list[dict], key: str) -> float:
    values = [run[key] for run in runs if key in run]
    return statistics.median(values) if values else float("nan")


def _table(model: str, repeats: list[dict[str, tuple[dict, dict]]]) -> None:
    print(f"\n{model}: seconds to the first loss (median of {len(repeats)}), peak RSS in GB")
    print(
        f"{'path':<20}{'side':<9}{'total':>7}{'setup':>7}{'step':>7}{'mater.':>7}{'trace':>7}{'RSS':>6}"
        f"{'x total':>9}{'x setup':>9}  first loss"
    )
    for path in repeats[0]:
        sides = {"default": [r[path][0] for r in repeats], "csx": [r[path][1] for r in repeats]}
        base = {key: _median(sides["default"], key) for key in ("ttfl/total", "ttfl/setup")}
        for side, runs in sides.items():
            m = {
                key: _median(runs, key)
                for key in ("ttfl/total", "ttfl/setup", "ttfl/first_step", "ttfl/materialize", "ttfl/trace", "peak_gb")
            }
            same = runs[0]["ttfl/loss"] == sides["default"][0]["ttfl/loss"]
            ratios = (
                f"{base['ttfl/total'] / m['ttfl/total']:>9.2f}{base['ttfl/setup'] / m['ttfl/setup']:>9.2f}"
                if side == "csx"
                else " " * 18
            )
            phases = "".join(
                f"{m[key]:>7.2f}" if not math.isnan(m[key]) else f"{'-':>7}"
                for key in ("ttfl/total", "ttfl/setup", "ttfl/first_step", "ttfl/materialize", "ttfl/trace")
            )
            agree = "" if side == "default" else (" (same)" if same else " (DIFFERS)")
            print(
                f"{path if side == 'default' else '':<20}{side:<9}{phases}{m['peak_gb']:>6.2f}{ratios}"
                f"  {runs[0]['ttfl/loss']:.6f}{agree}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the table shows medians")
    parser.add_argument("--case", nargs=2, metavar=("MODEL", "STRATEGY"), help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--save-to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(*args.case, args.checkpoint, args.save_to)))
        return
    print(
        f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}; each case a fresh process;"
        " ratios are Lightning default / csx (higher: csx faster)"
    )
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            repeats = [_repeat(model, Path(folder), first=k == 0) for k in range(args.repeats)]
            _table(model, repeats)


if __name__ == "__main__":
    main()
