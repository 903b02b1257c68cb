"""CSXStrategy: one emulated Cerebras CS-X system."""

from __future__ import annotations

from typing import Any

from lightning.fabric.strategies import _StrategyRegistry
from lightning.fabric.utilities.types import _DEVICE
from lightning.pytorch.strategies import SingleDeviceStrategy
from typing_extensions import override

from cs_lightning.accelerator import default_backing
from cs_lightning.strategies.system import CSXSystem


class CSXStrategy(CSXSystem, SingleDeviceStrategy):
    """Train on one CS-X system: lazy model, traced step, step closures, time to first loss.

    ``Trainer(strategy="csx")`` is enough: it implies the csx accelerator, and with
    ``devices=N`` (or several nodes) Lightning gets the data-parallel sibling,
    :class:`~cs_lightning.strategies.CSXDDPStrategy`, with the same options.

    Args:
        device: the backing device; by default the first CUDA device when present, else the CPU.
        trace_check: check that the first step traces as one graph, failing early when it cannot.
        compile: compile forward and optimizer update with ``torch.compile`` for speed.
        compile_backend: the ``torch.compile`` backend used when ``compile=True``.
        init_mode: ``"exact"`` or ``"independent"`` materialization of a recorded model.
        **kwargs: ``strict_schedulers`` (see :class:`~cs_lightning.strategies.CSXSystem`), and the
            arguments of :class:`~lightning.pytorch.strategies.SingleDeviceStrategy`.
    """

    strategy_name = "csx"

    def __init__(
        self,
        device: _DEVICE | None = None,
        *,
        trace_check: bool = True,
        compile: bool = False,
        compile_backend: str | Any = "inductor",
        init_mode: str = "exact",
        **kwargs: Any,
    ) -> None:
        if device is None:
            device = "cuda:0" if default_backing() == "cuda" else "cpu"
        super().__init__(
            device=device,
            trace_check=trace_check,
            compile=compile,
            compile_backend=compile_backend,
            init_mode=init_mode,
            **kwargs,
        )

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        strategy_registry.register(cls.strategy_name, cls, description=cls.__doc__.splitlines()[0], override=True)
