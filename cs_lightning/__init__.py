"""cs_lightning: Cerebras semantics inside PyTorch Lightning.

Importing this package registers the ``"csx"`` accelerator and strategy with
Lightning, so ``Trainer(strategy="csx")`` works after ``import cs_lightning``.
"""

__version__ = "0.1.0"

from cs_lightning.accelerator import CSXAccelerator  # noqa: E402
from cs_lightning.module import CSXModule  # noqa: E402
from cs_lightning.step_closure import StepClosureCallback, step_closure  # noqa: E402
from cs_lightning.strategies import CSXDDPStrategy, CSXFSDPStrategy, CSXStrategy  # noqa: E402
from cs_lightning.strategies.registration import register as _register  # noqa: E402
from cs_lightning.time_to_first_loss import TimeToFirstLoss  # noqa: E402
from cs_lightning.trace import GraphBreakError  # noqa: E402

_register()
