"""The cs_lightning error hierarchy: catch ``CSLightningError`` to catch them all."""


class CSLightningError(Exception):
    """Base class of every error cs_lightning raises on purpose."""


class DeferredInitError(CSLightningError, RuntimeError):
    """A constructor did something deferred initialization cannot replay faithfully."""


class DeferredInitUsageError(CSLightningError, TypeError):
    """``deferred_init`` or ``materialize`` was given something other than what they take."""


class DeferredInitWarning(UserWarning):
    """Deferred initialization fell back to eager work, or found something suspicious."""


class ConfigError(CSLightningError, ValueError):
    """A YAML configuration is wrong: ``key`` is its dotted key path, the message says the fix."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


class ClosedFormError(CSLightningError, TypeError):
    """A scheduler's ``_get_closed_form`` cannot be evaluated on a tensor of steps."""


class TooLargeError(CSLightningError, MemoryError):
    """A result would not fit in this machine's memory; the message says how to ask for less."""


class GraphBreakError(CSLightningError, RuntimeError):
    """The training step does not run as one graph; the message names file, line and fix."""


class NotConvertible(CSLightningError, ValueError):
    """A torch scheduler that has no closed-form equivalent; the message says why."""
