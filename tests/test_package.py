import subprocess
import sys

import cs_lightning


def test_version_is_pep440_release() -> None:
    major, minor, patch = cs_lightning.__version__.split(".")
    assert all(part.isdigit() for part in (major, minor, patch))


def test_import_is_clean_in_a_fresh_interpreter() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import cs_lightning, lightning; print(cs_lightning.__version__)"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == cs_lightning.__version__
