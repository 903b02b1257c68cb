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


def _dev_tools() -> set[str]:
    """The distributions `pip install -e ".[dev]"` installs by name (the dev extra; no tomllib on Python 3.10)."""
    (dev,) = re.findall(r"^dev = \[(.*)\]$", (REPO / "pyproject.toml").read_text(), flags=re.MULTILINE)
    return {re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0] for requirement in re.findall(r'"([^"]+)"', dev)}


def test_each_tool_the_readme_runs_is_installed_by_dev_or_by_a_pip_install_it_gives() -> None:
    """`pre-commit install` needs pre-commit, which `.[dev]` does not bring: the README must say to install it."""
    prose = " ".join(re.sub(r"```.*?```", " ", README, flags=re.DOTALL).split())
    spans = re.findall(r"`([^`]+)`", prose) + _snippets("bash")
    commands = [part.split() for span in spans for part in span.split("&&")]
    run = {words[0] for words in commands if words and words[0] in ("pre-commit", "ruff", "mypy", "pytest")}
    assert "pre-commit" in run
    for tool in sorted(run):
        assert tool in _dev_tools() or f"pip install {tool}" in prose, tool
