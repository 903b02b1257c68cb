"""Time to first loss of a GPT-style model (~350M parameters) on CPU: Lightning default vs csx.

Cases, each in a fresh process, from scratch and resuming from a checkpoint:

* default: the model built in ``__init__`` (eager init), ``strategy="auto"``;
* csx exact: built in ``configure_model``, recorded, materialized bit-identical to eager;
* csx exact, no check: the same without the one-time trace check of the first step;
* csx independent: the same, materialized order-independently (per-tensor streams, threads).

The clock starts just before the LightningModule is constructed (eager init happens there
for the default case, so starting at ``fit()`` would hide it) and stops at the first loss;
*setup* ends when the first training step starts. Prints a table, the ratios and whether
the first losses agree (csx exact must equal the default from scratch; every case must
agree when resuming). Usage: ``python benchmarks/time_to_first_loss.py [--layers 24]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

# case: (init mode or "auto" for Lightning's default strategy, where the model is built, trace check)
CASES = {"default": ("auto", "init", False), "csx exact": ("exact", "configure_model", True),
         "csx exact, no check": ("exact", "configure_model", False),
         "csx independent": ("independent", "configure_model", True)}
RESUME_CASES = ("default", "csx exact", "csx independent")  # resuming, csx skips the check it passed before


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
    """GPT-2 medium shape by default (24 layers, width 1024, 50257 tokens: ~355M parameters)."""

    def __init__(self, layers: int = 24, width: int = 1024, heads: int = 16, vocab: int = 50257,
                 context: int = 1024) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2
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


def _case(name: str, layers: int, checkpoint: str | None, save_to: str | None) -> dict:
    """One run in this (fresh) process: the clock, then fit until the first loss."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from cs_lightning import CSXStrategy, TimeToFirstLoss

    init_mode, build_in, trace_check = CASES[name]

    class LanguageModel(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = GPT(layers=layers) if build_in == "init" else None

        def configure_model(self) -> None:
            if self.gpt is None:
                self.gpt = GPT(layers=layers)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.gpt(tokens)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            logits = self(batch[:, :-1])
            return nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1e-3)  # stateless: the checkpoint is the weights

    batches = torch.randint(0, 50257, (4, 1, 65), generator=torch.Generator().manual_seed(0))
    clock = TimeToFirstLoss()
    torch.manual_seed(0)
    clock.start()
    model = LanguageModel()
    strategy = "auto" if init_mode == "auto" else CSXStrategy(init_mode=init_mode, trace_check=trace_check)
    steps = 1 if checkpoint is None else 2  # the checkpoint was taken after one step
    trainer = pl.Trainer(strategy=strategy, accelerator="cpu", max_steps=steps, callbacks=[clock], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(list(batches), batch_size=None), ckpt_path=checkpoint)
    if save_to:
        trainer.save_checkpoint(save_to)
    return clock.metrics


def _run_case(name: str, layers: int, checkpoint: str | None = None, save_to: str | None = None) -> dict:
    command = [sys.executable, __file__, "--layers", str(layers), "--case", name]
    command += ["--checkpoint", checkpoint] if checkpoint else []
    command += ["--save-to", save_to] if save_to else []
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"case {name!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _medians(runs: list[dict[str, dict]]) -> dict[str, dict]:
    """Per case and metric, the median over the repeats (the first loss is the same in every repeat)."""
    return {name: {key: statistics.median(run[name][key] for run in runs) for key in runs[0][name]}
            for name in runs[0]}


def _table(title: str, results: dict[str, dict]) -> None:
    base = results["default"]
    print(f"\n{title}")
    print(f"{'case':<21}{'total s':>9}{'setup s':>9}{'step s':>9}{'x total':>9}{'x setup':>9}  first loss")
    for name, metrics in results.items():
        agree = "same as default" if metrics["ttfl/loss"] == base["ttfl/loss"] else "DIFFERS from default"
        print(f"{name:<21}{metrics['ttfl/total']:>9.2f}{metrics['ttfl/setup']:>9.2f}{metrics['ttfl/first_step']:>9.2f}"
              f"{base['ttfl/total'] / metrics['ttfl/total']:>9.2f}{base['ttfl/setup'] / metrics['ttfl/setup']:>9.2f}"
              f"  {metrics['ttfl/loss']:.6f} ({agree})")
        phases = {k.removeprefix("ttfl/"): v for k, v in metrics.items()
                  if k not in ("ttfl/total", "ttfl/setup", "ttfl/first_step", "ttfl/loss")}
        if phases:
            print(f"{'':<21}" + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--case", choices=list(CASES))
    parser.add_argument("--checkpoint")
    parser.add_argument("--save-to")
    parser.add_argument("--repeats", type=int, default=1, help="runs per case; the table shows medians")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(args.case, args.layers, args.checkpoint, args.save_to)))
        return
    with torch.device("meta"):
        parameters = sum(p.numel() for p in GPT(layers=args.layers).parameters())
    print(f"GPT: {args.layers} layers, {parameters / 1e6:.0f}M parameters; CPU, {torch.get_num_threads()} threads;"
          " seconds from constructing the LightningModule to the first loss, each case a fresh process;"
          f" median of {args.repeats} run(s), cases interleaved")
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = str(Path(folder) / "gpt.ckpt")
        # the checkpoint of a csx run (as when resuming one), taken after its first step
        scratch = [{name: _run_case(name, args.layers, save_to=checkpoint if name == "csx exact" else None)
                    for name in CASES} for _ in range(args.repeats)]
        _table("From scratch (goal: csx exact never slower; csx independent >= 1.5x faster)", _medians(scratch))
        resumed = [{name: _run_case(name, args.layers, checkpoint=checkpoint) for name in RESUME_CASES}
                   for _ in range(args.repeats)]
        _table("Resuming from a checkpoint (goal: >= 3x faster to first loss, setup >= 10x faster)", _medians(resumed))


if __name__ == "__main__":
    main()
