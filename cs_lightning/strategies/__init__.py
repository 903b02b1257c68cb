"""The CS-X strategies: one system (:class:`CSXStrategy`) and N systems data-parallel (:class:`CSXDDPStrategy`)."""

from cs_lightning.strategies.csx import CSXStrategy
from cs_lightning.strategies.csx_ddp import CSXDDPStrategy
from cs_lightning.strategies.system import CSXSystem

__all__ = ["CSXDDPStrategy", "CSXStrategy", "CSXSystem"]
