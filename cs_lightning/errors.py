"""The cs_lightning error hierarchy: catch ``CSLightningError`` to catch them all."""


class CSLightningError(Exception):
    """Base class of every error cs_lightning raises on purpose."""


class DeferredInitError(CSLightningError, RuntimeError):
    """A constructor did something deferred initialization cannot replay faithfully."""


class DeferredInitWarning(UserWarning):
    """Deferred initialization fell back to eager work, or found something suspicious."""
