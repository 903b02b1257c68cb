"""CSXDDPStrategy: N emulated CS-X systems trained data-parallel through Lightning's DDP."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override

from cs_lightning.config_blocks import keyword_names
from cs_lightning.strategies.system import CSXSystemMixin


class CSXDDPStrategy(CSXSystemMixin, DDPStrategy):
    """Train on N CS-X systems data-parallel (gloo on CPU, NCCL on CUDA), on one node or many.

    Each process materializes its own replica; replicas built from the same seed are already
    identical, so instead of broadcasting the weights the ranks compare a checksum of them and
    broadcast only when they differ (with a warning). :attr:`weights_broadcast` says which
    happened.

    Args:
        **kwargs: the CS-X options (see :class:`~cs_lightning.strategies.CSXOptions`), and the arguments
            of :class:`~lightning.pytorch.strategies.DDPStrategy` (and on to ``DistributedDataParallel``).
    """

    strategy_name = "csx_ddp"
    description = "Train on N CS-X systems data-parallel (gloo on CPU, NCCL on CUDA), on one node or many."

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.weights_broadcast: bool | None = None

    @classmethod
    @override
    def _lightning_arguments(cls) -> set[str] | None:
        """DDPStrategy's own arguments, and DistributedDataParallel's, which it passes on."""
        names, _ = keyword_names(DDPStrategy.__init__)
        ddp_names, _ = keyword_names(DistributedDataParallel.__init__)
        return set(names) | (set(ddp_names) - {"module"})

    @override
    def _setup_model(self, model: nn.Module) -> DistributedDataParallel:
        """Wrap in DDP without its initial weight broadcast when the replicas already agree."""
        identical = replicas_identical(model, self.root_device)
        given = self._ddp_kwargs
        self.weights_broadcast = bool(given.get("init_sync", not identical))  # the user's init_sync still wins
        if not identical:
            rank_zero_warn(
                "The model replicas differ across ranks (were they built from different seeds?); "
                + (
                    "broadcasting rank 0's weights. Seed every rank alike to skip the broadcast."
                    if self.weights_broadcast
                    else "init_sync=False keeps them apart. Seed every rank alike, or drop init_sync=False."
                )
            )
        self._ddp_kwargs = {**given, "init_sync": self.weights_broadcast}
        try:
            return super()._setup_model(model)
        finally:
            self._ddp_kwargs = given


def replicas_identical(model: nn.Module, device: torch.device) -> bool:
    """Compare a checksum of every parameter's and buffer's bits across ranks (a few bytes each, no weights)."""
    return same_on_every_rank([*model.parameters(), *model.buffers()], device)


def same_on_every_rank(tensors: list[torch.Tensor], device: torch.device) -> bool:
    """Whether every rank holds the same bits in ``tensors`` (compared by a checksum of each)."""
    gathered = every_ranks_checksums(tensors, device)
    return all(torch.equal(gathered[0], other) for other in gathered[1:])


def every_ranks_checksums(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Each rank's checksums of its ``tensors`` (one ``_bit_sum`` each; one 0 for none), in rank order: one
    all-gather, on ``device`` under NCCL."""
    local = torch.stack([_bit_sum(t.detach()) for t in tensors]) if tensors else torch.zeros(1, dtype=torch.int64)
    local = local.to(device if torch.distributed.get_backend() == "nccl" else torch.device("cpu"))
    gathered = [torch.empty_like(local) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, local)
    return gathered


def _bit_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum of the tensor's raw bit patterns, each times its position plus one (wrapping int64): replicas built
    from different seeds differ in it almost surely, and so (for words of 32 bits or fewer) do two with one pair
    of values swapped. A linear checksum, not a hash: moves built to cancel (two opposite swaps) go unseen.

    Word ``r * _ROW + c`` weighs ``r * _ROW + c + 1``, so the sum is ``_ROW * sum(r * row_sum[r]) +
    sum((c + 1) * column_sum[c])``: two reductions over the words, with no int64 copy of them."""
    words = tensor.contiguous().view(-1)
    if words.is_floating_point() or words.is_complex():
        words = words.view(_SAME_WIDTH_INT[words.element_size()])
    rows = words.numel() // _ROW
    body = words[: rows * _ROW].view(rows, _ROW)
    tail = words[rows * _ROW :].to(torch.int64)  # fewer than _ROW words
    return (
        _ROW * (body.sum(1, dtype=torch.int64) * _positions(0, rows, words.device)).sum()
        + (body.sum(0, dtype=torch.int64) * _positions(1, _ROW + 1, words.device)).sum()
        + (tail * _positions(rows * _ROW + 1, words.numel() + 1, words.device)).sum()
    )


def _positions(start: int, end: int, device: torch.device) -> torch.Tensor:
    return torch.arange(start, end, dtype=torch.int64, device=device)


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}
_ROW = 1024  # words per row of _bit_sum's two reductions
