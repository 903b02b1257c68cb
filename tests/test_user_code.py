"""The one test of whose code a file holds, shared by deferred init's and the trace check's errors, and of
the one import of the user's code by dotted path."""

from __future__ import annotations

import functools
import json
import os
import textwrap
import traceback
from pathlib import Path

import pytest
import torch

import cs_lightning.schedulers.base
from cs_lightning.deferred import deferred_init
from cs_lightning.errors import DeferredInitWarning
from cs_lightning.user_code import import_dotted, is_user_file, users_line

TORCH_DIR = str(Path(torch.__file__).parent)


def test_torch_cs_lightning_and_the_standard_library_are_not_the_users() -> None:
    assert not is_user_file(torch.nn.modules.linear.__file__)
    assert not is_user_file(cs_lightning.schedulers.base.__file__)
    assert not is_user_file(os.__file__)
    assert not is_user_file("<frozen importlib._bootstrap>")
    assert not is_user_file(str(Path(torch.__file__).resolve().parent / "nn" / "functional.py"))
    assert is_user_file(__file__)
    assert is_user_file(TORCH_DIR + "vision" + os.sep + "models.py")  # a sibling folder, not torch's


_MODEL = textwrap.dedent("""
    import torch
    from torch import nn

    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4))
            self.open = bool(self.w.sum() > 0)  # line 9: reads random values in a constructor
""")


@pytest.mark.parametrize(
    "folder, named",
    [
        (os.path.join(os.sep, "home", "user", "project"), True),  # the user's own code
        # an installed library (torchvision, lightning): not a line the user can change, so the
        # line in the user's code that called it is named instead
        (os.path.join(os.sep, "env", "lib", "site-packages", "torchvision"), False),
        (str(Path(cs_lightning.schedulers.base.__file__).parent.parent), False),  # cs_lightning's own
    ],
)
def test_a_constructor_site_is_the_first_frame_of_the_users_own_code(folder: str, named: bool) -> None:
    """The recorder's prefixes were its own: a folder merely starting like torch's counted as
    torch, and cs_lightning's modules outside cs_lightning.deferred counted as the user's; then
    installed packages counted as the user's (Lightning's seed.py was named)."""
    file = os.path.join(folder, "fake_models.py")
    namespace: dict = {}
    exec(compile(_MODEL, file, "exec"), namespace)
    with pytest.warns(DeferredInitWarning) as caught:
        deferred_init(namespace["Gate"])
    message = str(caught[0].message)
    assert "Gate.__init__ (" in message
    assert (f"({file}:9)" in message) is named
    assert (f"({__file__}:" in message) is not named


def test_a_dotted_path_imports_its_object() -> None:
    assert import_dotted("torch.optim.AdamW") is torch.optim.AdamW
    assert import_dotted("os.path") is os.path


def test_a_nested_class_imports_through_its_outer_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonargparse writes a nested class's path as module.Outer.Inner: the checkpoint check compares those."""
    (tmp_path / "nests.py").write_text("class Outer:\n    class Inner:\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import nests

    assert import_dotted("nests.Outer.Inner") is nests.Outer.Inner
    with pytest.raises(ImportError) as raised:
        import_dotted("nests.Outer.Nope")
    assert (
        str(raised.value)
        == "'nests.Outer' cannot be imported (No module named 'nests.Outer'; 'nests' is not a package)"
    )


SHAPE = "is not a dotted import path such as 'package.module.Name'"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("AdamW", f"'AdamW' {SHAPE}: it has no dot"),
        (".AdamW", f"'.AdamW' {SHAPE}: its module part, before the last dot, is empty"),
        (
            "torch..optim.AdamW",
            f"'torch..optim.AdamW' {SHAPE}: its module part 'torch..optim' is not a dotted Python name",
        ),
        ("torch.optim.", f"'torch.optim.' {SHAPE}: nothing follows its last dot"),
        ("torch.optim.Adam W", f"'torch.optim.Adam W' {SHAPE}: 'Adam W', after the last dot, is not a Python name"),
        ("no_such_module_here.X", "'no_such_module_here' cannot be imported (No module named 'no_such_module_here')"),
        ("torch.optim.AdamWW", "module 'torch.optim' has no 'AdamWW'"),
    ],
)
def test_a_dotted_path_that_fails_is_an_import_error_saying_why(path: str, message: str) -> None:
    with pytest.raises(ImportError) as raised:
        import_dotted(path)
    assert str(raised.value) == message


def test_a_module_that_raises_as_it_is_imported_is_an_import_error_naming_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as raised:
        import_dotted("raises_at_import.Model")
    assert str(raised.value) == "'raises_at_import' cannot be imported (RuntimeError: boom)"


def _traceback_of(run: object) -> BaseException:
    try:
        run()  # type: ignore[operator]
    except Exception as error:  # any error: its traceback is what is tested
        return error
    raise AssertionError("nothing raised")


def test_the_users_line_is_their_own_frame_not_the_standard_librarys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """json.loads fails inside json/decoder.py; the line to change is the user's call of it."""
    (tmp_path / "decodes_at_import.py").write_text('import json\njson.loads("x")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    error = _traceback_of(lambda: __import__("decodes_at_import"))
    assert error.__traceback__ is not None and "decoder.py" in str(traceback.extract_tb(error.__traceback__)[-1])
    assert users_line(error.__traceback__) == " (at decodes_at_import.py:2, in <module>)"


def test_the_users_line_falls_back_to_an_installed_package_and_then_to_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "installed_user_code.py").write_text("import json\n\ndef load():\n    return json.loads('x')\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)
    import installed_user_code  # type: ignore[import-not-found]

    in_package = _traceback_of(installed_user_code.load).__traceback__
    assert in_package is not None
    expected = f" (at {os.path.join('site-packages', 'installed_user_code.py')}:4, in load)"
    assert users_line(in_package.tb_next) == expected  # without _traceback_of's own frame
    in_json_only = _traceback_of(functools.partial(json.loads, "x")).__traceback__
    assert in_json_only is not None
    assert users_line(in_json_only.tb_next) == ""  # without _traceback_of's own frame: json's only
