"""cs_lightning: Cerebras semantics inside PyTorch Lightning.

Importing this package registers the ``"csx"`` accelerator and strategies with Lightning, so
``Trainer(strategy="csx")`` works after ``import cs_lightning``. ``cs_lightning.schedulers``
and ``cs_lightning.deferred`` need neither Lightning nor jsonargparse (torch, NumPy and PyYAML
only): without Lightning they import and work, and the Lightning parts (strategies,
accelerator, callbacks) are missing.
"""

from typing import Any

__version__ = "0.1.0"

from cs_lightning.data import ResumableDataLoader
from cs_lightning.errors import (
    CSLightningError,
    GraphBreakError,
)

try:
    import lightning  # noqa: F401
except ImportError:
    _LIGHTNING_PARTS = (
        "CSXAccelerator",
        "CSXModule",
        "StepCheckpoint",
        "StepClosureCallback",
        "step_closure",
        "CSXDDPStrategy",
        "CSXFSDPStrategy",
        "CSXStrategy",
        "TimeToFirstLoss",
    )

    def __getattr__(name: str) -> Any:
        if name in _LIGHTNING_PARTS:
            raise ImportError(f"cs_lightning.{name} needs lightning, which is not installed: pip install lightning")
        raise AttributeError(f"module 'cs_lightning' has no attribute {name!r}")

else:
    from cs_lightning.accelerator import CSXAccelerator
    from cs_lightning.module import CSXModule
    from cs_lightning.step_checkpoint import StepCheckpoint
    from cs_lightning.step_closure import StepClosureCallback, step_closure
    from cs_lightning.strategies import CSXDDPStrategy, CSXFSDPStrategy, CSXStrategy
    from cs_lightning.strategies.registration import register as _register
    from cs_lightning.time_to_first_loss import TimeToFirstLoss

    _register()

__all__ = [
    "CSLightningError",
    "CSXAccelerator",
    "CSXDDPStrategy",
    "CSXFSDPStrategy",
    "CSXModule",
    "CSXStrategy",
    "GraphBreakError",
    "ResumableDataLoader",
    "StepCheckpoint",
    "StepClosureCallback",
    "TimeToFirstLoss",
    "step_closure",
]
