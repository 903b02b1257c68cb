"""The CS-X strategies: one system (:class:`CSXStrategy`), N systems data-parallel (:class:`CSXDDPStrategy`)
and one model sharded over N systems (:class:`CSXFSDPStrategy`); :class:`CSXSystemMixin` is what makes a
Lightning strategy a CS-X system, and :class:`CSXOptions` lists the options they all take."""

from typing import Any

from cs_lightning.strategies import system
from cs_lightning.strategies.csx import CSXStrategy
from cs_lightning.strategies.csx_ddp import CSXDDPStrategy
from cs_lightning.strategies.csx_fsdp import CSXFSDPStrategy
from cs_lightning.strategies.options import CSX_OPTION_NAMES, CSXOptions
from cs_lightning.strategies.system import CSXSystemMixin

__all__ = ["CSX_OPTION_NAMES", "CSXDDPStrategy", "CSXFSDPStrategy", "CSXOptions", "CSXStrategy", "CSXSystemMixin"]


def __getattr__(name: str) -> Any:
    # the deprecated names (CSXSystem), warning at the line of the user's code that reads them
    return system.renamed(name, stacklevel=3)
