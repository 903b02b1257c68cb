"""The benchmarks run: each script's usage, and the parts that reach into the package's
internals (which a rename would break without any other test noticing) on a small model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


@pytest.mark.parametrize("script", sorted(path.name for path in BENCHMARKS.glob("*.py")))
def test_usage(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


@pytest.mark.parametrize("case", ["csx", "rank 1"])
def test_sharded_init_materializes_alone(case: str) -> None:
    command = [
        sys.executable,
        str(BENCHMARKS / "sharded_init.py"),
        "--alone-case",
        case,
        "--ranks",
        "2",
        "--depth",
        "1",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    timing = json.loads(done.stdout.strip().splitlines()[-1])
    assert timing["wall"] > 0 and timing["cpu"] > 0
    if case.startswith("rank"):  # a rank's share of a 2-rank run on this machine's cores
        assert timing["threads"] == 1
