"""Teach Lightning the "csx" names: accelerator and strategies, resolved like its own.

Lightning resolves ``strategy=`` and ``accelerator=`` independently, and a strategy picked by
name cannot see how many devices were asked for. Two small hooks in Lightning's accelerator
connector close the gap, at the points where Lightning itself picks or falls back:

* a strategy chosen automatically for the csx accelerator is ``"csx"``;
* a csx strategy makes the accelerator csx (backed by the device type Lightning picked:
  ``accelerator="cpu"`` with ``strategy="csx"`` means systems backed by the CPU), and
  ``"csx"`` asked for more than one process becomes its data-parallel sibling, same options.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import lightning
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry, CPUAccelerator, CUDAAccelerator
from lightning.pytorch.strategies import StrategyRegistry

from cs_lightning.accelerator import CSXAccelerator
from cs_lightning.errors import TrainerArgumentError
from cs_lightning.strategies.csx import CSXStrategy
from cs_lightning.strategies.csx_ddp import CSXDDPStrategy
from cs_lightning.strategies.csx_fsdp import CSXFSDPStrategy
from cs_lightning.strategies.system import CSXSystemMixin

_BACKING_NAMES = {CPUAccelerator: "cpu", CUDAAccelerator: "cuda"}


def register() -> None:
    """Register ``"csx"`` (accelerator and strategy), ``"csx_ddp"`` and ``"csx_fsdp"`` with Lightning; safe
    to call twice.

    The names go through Lightning's public registries. Resolving ``"csx"`` as Lightning
    resolves its own names needs hooks in its private accelerator connector: when a Lightning
    release has moved it, one warning says so and the strategies still work by name and by
    instance (``devices=N`` then needs ``strategy="csx_ddp"``).
    """
    CSXAccelerator.register_accelerators(AcceleratorRegistry)
    CSXStrategy.register_strategies(StrategyRegistry)
    CSXDDPStrategy.register_strategies(StrategyRegistry)
    CSXFSDPStrategy.register_strategies(StrategyRegistry)
    connector = _connector()
    missing = [name for name in ("_choose_strategy", "_init_strategy") if not callable(getattr(connector, name, None))]
    if missing:
        warnings.warn(
            _lightning_changed(
                f"its accelerator connector has no {', '.join(missing)}"
                if connector is not None
                else "its accelerator connector has moved"
            )
            + " Meanwhile strategy='csx' trains on one device; for several, pass strategy='csx_ddp'.",
            stacklevel=3,
        )
        return
    if not getattr(connector._init_strategy, "_csx", False):
        connector._choose_strategy = _csx_for_csx_accelerator(connector._choose_strategy)
        connector._init_strategy = _csx_system(connector._init_strategy)


def _connector() -> Any:
    """Lightning's private accelerator connector class, or None where a release has moved it."""
    try:
        from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
    except ImportError:
        return None
    return _AcceleratorConnector


def _csx_for_csx_accelerator(choose: Callable[[Any], object]) -> Callable[..., object]:
    @functools.wraps(choose)
    def choose_strategy(self: Any) -> object:
        return CSXStrategy.strategy_name if isinstance(self.accelerator, CSXAccelerator) else choose(self)

    return choose_strategy


def _csx_system(init: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(init)
    def init_strategy(self: Any) -> None:
        init(self)
        if not isinstance(self.strategy, CSXSystemMixin):
            return
        if not isinstance(self.accelerator, CSXAccelerator):
            self.accelerator = CSXAccelerator(backing=_backing_name(self.accelerator))
        try:
            processes = len(self._parallel_devices) * self._num_nodes_flag
            by_name = isinstance(self._strategy_flag, str)
            devices = self._devices_flag
        except AttributeError as error:
            raise RuntimeError(_lightning_changed(f"its accelerator connector has changed ({error})")) from error
        # Lightning picks autocast's device from this flag: it must be the backing device type.
        self._accelerator_flag = self.accelerator.backing
        if isinstance(self.strategy, CSXStrategy) and processes > 1:
            if not by_name:
                raise TrainerArgumentError(
                    "strategy",
                    f"CSXStrategy emulates one system, but devices={devices!r} and num_nodes={self._num_nodes_flag}"
                    f" ask for {processes} processes; fix: give the strategy by its name, csx (which runs one"
                    " system per device, data-parallel), or as CSXDDPStrategy, or run one process (devices=1,"
                    " num_nodes=1)",
                )
            self.strategy = CSXDDPStrategy(**self.strategy.csx_options)
        elif isinstance(self.strategy, CSXStrategy) and by_name:
            self.strategy._root_device = self._parallel_devices[0]

    init_strategy._csx = True  # type: ignore[attr-defined]
    return init_strategy


def _lightning_changed(what: str) -> str:
    return (
        f"cs_lightning cannot teach lightning {lightning.__version__} the 'csx' names: {what}. Install a"
        " lightning release cs_lightning supports (see its package requirements) or a newer cs_lightning."
    )


def _backing_name(accelerator: Accelerator) -> str:
    name = _BACKING_NAMES.get(type(accelerator))
    if name is None:
        raise TrainerArgumentError(
            "accelerator",
            "the csx strategies emulate CS-X systems on CPU or CUDA devices, but the accelerator is"
            f" {type(accelerator).__name__}; fix: set the accelerator to csx, cpu or cuda",
        )
    return name
