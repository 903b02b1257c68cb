"""The CS-X strategies: one system (:class:`CSXStrategy`), N systems data-parallel (:class:`CSXDDPStrategy`)
and one model sharded over N systems (:class:`CSXFSDPStrategy`)."""

from cs_lightning.strategies.csx import CSXStrategy
from cs_lightning.strategies.csx_ddp import CSXDDPStrategy
from cs_lightning.strategies.csx_fsdp import CSXFSDPStrategy
from cs_lightning.strategies.system import CSXSystem

__all__ = ["CSXDDPStrategy", "CSXFSDPStrategy", "CSXStrategy", "CSXSystem"]
