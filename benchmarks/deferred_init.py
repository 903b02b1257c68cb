"""Deferred init vs eager construction, for a GPT-style model of ~350M parameters on CPU.

Each case runs once, in a fresh process; the parent prints wall time and peak RSS per case
and the ratios:

* eager:        ``GPT(config)`` (default init, then ``apply(_init_weights)``)
* exact:        ``materialize(deferred_init(GPT, config))``, bit-identical to eager
* independent:  the same with ``mode="independent"`` (not equal to eager, parallel)
* eager+load:   eager construction, then ``load_state_dict`` from a checkpoint
* ckpt (eager RNG):  materialize from the same checkpoint, global RNG state as eager+load
* ckpt (skip_unread): materialize from the same checkpoint, skipping draws no init reads (rng="skip_unread")

Time covers construction only. After it, every case sums every parameter (so all weights
are resident, as for training) and then reads its peak RSS; the table shows it above the
process's baseline right before construction (imports, checkpoint mapping).

Run: ``python benchmarks/deferred_init.py [--width 1024 --depth 24]``
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

CASES = ["eager", "exact", "independent", "eager+load", "ckpt (eager RNG)", "ckpt (skip_unread)"]


@dataclass
class Config:
    vocab: int = 50304
    width: int = 1024
    depth: int = 24
    max_len: int = 1024


class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.width)
        self.attn = nn.Linear(c.width, 3 * c.width)
        self.attn_proj = nn.Linear(c.width, c.width)
        self.ln_2 = nn.LayerNorm(c.width)
        self.fc = nn.Linear(c.width, 4 * c.width)
        self.mlp_proj = nn.Linear(4 * c.width, c.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.attn(self.ln_1(x)).chunk(3, dim=-1)
        attention = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(attention)
        return x + self.mlp_proj(nn.functional.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    """GPT-2 medium shaped (nanoGPT init): tied head, apply(_init_weights)."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.width)
        self.wpe = nn.Embedding(c.max_len, c.width)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.depth))
        self.ln_f = nn.LayerNorm(c.width)
        self.lm_head = nn.Linear(c.width, c.vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.depth))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def peak_rss() -> int:
    """Peak resident set size of this process, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_case(case: str, config: Config, checkpoint: Path) -> dict:
    """One case, in this (fresh) process."""
    from cs_lightning.deferred import deferred_init, materialize

    torch.manual_seed(0)
    state = torch.load(checkpoint, mmap=True) if case.startswith(("eager+", "ckpt")) else None
    baseline = peak_rss()
    start = time.perf_counter()
    if case in ("eager", "eager+load"):
        model = GPT(config)
        if state is not None:
            model.load_state_dict(state)
    else:
        model = deferred_init(GPT, config)
        mode = "independent" if case == "independent" else "exact"
        rng = "skip_unread" if "skip_unread" in case else "eager"
        materialize(model, state_dict=state, mode=mode, rng=rng)
    seconds = time.perf_counter() - start
    checksum = sum(float(p.sum()) for p in model.parameters())  # every page resident
    return {
        "case": case,
        "seconds": seconds,
        "peak_rss": peak_rss(),
        "baseline": baseline,
        "checksum": checksum,
        "params": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=Config.width)
    parser.add_argument("--depth", type=int, default=Config.depth)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    config = Config(width=args.width, depth=args.depth)
    if args.case:
        print(json.dumps(run_case(args.case, config, Path(args.checkpoint))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "gpt.pt"
        _in_child(
            f"torch.manual_seed(1); torch.save(GPT(Config(**{asdict(config)})).state_dict(), {str(checkpoint)!r})"
        )
        rows = {}
        for case in CASES:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--case",
                    case,
                    "--checkpoint",
                    str(checkpoint),
                    "--width",
                    str(args.width),
                    "--depth",
                    str(args.depth),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            rows[case] = json.loads(out.stdout.strip().splitlines()[-1])
        _report(rows, checkpoint.stat().st_size)


def _in_child(code: str) -> None:
    script = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        f"import torch\nfrom deferred_init import GPT, Config\n{code}\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def _report(rows: dict, checkpoint_bytes: int) -> None:
    gib = 2**30
    params = rows["eager"]["params"]
    print(
        f"GPT-style model, {params / 1e6:.0f}M parameters, checkpoint "
        f"{checkpoint_bytes / gib:.2f} GiB, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'case':<18} {'seconds':>8} {'peak RSS GiB':>13} {'above baseline':>15}")
    for case, r in rows.items():
        print(
            f"{case:<18} {r['seconds']:>8.2f} {r['peak_rss'] / gib:>13.2f} "
            f"{(r['peak_rss'] - r['baseline']) / gib:>15.2f}"
        )
    t = {case: r["seconds"] for case, r in rows.items()}
    grown = {case: r["peak_rss"] - r["baseline"] for case, r in rows.items()}
    print()
    print(f"eager / exact:                    {t['eager'] / t['exact']:.2f}x (goal >= 1)")
    print(f"eager / independent:              {t['eager'] / t['independent']:.2f}x (goal >= 1.8)")
    for ckpt in ("ckpt (eager RNG)", "ckpt (skip_unread)"):
        print(
            f"eager+load / {ckpt + ':':<20} {t['eager+load'] / t[ckpt]:.1f}x (goal >= 10); "
            f"RSS above baseline / checkpoint: {grown[ckpt] / checkpoint_bytes:.2f} "
            f"(goal <= 1.1), whole process: {rows[ckpt]['peak_rss'] / checkpoint_bytes:.2f}"
        )
    same = rows["eager"]["checksum"] == rows["exact"]["checksum"]
    loaded = {rows[case]["checksum"] for case in ("eager+load", *CASES[-2:])}
    print(f"weights' checksum: exact == eager: {same}; both from-checkpoint cases == eager+load: {len(loaded) == 1}")


if __name__ == "__main__":
    main()
