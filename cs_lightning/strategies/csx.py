"""CSXStrategy: one emulated Cerebras CS-X system."""

from __future__ import annotations

from typing import Any

import torch
from lightning.fabric.utilities.types import _DEVICE
from lightning.pytorch.strategies import SingleDeviceStrategy

from cs_lightning.accelerator import default_backing
from cs_lightning.errors import UsageError
from cs_lightning.strategies.system import CSXSystemMixin


class CSXStrategy(CSXSystemMixin, SingleDeviceStrategy):
    """Train on one CS-X system: lazy model, traced step, step closures, time to first loss.

    ``Trainer(strategy="csx")`` is enough: it implies the csx accelerator, and with
    ``devices=N`` (or several nodes) Lightning gets the data-parallel sibling,
    :class:`~cs_lightning.strategies.CSXDDPStrategy`, with the same options.

    Args:
        device: the backing device; by default the first CUDA device when present, else the CPU.
        **kwargs: the CS-X options (``trace_check``, ``compile``, ``compile_backend``, ``init_mode``,
            ``strict_schedulers``: see :class:`~cs_lightning.strategies.CSXOptions`), and the
            arguments of :class:`~lightning.pytorch.strategies.SingleDeviceStrategy`.
    """

    strategy_name = "csx"
    description = "Train on one CS-X system: lazy model, traced step, step closures, time to first loss."

    def __init__(self, device: _DEVICE | None = None, **kwargs: Any) -> None:
        super().__init__(device=_backing_device(device), **kwargs)


def _backing_device(device: _DEVICE | None) -> torch.device:
    """``device`` checked as the strategy is built: Lightning would take any value and fail only at fit."""
    if device is None:
        return torch.device("cuda:0" if default_backing() == "cuda" else "cpu")
    fix = "give 'cpu' or 'cuda:N', or leave it unset (the first CUDA device when present, else the CPU)"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise UsageError(f"device={device!r} is not a torch device; {fix}.") from error
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if parsed.type not in ("cpu", "cuda") or (parsed.type == "cuda" and (parsed.index or 0) >= cuda):
        here = f"{cuda} CUDA device{'s' * (cuda != 1)}"
        raise UsageError(f"device={device!r} is not a device a CS-X runs on here ({here}); {fix}.")
    return parsed
