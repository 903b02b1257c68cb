import subprocess
import sys

import cs_lightning


def test_version_is_pep440_release() -> None:
    major, minor, patch = cs_lightning.__version__.split(".")
    assert all(part.isdigit() for part in (major, minor, patch))


def test_import_is_clean_in_a_fresh_interpreter() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import cs_lightning, lightning; print(cs_lightning.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == cs_lightning.__version__


def test_every_error_cs_lightning_raises_on_purpose_is_one_family() -> None:
    import inspect

    from cs_lightning import errors
    from cs_lightning.schedulers.from_torch import NotConvertible
    from cs_lightning.trace import GraphBreakError

    raised = [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, Exception) and not issubclass(cls, Warning)
    ]
    assert {"GraphBreakError", "NotConvertible", "ConfigError", "TooLargeError"} <= {cls.__name__ for cls in raised}
    assert all(issubclass(cls, errors.CSLightningError) for cls in raised)
    assert GraphBreakError is errors.GraphBreakError and NotConvertible is errors.NotConvertible
