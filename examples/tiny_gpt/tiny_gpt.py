"""A tiny character-level GPT trained on Shakespeare's *Macbeth* (shipped, public domain).

The model is built in ``configure_model``, so under ``strategy="csx"`` it is recorded
and materialized once; its output layer shares the embedding's weight. The optimizer and
the warmup + cosine schedule come from ``config.yaml``. ``LRPlot`` draws the learning
rate each step actually trained with.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from cs_lightning import ResumableDataLoader

TEXT = Path(__file__).with_name("macbeth.txt")
VOCAB = 128  # the text is plain ASCII: one token per byte


def encode(text: str) -> torch.Tensor:
    """ASCII text -> int64 token ids; other characters are an error, not silently dropped."""
    data = text.encode("ascii")
    return torch.tensor(list(data), dtype=torch.long)


def decode(tokens: torch.Tensor) -> str:
    return bytes(tokens.tolist()).decode("ascii")


class Windows(Dataset):
    """(input, target) pairs: `block` characters and the same shifted by one, every `stride`."""

    def __init__(self, tokens: torch.Tensor, block: int, stride: int) -> None:
        self.tokens, self.block = tokens, block
        self.starts = range(0, len(tokens) - block - 1, stride)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.tokens[self.starts[i] : self.starts[i] + self.block + 1]
        return chunk[:-1], chunk[1:]


class MacbethData(L.LightningDataModule):
    """The play's first 90% for training, the rest for validation."""

    def __init__(self, block_size: int = 64, batch_size: int = 32) -> None:
        super().__init__()
        self.block_size, self.batch_size = block_size, batch_size

    def setup(self, stage: str) -> None:
        tokens = encode(TEXT.read_text())
        cut = int(0.9 * len(tokens))
        self.train_set = Windows(tokens[:cut], self.block_size, stride=self.block_size // 2)
        self.val_set = Windows(tokens[cut:], self.block_size, stride=self.block_size)

    def train_dataloader(self) -> ResumableDataLoader:
        # resumable: a run resumed from a checkpoint taken inside an epoch goes on at the exact batch
        return ResumableDataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(L.LightningModule):
    """Embeddings, `n_layer` blocks, a final norm, and a read-out tied to the embedding."""

    def __init__(
        self, block_size: int = 64, n_layer: int = 2, n_head: int = 4, n_embd: int = 128, sample_chars: int = 0
    ) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd must be a multiple of n_head, got n_embd={n_embd}, n_head={n_head}")
        self.save_hyperparameters()
        self.blocks: nn.ModuleList | None = None

    def configure_model(self) -> None:
        if self.blocks is not None:
            return
        hp = self.hparams
        self.tok = nn.Embedding(VOCAB, hp.n_embd)
        self.pos = nn.Embedding(hp.block_size, hp.n_embd)
        # a ModuleList of the repeated blocks: what csx_fsdp shards one by one
        self.blocks = nn.ModuleList(Block(hp.n_embd, hp.n_head) for _ in range(hp.n_layer))
        self.norm = nn.LayerNorm(hp.n_embd)
        self.head = nn.Linear(hp.n_embd, VOCAB, bias=False)
        self.head.weight = self.tok.weight
        # GPT-2's small init: unit-variance embeddings would start the tied read-out far from uniform.
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        tokens, targets = batch
        return F.cross_entropy(self(tokens).flatten(0, 1), targets.flatten())

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        # sync_dist: the mean over ranks when data-parallel (csx_ddp, csx_fsdp), not rank 0's loss alone
        self.log("train_loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), prog_bar=True, sync_dist=True)

    @torch.no_grad()
    def generate(self, prompt: str, chars: int, generator: torch.Generator | None = None) -> str:
        """Sample `chars` characters after `prompt`, one at a time."""
        tokens = encode(prompt).to(self.device)[None]
        for _ in range(chars):
            logits = self(tokens[:, -self.hparams.block_size :])[:, -1]
            probs = logits.softmax(-1).cpu()
            nxt = torch.multinomial(probs, 1, generator=generator).to(self.device)
            tokens = torch.cat([tokens, nxt], dim=1)
        return decode(tokens[0].cpu())

    def on_train_end(self) -> None:
        if not self.hparams.sample_chars:
            return
        # every rank samples (the same text): under csx_fsdp each forward gathers weights from all of them
        sample = self.generate("MACBETH.\n", self.hparams.sample_chars, torch.Generator().manual_seed(0))
        if self.trainer.is_global_zero:
            print(f"\n--- sample ---\n{sample}\n--------------")


class LRPlot(L.Callback):
    """Record the learning rate every training step used; draw it when training ends."""

    def __init__(self, out: str = "lr.png") -> None:
        self.out, self.steps, self.lrs = out, [], []

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.steps.append(trainer.global_step)
        self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        out = Path(trainer.log_dir or ".") / self.out  # log_dir is collective: every rank asks
        if not trainer.is_global_zero:
            return
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

        out.parent.mkdir(parents=True, exist_ok=True)
        figure = Figure(figsize=(6, 3), layout="constrained")
        ax = figure.subplots()
        ax.plot(self.steps, self.lrs)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("learning rate")
        ax.set_title("learning rate used, per step")
        figure.savefig(out)
        tqdm.write(f"learning-rate plot: {out}")  # on a line of its own, not after the progress bar
