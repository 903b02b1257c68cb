"""The README's commands are the ones CI runs, and its Python snippets run as written."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

README = (REPO / "README.md").read_text()


def _snippets(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci_command = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci_command.endswith("&& pytest")
    assert ci_command in [s.strip() for s in _snippets("bash")]


@pytest.mark.parametrize("snippet", _snippets("python"), ids=lambda s: s.splitlines()[0][:40])
def test_python_snippet_runs(snippet: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
