"""A model exercising every kind of init the sharded materialization handles, and a LightningModule around it.

Shared by the csx_fsdp tests and their subprocess scripts.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB, WIDTH = 37, 24


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 50)  # kaiming_uniform_ (Linear's default), 50 rows: uneven over 3 ranks
        self.down = nn.Linear(50, WIDTH)
        nn.init.xavier_normal_(self.down.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    """Tied embedding/head with a zeroed padding row, trunc_normal_, orthogonal_ (not row-sliceable),
    kaiming and xavier, tensors under 16 elements, a computed buffer and a computed non-persistent one."""

    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH, padding_idx=3)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))
        self.mix = nn.Parameter(torch.empty(33, WIDTH))
        nn.init.trunc_normal_(self.mix, std=0.02)
        self.rotate = nn.Parameter(torch.empty(9, 9))
        nn.init.orthogonal_(self.rotate)
        self.spread = nn.Parameter(torch.empty(21, WIDTH))
        nn.init.kaiming_normal_(self.spread)
        self.tiny = nn.Parameter(torch.randn(3, 2))  # under 16 elements: a cached Box-Muller sample
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.linspace(0.5, 1.5, WIDTH))
        inv = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
        self.register_buffer("freqs", torch.outer(torch.arange(5).float(), inv), persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear) and module.out_features == WIDTH:
            nn.init.normal_(module.weight, std=0.02 / math.sqrt(2))
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * self.scale
        for block in self.blocks:
            x = block(x)
        x = x + (x[..., :9] @ self.rotate).sum(-1, keepdim=True) + (self.mix.mean() + self.spread.mean())
        x = x + self.tiny.sum() + self.freqs.sum()
        return self.head(x)


class Language(LightningModule):
    """:class:`Net` as a next-token model, built in ``configure_model`` (or in ``__init__``)."""

    def __init__(self, build_in: str = "configure_model", blocks: int = 2) -> None:
        super().__init__()
        self.blocks = blocks
        self.net: nn.Module | None = Net(blocks) if build_in == "init" else None

    def configure_model(self) -> None:
        if self.net is None:
            self.net = Net(self.blocks)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.net(tokens)

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        tokens, targets = batch
        return nn.functional.cross_entropy(self(tokens).flatten(0, 1), targets.flatten())

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def optimized(self) -> list[nn.Parameter]:
        """The parameters given to the optimizer, in its order."""
        return list(self.parameters())

    def configure_optimizers(self) -> Any:
        from cs_lightning.schedulers import CosineDecayLR

        optimizer = torch.optim.AdamW(self.optimized(), lr=0.01)
        return {
            "optimizer": optimizer,
            "lr_scheduler": CosineDecayLR(
                optimizer, initial_learning_rate=0.01, end_learning_rate=0.001, total_iters=10
            ),
        }


class Normed(Language):
    """:class:`Language` with a BatchNorm over its logits: running statistics that forward updates, each rank's
    own under FSDP2 (each rank's batches differ)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm: nn.Module | None = None

    def configure_model(self) -> None:
        super().configure_model()
        if self.norm is None:
            self.norm = nn.BatchNorm1d(VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        assert self.net is not None and self.norm is not None
        logits = self.net(tokens)
        return self.norm(logits.flatten(0, 1)).view_as(logits)


class LateHead(Language):
    """:class:`Language` with one more layer, ``late``, that joins the loss at step 2 (a layer unfrozen then):
    before, it gets no gradient, so AdamW holds no state for it, and a checkpoint saved then has none.
    Made first, so that its parameters come before the others in the optimizer."""

    def configure_model(self) -> None:
        if self.net is None:
            self.late = nn.Linear(VOCAB, VOCAB)  # 37 rows: uneven over 2 ranks
        super().configure_model()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.global_step < 2:
            return self.loss(batch)
        tokens, targets = batch
        logits = self(tokens)
        return nn.functional.cross_entropy((logits + self.late(logits)).flatten(0, 1), targets.flatten())


class Reversed(Language):
    """:class:`Language` whose optimizer holds the parameters in reverse: an order other than the model's."""

    def optimized(self) -> list[nn.Parameter]:
        return super().optimized()[::-1]


class ReadsAValue(nn.Module):
    """A constructor that reads a random value, then makes more tensors: the recording runs what it holds at the
    read (eager's values and stream, in memory then) and goes on recording."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 21)  # 21 rows: uneven over 2 and 3 ranks
        with torch.no_grad():
            self.scale = float(self.a.weight.abs().max())
        self.b = nn.Linear(21, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x) * self.scale)


class Strided(nn.Module):
    """Parameters whose rows are not the leading elements of their storage: non-contiguous views (FSDP2 refuses
    them built eagerly; materialized, they are contiguous) and a contiguous one at an offset."""

    def __init__(self) -> None:
        super().__init__()
        self.transposed = nn.Parameter(torch.randn(24, 40).t())
        self.permuted = nn.Parameter(torch.randn(6, 5, 7).permute(2, 0, 1))
        self.every_other = nn.Parameter(torch.randn(33, 17)[::2])
        self.tail = nn.Parameter(torch.randn(40, 17)[20:])
        self.after = nn.Linear(17, 9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after(x) + sum(p.sum() for p in (self.transposed, self.permuted, self.every_other, self.tail))


class HalfScaled(nn.Module):
    """A truncated normal, then its first half scaled through a view whose one row spans 4 rows of the
    parameter: over 3 ranks (rows 0-2, 3-5, 6-7) it straddles the first shard boundary, not the second."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(8, 4))
        nn.init.trunc_normal_(self.w, std=0.02)
        with torch.no_grad():
            self.w.view(2, 16)[:1].mul_(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w.t()


class FewRows(nn.Module):
    """Parameters with fewer rows than ranks get: over 3 ranks (``torch.chunk``) a Linear's 4 rows are 2, 2 and none,
    a normal_'s 2 rows 1, 1 and none: the last rank holds empty shards of a uniform_ and of a normal_."""

    def __init__(self) -> None:
        super().__init__()
        self.few = nn.Linear(16, 4)
        self.two = nn.Parameter(torch.empty(2, 24))
        nn.init.normal_(self.two)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.few(x).sum() + self.two.sum()


class Built(LightningModule):
    """A module class built in ``configure_model``, trained on :func:`ones` with a zero learning rate."""

    def __init__(self, net: type[nn.Module]) -> None:
        super().__init__()
        self.net_class = net
        self.net: nn.Module | None = None

    def configure_model(self) -> None:
        if self.net is None:
            self.net = self.net_class()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).sum()

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class TwoRecordings(LightningModule):
    """A layer made in ``__init__`` (recorded under ``trainer.init_module()``) and one more made in
    ``configure_model`` (a second recording, as fit starts)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(16, 21)  # 21 rows: uneven over 2 ranks
        self.second: nn.Linear | None = None

    def configure_model(self) -> None:
        if self.second is None:
            self.second = nn.Linear(21, 5)
            self.scale = nn.Parameter(torch.randn(4))  # under 16 numbers: normal_ takes a count replay cannot know

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        assert self.second is not None
        return self.second(self.first(batch[0])).pow(2).mean() * self.scale.sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class DrawsFromValues(TwoRecordings):
    """:class:`TwoRecordings` with a draw whose inputs are made before it (``bernoulli(p)``): its count of
    generator outputs is not known without ``p``."""

    def configure_model(self) -> None:
        super().configure_model()
        if not hasattr(self, "mask"):
            self.mask = nn.Parameter(torch.bernoulli(torch.rand(21, 16)))


def ones(width: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.ones(8, width)), batch_size=4)


def tokens(n: int = 48, length: int = 8, batch_size: int = 4) -> DataLoader:
    generator = torch.Generator().manual_seed(11)
    data = torch.randint(0, VOCAB, (n, length + 1), generator=generator)
    return DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=batch_size)


class Wide(nn.Module):
    """~80 MiB: a tied 16 MiB embedding and 16 blocks of 4 MiB, for per-rank memory measurements."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(8192, 512)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)) for _ in range(16)
        )
        self.head = nn.Linear(512, 8192, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def resident(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM...), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


class Measured(Language):
    """:class:`Wide` as a next-token model. ``peak``: the peak resident memory of setup (configure_model to
    on_fit_start) above the memory before it; ``anonymous``: the growth of anonymous memory over setup."""

    def configure_model(self) -> None:
        if self.net is None:
            with open("/proc/self/clear_refs", "w") as clear:  # the peak starts again from here
                clear.write("5")
            self.baseline = resident("VmRSS")
            self.anonymous_before = resident("RssAnon")
            self.net = Wide()

    def on_fit_start(self) -> None:
        self.peak = resident("VmHWM") - self.baseline
        self.anonymous = resident("RssAnon") - self.anonymous_before

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)
