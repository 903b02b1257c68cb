"""The emulated Cerebras CS-X system as a Lightning accelerator.

One "system" per device: each system is backed by a CUDA device when one is present, else
by the CPU. Device parsing, availability and stats are the backing accelerator's, so
``devices=N`` means N systems and Lightning's cluster environments work unchanged.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.accelerators.registry import _AcceleratorRegistry
from lightning.fabric.utilities.types import _DEVICE
from lightning.pytorch.accelerators import Accelerator, CPUAccelerator, CUDAAccelerator
from typing_extensions import override

from cs_lightning.errors import UsageError

_BACKINGS: dict[str, type[Accelerator]] = {"cpu": CPUAccelerator, "cuda": CUDAAccelerator}


def default_backing() -> str:
    """The device type a CS-X system runs on when none is asked for: CUDA when present, else CPU."""
    return "cuda" if CUDAAccelerator.is_available() else "cpu"


class CSXAccelerator(Accelerator):
    """A Cerebras CS-X system emulated on a CUDA device or the CPU.

    ``description`` is what Lightning's registry shows (set here, not read from this
    docstring: ``python -OO`` strips docstrings).

    Args:
        backing: ``"cuda"`` or ``"cpu"``; ``None`` picks CUDA when present, else CPU.
    """

    description = "A Cerebras CS-X system emulated on a CUDA device or the CPU"

    def __init__(self, backing: str | None = None) -> None:
        backing = default_backing() if backing is None else backing
        if backing not in _BACKINGS:
            raise UsageError(
                f"CSXAccelerator(backing={backing!r}) is not supported: a CS-X system is emulated on"
                f" {' or '.join(map(repr, _BACKINGS))}; fix: pass one of those, or None for the default"
            )
        self.backing = backing
        self._device_accelerator = _BACKINGS[backing]()

    @override
    def setup_device(self, device: torch.device) -> None:
        self._device_accelerator.setup_device(device)

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        self._device_accelerator.setup(trainer)

    @override
    def get_device_stats(self, device: _DEVICE) -> dict[str, Any]:
        return self._device_accelerator.get_device_stats(device)

    @override
    def teardown(self) -> None:
        self._device_accelerator.teardown()

    # Lightning calls the static methods on the class, before any instance knows its backing,
    # so they answer for the default backing; `strategy="csx"` with an explicit
    # `accelerator="cpu"` keeps the devices Lightning parsed for that accelerator.
    @staticmethod
    @override
    def parse_devices(devices: Any) -> Any:
        return _BACKINGS[default_backing()].parse_devices(devices)

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return _BACKINGS[default_backing()].get_parallel_devices(devices)

    @staticmethod
    @override
    def auto_device_count() -> int:
        return _BACKINGS[default_backing()].auto_device_count()

    @staticmethod
    @override
    def is_available() -> bool:
        """The CPU can always back a system."""
        return True

    @staticmethod
    @override
    def name() -> str:
        return "csx"

    @classmethod
    @override
    def register_accelerators(cls, accelerator_registry: _AcceleratorRegistry) -> None:
        accelerator_registry.register(cls.name(), cls, description=cls.description, override=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(backing={self.backing!r})"
