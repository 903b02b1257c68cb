"""CSXStrategy: one emulated Cerebras CS-X system."""

from __future__ import annotations

from typing import Any

from lightning.fabric.utilities.types import _DEVICE
from lightning.pytorch.strategies import SingleDeviceStrategy

from cs_lightning.accelerator import default_backing
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
        if device is None:
            device = "cuda:0" if default_backing() == "cuda" else "cpu"
        super().__init__(device=device, **kwargs)
