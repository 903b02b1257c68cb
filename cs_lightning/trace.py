"""Check that a training step runs as one graph, as a CS-X system traces it.

A CS-X traces the step lazily: Python runs once, its conditionals resolved and loops
unrolled, and every tensor op becomes a node of one graph. The graph breaks only where
the host needs a value mid-step or where a shape depends on values.
:func:`lazy_trace` checks exactly that while the first step runs for real, so the check
costs no extra step and no capture: the user's own code may not read a tensor's value to
the host (``.item()``, ``if loss > x:``, ``float(t)``, printing) nor call an op whose
output shape depends on values (``nonzero``, ``x[mask]``, ``unique``); either raises
:class:`GraphBreakError` naming the file and line, before the step goes on.

:class:`Capture` holds a model's forwards captured by TorchDynamo, which the strategy puts in
place around each training step under ``compile=True`` (with the trace check on, the capture is
``fullgraph`` and rejects host reads: it is the check); :func:`captured` does the same for one block.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from cs_lightning.errors import GraphBreakError
from cs_lightning.user_code import is_library_file, is_user_file, model_packages

__all__ = ["Capture", "GraphBreakError", "captured", "forget", "lazy_trace"]

_HOW_TO_DISABLE = (
    "To train without the check, pass `trace_check=False` to the strategy (`CSXStrategy(trace_check=False)`,"
    " likewise CSXDDPStrategy and CSXFSDPStrategy; in the CLI `--trainer.strategy cs_lightning.CSXStrategy"
    " --trainer.strategy.trace_check false`)."
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
    capture = Capture(modules, backend=backend, fullgraph=fullgraph, on_first_call=on_first_call)
    try:
        with capture.active():
            yield
    finally:
        capture.close()


class Capture:
    """Captured forwards of some modules, made once and put in place only within :meth:`active`.

    A fit compiles its training step once and runs it many times, while the model's other calls
    (sampling in ``on_train_end``, at growing lengths) must stay eager: installing the captured
    forwards only around the step keeps one set of graphs without capturing those calls.
    :meth:`close` drops the graphs (so later models of the same class start afresh).
    """

    def __init__(
        self,
        modules: Sequence[nn.Module],
        *,
        backend: str | Callable[..., Any] = "eager",
        fullgraph: bool = True,
        on_first_call: Callable[[float], None] | None = None,
    ) -> None:
        timer = _FirstCallTimer(on_first_call)
        inner = torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend
        self._modules = list(modules)
        self._forwards = [module.forward for module in self._modules]
        packages = model_packages(type(m) for module in self._modules for m in module.modules())
        made = [_captured_forward(forward, inner, fullgraph, timer, packages) for forward in self._forwards]
        self._capturing = [capturing for capturing, _ in made]
        self._traced = [traced for _, traced in made]

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within the block, the modules' ``forward`` is the captured one; restored on exit, also on error."""
        replaced: list[tuple[nn.Module, Callable[..., Any] | None]] = []
        try:
            for module, capturing in zip(self._modules, self._capturing):
                replaced.append((module, module.__dict__.get("forward")))
                module.forward = capturing
            yield
        finally:
            for module, own_forward in reversed(replaced):  # only those replaced: a failure may stop midway
                if own_forward is None:
                    del module.forward
                else:
                    module.forward = own_forward

    def close(self) -> None:
        """Drop the graphs captured for the modules: they do not count toward TorchDynamo's recompile limit."""
        for fn in (*self._traced, *self._forwards):
            forget(fn)


@contextmanager
def lazy_trace(model: nn.Module | None = None) -> Iterator[None]:
    """Within the block, the user's own code runs as a CS-X traces it: no host reads, static shapes.

    Refused, naming the user's file and line: reading a tensor's value to the host
    (``.item()``, ``if t > x:``, ``float(t)``, printing, a tensor given where torch needs a
    Python number such as ``torch.zeros(n)``), and ops whose output shape depends on values
    (``x[mask]``, ``nonzero``, ``unique``), asked for directly or through a torch function.
    What torch's own modules and optimizers and installed bookkeeping libraries (Lightning's
    logging, torchmetrics' input checks) do on the user's behalf passes. Only the calling
    thread is checked. A refusal that code inside the block catches fails the block as it ends.

    Args:
        model: the packages its modules come from count as the user's code wherever they are
            installed: the model is what runs on the system.
    """
    code = _UserCode(model)
    calls = _CallGuard(code)
    with calls, _KernelGuard(code, calls):
        yield
    if calls.refused is not None:
        # The user's code caught the refusal (a broad `except Exception` around a read) and ran on: its
        # except branch is a path the system would never take, so the check fails all the same.
        raise GraphBreakError(
            f"{calls.refused}\n(The step's own code caught this error, in an `except` around the read, and ran on.)"
        )


class _UserCode:
    """Tells the user's own frames from torch's, cs_lightning's, the standard library's and
    installed libraries' (except the packages the model comes from)."""

    def __init__(self, model: nn.Module | None) -> None:
        self.packages = model_packages(type(m) for m in model.modules()) if model is not None else set()

    def site(self, frame: Any, past_torch: bool = False) -> tuple[str, int, str] | None:
        """(file, line, function) of the user's frame that made a call, ``frame`` being its
        innermost Python frame; None when the call is not the user's. With ``past_torch`` a call
        made inside a torch function is charged to its caller, unless one of torch's modules
        made it (an implementation choice of torch's, such as SyncBatchNorm's)."""
        while frame is not None:
            file = frame.f_code.co_filename
            if past_torch and file.startswith(_TORCH_MODULES):
                return None
            if file not in _PLUMBING and not (past_torch and file.startswith(_TORCH)) and not _prints(frame):
                break
            frame = frame.f_back
        if frame is None or not self._owns(frame) or _in_step_hook(frame):
            return None
        return frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name

    def _owns(self, frame: Any) -> bool:
        file = frame.f_code.co_filename
        if not is_user_file(file):
            return False
        if is_library_file(file):
            return frame.f_globals.get("__name__", "").partition(".")[0] in self.packages
        return True


class _CallGuard(TorchFunctionMode):
    """Refuses the user's Python-level reads of a tensor's value (``.item()``, ``float(t)``,
    ``if t > x:``) and remembers which torch function the user is calling, for the kernel guard."""

    def __init__(self, code: _UserCode) -> None:
        super().__init__()
        self.code = code
        self.calling: tuple[str, tuple, dict] | None = None
        self.refused: GraphBreakError | None = None  # the first refusal, even if the user's code catches it

    def refuse(self, message: str) -> NoReturn:
        error = GraphBreakError(message)
        self.refused = self.refused or error
        raise error

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _HOST_READ_METHODS:
            site = self.code.site(sys._getframe(1))
            if site is not None:
                self.refuse(_host_read_message(_method_read(name), _where(site), site[0]))
        outer, self.calling = self.calling, (name, args, kwargs)
        try:
            return func(*args, **kwargs)
        finally:
            self.calling = outer


class _KernelGuard(TorchDispatchMode):
    """Sees what torch's kernels do for the user's call: a value read in C++ (``torch.zeros(n)``,
    ``x[:n]`` with a tensor ``n``) and ops whose output shape depends on values."""

    def __init__(self, code: _UserCode, calls: _CallGuard) -> None:
        super().__init__()
        self.code, self.calls = code, calls

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # a mode that never compiles needs no TorchDynamo-disabling wrapper

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and not self._static_call():
            site = self.code.site(sys._getframe(1))
            if site is not None and self._call_name() == "one_hot":  # reads its input's max: the class count
                self.calls.refuse(_dynamic_shape_message("one_hot", site))
            if site is not None:
                self.calls.refuse(
                    _host_read_message(
                        f"`{self._call_name()}` given a tensor where it needs a Python number", _where(site), site[0]
                    )
                )
        elif (
            (torch.Tag.dynamic_output_shape in func.tags or func in _UNTAGGED_DYNAMIC_SHAPES)
            and _value_dependent(func, args, kwargs)
            and not self._static_call()
        ):
            site = self.code.site(sys._getframe(1), past_torch=True)
            if site is not None:
                # what the user called (`unique`, not its kernel `_unique2`; `x[mask]`, not `__getitem__`)
                called = self._call_name() if self.calls.calling else func.__name__
                named = _OPERATORS.get(called, func.__name__ if called.startswith("__") else called)
                self.calls.refuse(_dynamic_shape_message(named, site))
        return func(*args, **kwargs)

    def _call_name(self) -> str:
        return self.calls.calling[0] if self.calls.calling else "a torch call"

    def _static_call(self) -> bool:
        """Whether the torch function being called makes its output shape static anyway, reading
        values only to validate them or computing through value-dependent steps."""
        if self.calls.calling is None:
            return False
        name, args, kwargs = self.calls.calling
        if name == "one_hot":  # checks its input's range; the shape is value-dependent only without num_classes
            return (args[1] if len(args) > 1 else kwargs.get("num_classes", -1)) >= 0
        return name in _STATIC_RESULTS


def _value_dependent(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this call of an op torch tags as possibly value-dependent really is."""
    name = func.__name__.split(".")[0]
    if name == "index":  # x[mask]: only boolean indices select a value-dependent count
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])
    if name == "repeat_interleave":  # tensor repeats without output_size
        return kwargs.get("output_size") is None
    return True


# Tensor methods and torch functions that hand a tensor's value to Python.
_HOST_READ_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "__complex__",
        "__format__",
        "__repr__",
        "__str__",
        "__array__",
        "__contains__",
        "equal",
        "allclose",
        "is_nonzero",
    }
)
# Ops whose output shape depends on values that torch does not tag so: packing takes sum(lengths) rows.
_UNTAGGED_DYNAMIC_SHAPES = frozenset({torch.ops.aten._pack_padded_sequence.default})
# torch functions whose output shape is static though they compute through value-dependent ops.
_STATIC_RESULTS = frozenset({"combinations", "ctc_loss", "linalg_lstsq"})
_TORCH = str(Path(torch.__file__).parent) + os.sep
_TORCH_MODULES = os.path.join(_TORCH + "nn", "modules") + os.sep
# torch's Python-level tensor methods (`__format__`, `__repr__`...) hand the read on, and one guard
# runs the other's calls: look past them.
_PLUMBING = frozenset({*(_TORCH + name for name in ("_tensor.py", "_tensor_str.py", "overrides.py")), __file__})
_LIGHTNING_DIRS = tuple(f"{os.sep}{name}{os.sep}" for name in ("lightning", "pytorch_lightning"))


# Lightning's hooks that a manually optimized training_step runs (through manual_backward and the optimizer's
# step): not checked, as under automatic optimization, where they run after training_step returns.
_STEP_HOOKS = frozenset(
    {
        "on_before_backward",
        "backward",
        "on_after_backward",
        "on_before_zero_grad",
        "optimizer_zero_grad",
        "on_before_optimizer_step",
        "configure_gradient_clipping",
    }
)


def _in_step_hook(frame: Any) -> bool:
    """Whether ``frame`` runs inside one of `_STEP_HOOKS`, called by Lightning (a read made to be refused
    is rare: the walk up the stack costs nothing on the step's way)."""
    while frame is not None:
        code = frame.f_code
        if (
            code.co_name in ("_call_callback_hooks", "_call_lightning_module_hook")
            and any(part in code.co_filename for part in _LIGHTNING_DIRS)
            and frame.f_locals.get("hook_name") in _STEP_HOOKS
        ):
            return True
        frame = frame.f_back
    return False


def _prints(frame: Any) -> bool:
    """``self.print`` (and the progress bar's ``print`` it goes through): Lightning prints for its caller,
    whose read it is."""
    return frame.f_code.co_name == "print" and any(part in frame.f_code.co_filename for part in _LIGHTNING_DIRS)


def _host_read_message(read: str, where: str, file: str | None = None) -> str:
    """What the step reads (``read``), where (a traceback's lines, from ``file``), and how to fix it
    or skip the check."""
    own = (
        "keep the value a tensor (torch ops, torch.where), or read it after the step with"
        " cs_lightning.step_closure or self.log"
    )
    return (
        f"The training step reads a tensor's value to the host with {read}, which a CS-X system cannot do"
        f" inside a step:\n{where}\n{_fix(own, file)}.\n{_HOW_TO_DISABLE}"
    )


def _fix(own: str, file: str | None) -> str:
    """The fix for a line of code the user can change; for a line of an installed package (a model
    library such as transformers), also the ways around it when they cannot."""
    if file is None or not is_library_file(file):
        return f"Fix: {own}"
    return (
        f"Fix: {own}; or, as `{_package_of(file)}` is an installed package, if it is not yours to change: call it"
        " in a way that takes no such step (an argument or a config option of that library), or check the step"
        " with `compile=True` instead, where TorchDynamo's capture is the check (some libraries skip such steps"
        " under torch.compile)"
    )


def _package_of(file: str) -> str:
    """``transformers`` for ``.../site-packages/transformers/masking_utils.py``."""
    parts = Path(file).parts
    folder = next(k for k, part in enumerate(parts) if part in ("site-packages", "dist-packages"))
    return Path(parts[folder + 1]).stem


# How each read is named in the message.
_READS = {
    "__bool__": "`bool(tensor)` (a Python `if`/`while`/`and` on a tensor)",
    "__float__": "`float(tensor)`",
    "__int__": "`int(tensor)`",
    "__complex__": "`complex(tensor)`",
    "__index__": "a tensor used as a Python index",
    "__format__": "a tensor formatted into a string",
    "__repr__": "a tensor printed",
    "__str__": "a tensor printed",
    "__array__": "a tensor turned into a NumPy array",
    "__contains__": "`x in tensor`",
    "equal": "`torch.equal`",
    "allclose": "`allclose`",
}


def _method_read(name: str) -> str:
    """How the read of a tensor method (or torch function) ``name`` is named in the message."""
    return _READS.get(name, f"`.{name}()`")


def _dynamic_shape_message(op: str, site: tuple[str, int, str]) -> str:
    return (
        f"The training step calls `{op.split('.')[0]}`, whose output shape depends on the values of its input,"
        f" which a CS-X system cannot do inside its static graph:\n{_where(site)}\n"
        + _fix(
            "keep shapes static (a mask multiplied in, torch.where, a fixed size such as one_hot's num_classes)",
            site[0],
        )
        + ".\n"
        + _HOW_TO_DISABLE
    )


def _where(site: tuple[str, int, str]) -> str:
    file, line, function = site
    return f'  File "{file}", line {line}, in {function}\n    {linecache.getline(file, line).strip()}'


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
    forward: Callable[..., Any],
    inner: Callable[..., Any],
    fullgraph: bool,
    timer: _FirstCallTimer,
    packages: set[str],
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The forward that captures (for the module), and the function TorchDynamo compiles (to forget after).
    ``packages``: those the model comes from, whose code is checked as the user's."""

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
        traced, backend=_no_host_reads(inner, packages) if fullgraph else inner, fullgraph=fullgraph, dynamic=False
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

    return capturing_forward, traced


def _no_host_reads(backend: Callable[..., Any], packages: set[str]) -> Callable[..., Any]:
    """Wrap a backend so a graph that reads a tensor's value to the host, or makes a value-dependent shape,
    in the user's code (or the model's ``packages``) is rejected, with its line; as the eager check does."""

    def checked(graph: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        for node in graph.graph.nodes:
            site = _users_site(node.meta.get("stack_trace") or "", packages)
            if site is None:  # torch's own, or another library's bookkeeping: passed, as by the eager check
                continue
            if node.op == "call_method" and node.target in _HOST_READ_METHODS:
                raise GraphBreakError(_host_read_message(_method_read(node.target), _where(site), site[0]))
            # torch captures a value-dependent shape (x[mask], nonzero) as an unbacked size, u0
            value = node.meta.get("example_value")
            if value is not None and free_unbacked_symbols(value):
                raise GraphBreakError(_dynamic_shape_message(_op_name(node), site))
        return backend(graph, example_inputs)

    return checked


def _users_site(stack_trace: str, packages: set[str]) -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost frame in a captured node's stack trace past torch's own and
    TorchDynamo's capture wrapper, when it is the user's code or the model's ``packages``; None for another
    installed library's (bookkeeping, which the eager check passes too)."""
    frames = re.findall(r'File "(.+)", line (\d+), in (.+)', stack_trace)
    users = [(file, int(line), name) for file, line, name in frames if is_user_file(file)]
    if not users or (is_library_file(users[-1][0]) and _package_of(users[-1][0]) not in packages):
        return None
    return users[-1]


def _op_name(node: torch.fx.Node) -> str:
    """What the user wrote that made ``node``: a method's or function's name, or ``x[mask]``."""
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
    return _OPERATORS.get(name, name)


# The operators a value-dependent shape is made with, as the user writes them
_OPERATORS = {"__getitem__": "x[mask]", "getitem": "x[mask]"}


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
