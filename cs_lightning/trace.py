"""Capture a model's forward as one graph, as a CS-X system compiles the whole step.

:func:`captured` makes the outermost forward call of the given modules run through
TorchDynamo. With the ``"eager"`` backend the captured graph runs the very same torch ops as
eager PyTorch, so the first step is the check itself (no extra step, no RNG or BatchNorm
drift, losses bit-identical); with ``fullgraph=True`` anything that would split the graph
(data-dependent Python control flow) or read a value to the host mid-step (``.item()``,
``.tolist()``) raises :class:`GraphBreakError` naming the user's file and line before the
step runs. Other backends (``"inductor"``) compile for speed.

:func:`refusing_host_reads` covers the rest of the step: the user's own code around the
forward (``training_step``) may not read a tensor's value to the host either.
:func:`fingerprint` names the code and settings a verdict holds for (``trace_cache``).
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import linecache
import os
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import NonCallableMock

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from cs_lightning.errors import CSLightningError

__all__ = ["GraphBreakError", "TraceCheckSkipped", "captured", "fingerprint", "forget", "mocked_tensor_methods",
           "refusing_host_reads"]

_HOW_TO_DISABLE = "To train without the check, pass `CSXStrategy(trace_check=False)`."


class GraphBreakError(CSLightningError, RuntimeError):
    """The model's forward cannot be captured as one graph; the message names file, line and fix."""


class TraceCheckSkipped(UserWarning):
    """The first step ran unchecked, for a reason outside the model (the message says which)."""


def mocked_tensor_methods() -> list[str]:
    """The ``torch.Tensor`` methods replaced by a mock (``mock.patch("torch.Tensor.backward")``,
    common in test suites): TorchDynamo cannot capture a step then, whatever the model."""
    return sorted(
        f"torch.Tensor.{name}" for name, value in vars(torch.Tensor).items()
        # a Mock itself, or the function mock.patch(autospec=True) puts in its place
        if isinstance(value, NonCallableMock) or isinstance(getattr(value, "mock", None), NonCallableMock)
    )


@contextmanager
def captured(
    modules: Sequence[nn.Module],
    *,
    backend: str | Callable[..., Any] = "eager",
    fullgraph: bool = True,
    on_first_call: Callable[[float], None] | None = None,
) -> Iterator[None]:
    """Within the block, each module's outermost forward call is captured by TorchDynamo.

    Calls nested inside a captured call are part of its graph. ``on_first_call`` receives
    the seconds the first captured call took (capture plus execution). The modules'
    ``forward`` is restored on exit, also on error, and the graphs captured for them are
    dropped (so later models of the same class start afresh).
    """
    timer = _FirstCallTimer(on_first_call)
    patched = [(module, module.__dict__.get("forward"), module.forward) for module in modules]
    wrappers: list[Callable[..., Any]] = []
    try:
        for module, _, forward in patched:
            module.forward = _captured_forward(forward, backend, fullgraph, timer)
            wrappers.append(module.forward.traced)
        yield
    finally:
        for traced in wrappers:
            forget(traced)
        for module, own_forward, forward in reversed(patched):
            if own_forward is None:
                del module.forward
            else:
                module.forward = own_forward
            forget(forward)


def refusing_host_reads() -> TorchFunctionMode:
    """Within the block, the user's own code may not read a tensor's value to the host.

    ``.item()``, ``.tolist()``, ``.numpy()``, ``float(t)``, ``int(t)`` and ``if t > x:``
    raise :class:`GraphBreakError` naming the file and line, before the step goes on: on
    a CS-X the whole step runs on the system, and the host sees values only after it
    (``cs_lightning.step_closure``, ``self.log``). Reads made by libraries on the user's
    behalf (Lightning's logging, torchmetrics' input checks) are host-side bookkeeping and
    pass. Captured forwards see the mode too, at no cost in TorchDynamo's trace.
    """
    return _HostReadGuard()


class _HostReadGuard(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if getattr(func, "__name__", None) in _HOST_READ_METHODS:
            site = _user_frame()
            if site is not None:
                raise GraphBreakError(_host_read_message(func.__name__, site))
        return func(*args, **(kwargs or {}))


# Tensor methods and torch functions that hand a tensor's value to Python.
_HERE = str(Path(__file__).parent) + os.sep
_HOST_READ_METHODS = frozenset({"item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__",
                                "__complex__", "__format__", "__repr__", "__str__", "__array__", "__contains__",
                                "equal", "allclose", "is_nonzero"})
_TORCH = str(Path(torch.__file__).parent) + os.sep
# torch's Python-level tensor methods (`__format__`, `__repr__`...) hand the read on: look past them.
_PLUMBING = frozenset(_TORCH + name for name in ("_tensor.py", "_tensor_str.py", "overrides.py"))
# As Python was started (frames' file names) and resolved (links in the prefix).
_STDLIB = tuple({str(Path(sysconfig.get_paths()["stdlib"])) + os.sep,
                 str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + os.sep, "<frozen "})
_LIBRARIES = ("site-packages", "dist-packages")


def _user_frame() -> tuple[str, int, str] | None:
    """Who made the read, if it is the user's own code: (file, line, function); None when it is
    torch itself (an optimizer, TorchDynamo), cs_lightning or an installed library."""
    frame = sys._getframe(2)  # the caller of the mode's __torch_function__
    while frame is not None and frame.f_code.co_filename in _PLUMBING:
        frame = frame.f_back
    if frame is None:
        return None
    file = frame.f_code.co_filename
    if (file.startswith(_TORCH) or file.startswith(_HERE)
            or any(part in _LIBRARIES for part in Path(file).parts) or file.startswith(_STDLIB)):
        return None
    return file, frame.f_lineno, frame.f_code.co_name


def _host_read_message(method: str, site: tuple[str, int, str]) -> str:
    file, line, function = site
    read = {"__bool__": "`bool(tensor)` (a Python `if`/`while`/`and` on a tensor)",
            "__float__": "`float(tensor)`", "__int__": "`int(tensor)`", "__complex__": "`complex(tensor)`",
            "__index__": "a tensor used as a Python index", "__format__": "a tensor formatted into a string",
            "__repr__": "a tensor printed", "__str__": "a tensor printed",
            "__array__": "a tensor turned into a NumPy array", "__contains__": "`x in tensor`",
            "equal": "`torch.equal`", "allclose": "`allclose`"}.get(method, f"`.{method}()`")
    return (
        f"The training step reads a tensor's value to the host with {read}, which a CS-X system cannot do"
        f' inside a step:\n  File "{file}", line {line}, in {function}\n    {linecache.getline(file, line).strip()}\n'
        "Fix: keep the value a tensor (torch ops, torch.where), or read it after the step with"
        f" cs_lightning.step_closure or self.log.\n{_HOW_TO_DISABLE}"
    )


def fingerprint(module: nn.Module) -> str | None:
    """Identify the code a model runs and how it is configured, as a hash.

    It covers the source files of the model's module classes and their bases, every
    module of the user's own code loaded now (helpers a forward calls), and each
    submodule's plain settings (``self.clip = True``, ``hparams``): any of them can
    decide whether the step captures as one graph. A check that passed for one
    fingerprint need not run again for the same inputs (as a CS-X compile cache skips a
    graph it compiled before): see ``cs_lightning.trace_cache``. None when some class has
    no source file (defined in ``python -c`` or a notebook): such code is always checked.
    """
    classes = {cls for m in module.modules() for cls in type(m).__mro__ if cls is not object}
    files = {_source_file(cls) for cls in classes}
    if None in files:
        return None
    files |= _user_files()
    digest = hashlib.sha256(torch.__version__.encode())
    for name in sorted(files):
        digest.update(name.encode())
        with open(name, "rb") as source:
            digest.update(source.read())
    digest.update(repr(_settings(module)).encode())
    return digest.hexdigest()


def _user_files() -> set[str]:
    """Source files of the loaded modules that are the user's own (not torch, cs_lightning,
    the standard library or an installed package)."""
    files = set()
    for loaded in list(sys.modules.values()):
        file = getattr(loaded, "__file__", None)
        if (isinstance(file, str) and file.endswith(".py") and os.path.isfile(file)
                and not file.startswith((_TORCH, _HERE, *_STDLIB))
                and not any(part in _LIBRARIES for part in Path(file).parts)):
            files.add(file)
    return files


def _settings(module: nn.Module) -> list[tuple[str, str, str]]:
    """Per submodule: its path, class and public attributes described (a LightningModule's
    hparams too): any of them may pick the code path its forward takes."""
    settings = []
    for path, sub in module.named_modules():
        values = {name: value for name, value in vars(sub).items() if not name.startswith("_")}
        hparams = getattr(sub, "hparams", None)
        if isinstance(hparams, Mapping) and "hparams" not in values:  # Lightning keeps them in _hparams
            values["hparams"] = hparams
        settings.append((path, type(sub).__qualname__, _describe(values)))
    return settings


_SCALARS = (bool, int, float, complex, str, bytes, type(None), enum.Enum, torch.dtype, torch.device)


def _describe(value: Any, depth: int = 0) -> str:
    """A stable text for a setting: values of plain data, names of functions and classes,
    shapes of tensors, and the public attributes of other objects, a few levels deep."""
    if isinstance(value, _SCALARS):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}{value.dtype}"
    if isinstance(value, nn.Module):
        return "module"  # described on its own, as a submodule
    if isinstance(value, type) or inspect.isroutine(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    if depth >= 4:
        return type(value).__qualname__
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) and len(value) > 256:
        return f"{type(value).__qualname__}(len {len(value)})"  # a vocabulary, a table: data, not settings
    if isinstance(value, Mapping):
        items = sorted((str(k), _describe(v, depth + 1)) for k, v in value.items())
        return f"{type(value).__qualname__}{items}"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_describe(v, depth + 1) for v in value]
        return f"{type(value).__qualname__}{sorted(items) if isinstance(value, (set, frozenset)) else items}"
    public = {k: v for k, v in getattr(value, "__dict__", {}).items() if not k.startswith("_")}
    return f"{type(value).__qualname__}{_describe(public, depth + 1) if public else ''}"


def _source_file(cls: type) -> str | None:
    try:
        name = inspect.getsourcefile(cls)
    except (OSError, TypeError):  # built at run time, or a builtin
        return None
    return name if name is not None and os.path.isfile(name) else None


def forget(fn: Callable[..., Any]) -> None:
    """Drop what TorchDynamo compiled for ``fn``'s code, so it does not count toward its recompile limit."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None:
        torch._dynamo.reset_code(code)


class _FirstCallTimer:
    def __init__(self, report: Callable[[float], None] | None) -> None:
        self.report = report

    @contextmanager
    def timing(self) -> Iterator[None]:
        if self.report is None:
            yield
            return
        start = time.perf_counter()
        yield
        report, self.report = self.report, None
        report(time.perf_counter() - start)


def _captured_forward(
    forward: Callable[..., Any], backend: str | Callable[..., Any], fullgraph: bool, timer: _FirstCallTimer
) -> Callable[..., Any]:
    inner = torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend
    # Static, as a CS-X graph: with automatic dynamic shapes, a float attribute seen before with
    # another value (Dropout's p, even in an earlier model of the same code) becomes a graph input
    # read back with `.item()`, which the host-read check would blame on the user.
    # Capture through a wrapper with a code object of its own: TorchDynamo keys its graphs by
    # code, and a torch-defined forward (nn.Sequential's) would otherwise share one cache with
    # every other capture in the process and hit its recompile limit after eight fits.
    def traced(*args: Any, **kwargs: Any) -> Any:
        return forward(*args, **kwargs)

    traced.__code__ = traced.__code__.replace()
    compiled = torch.compile(
        traced, backend=_no_host_reads(inner) if fullgraph else inner, fullgraph=fullgraph, dynamic=False
    )

    def capturing_forward(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():  # nested in a captured call: part of the outer graph
            return forward(*args, **kwargs)
        with timer.timing():
            try:
                return compiled(*args, **kwargs)
            except torch._dynamo.exc.BackendCompilerFailed as error:
                if isinstance(error.inner_exception, GraphBreakError):
                    raise error.inner_exception from None
                raise
            except torch._dynamo.exc.TorchDynamoException as error:
                failure = error
        # A plain bug (a shape mismatch, the user's own raise) fails under TorchDynamo too: run
        # eagerly so it surfaces as the user's own error, as it would without the check.
        forward(*args, **kwargs)
        raise GraphBreakError(_explain(failure)) from None  # TorchDynamo's own traceback is noise here

    capturing_forward.traced = traced  # type: ignore[attr-defined]

    return capturing_forward


_HOST_READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__")


def _no_host_reads(backend: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a backend so a graph that reads a tensor's value to the host is rejected, with its line."""

    def checked(graph: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        for node in graph.graph.nodes:
            if node.op == "call_method" and node.target in _HOST_READS:
                raise GraphBreakError(
                    f"The training step reads a tensor's value to the host mid-step (`.{node.target}()`),"
                    " which a CS-X system cannot do inside a step:\n"
                    f"{node.meta.get('stack_trace', '').rstrip()}\n"
                    "Fix: keep the value a tensor (torch ops, torch.where), or read it after the step with"
                    f" cs_lightning.step_closure.\n{_HOW_TO_DISABLE}"
                )
        return backend(graph, example_inputs)

    return checked


def _explain(error: torch._dynamo.exc.TorchDynamoException) -> str:
    """Say what broke the graph, where in the user's code, and how to fix or skip the check."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = lines[0] if lines else type(error).__name__
    hints = [line.removeprefix("Hint:").strip() for line in lines if line.startswith("Hint:")]
    fix = hints[0] if hints else "make the forward branch-free (torch.where, torch.cond) and free of host reads"
    frames = list(getattr(error, "real_stack", None) or [])
    where = ""
    if frames:
        frame = frames[-1]
        where = f'\n  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n    {(frame.line or "").strip()}'
    return (
        f"The training step does not capture as one graph, as a CS-X system requires: {reason}{where}\n"
        f"Fix: {fix}\n{_HOW_TO_DISABLE}"
    )
