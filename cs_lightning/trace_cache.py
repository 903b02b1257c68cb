"""Remember on disk which training steps passed the trace check, like a compiler cache.

A CS-X compile is cached by the graph it compiles; the csx strategy's check that the step
traces as one graph is cached the same way. An entry is keyed by everything that can
change the verdict: the model's code and settings (:func:`fingerprint`), the shapes and dtypes
of the step's inputs, the torch, Python and cs_lightning versions and the options of the check;
an entry also keeps the digests of the modules the step imported as it ran, compared at each hit.
A warm entry skips the check whatever wrote the checkpoint being resumed; changed code misses.

Entries are small JSON files in the ``trace/`` folder of :func:`cs_lightning.cache.cache_dir`,
written atomically, so concurrent writers (DDP ranks, two runs) never leave a torn entry. An unreadable
or foreign entry is ignored with a warning and rewritten; a cache that cannot be written costs the check, never the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import os
import sys
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, TypeGuard

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from cs_lightning.cache import Entries, cache_dir, write_atomic
from cs_lightning.user_code import BOOKKEEPING, is_own_file, is_user_file, model_packages

__all__ = ["TraceCache", "Uncached", "fingerprint", "imported_code", "input_signature"]

_FORMAT = 2
_FOLDER = "trace"


class Uncached(Exception):
    """Why a step's check cannot be remembered (it then runs at every fit): the message says why and the fix."""


def input_signature(inputs: Any) -> list[Any]:
    """What the traced graph depends on in a step's inputs: tensor shapes, dtypes, devices.

    Other values count by type only (a batch index changes every step, never the graph); the
    tensors inside an object torch does not flatten (a dataclass batch) count by shape too.
    """
    leaves, spec = tree_flatten(inputs)
    described: list[Any] = [str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            described.append([list(leaf.shape), str(leaf.dtype), leaf.device.type, leaf.requires_grad])
        else:
            try:
                described.append(_Describer(values=False)(leaf))
            except _Indescribable as error:
                raise Uncached(
                    f"the batch holds more than {_BUDGET:,} values besides tensors; fix: keep them out of the batch"
                ) from error
            except Exception as error:  # a batch object failing when read: never the fit's failure
                raise Uncached(f"reading the batch's {type(leaf).__qualname__} failed ({error!r})") from error
    return described


def fingerprint(module: nn.Module) -> str:
    """Identify the code a model runs and how it is configured, as a hash.

    It covers the source files of the model's module classes and their bases and of the modules their
    code reaches by name (helpers a forward calls, the user's config module: see :func:`_reachable`),
    each submodule's settings (``self.clip = True``, ``hparams``, a config object, a function given as
    an argument) and hooks, the data its classes hold, and the module globals that that code names
    (``if DEBUG:``, ``ACT = relu`` rebound at run time): any of them can decide whether the step
    captures as one graph. A check that passed for one fingerprint need not run again for the same
    inputs (as a CS-X compile cache skips a graph it compiled before): see :class:`TraceCache`.

    Raises:
        Uncached: some class has no source file (defined in ``python -c`` or a notebook), or a setting is
            too large to describe or fails when read: such code is checked at every fit.
    """
    classes = _model_classes(module)
    files: set[str] = set()
    for cls in classes:
        found = _source_files(cls)
        if found is None:
            raise Uncached(
                f"class {cls.__qualname__} has no source file to hash (defined in `python -c`, a notebook"
                " cell or by exec); fix: define it in a .py file"
            )
        files |= found
    packages = model_packages(classes)
    seeds = {cls.__module__ for cls in classes}
    tree = {id(m) for m in module.modules()}
    while True:  # until what the settings hold adds no module: once for most models, twice at most for most others
        describe = _Describer(tree=tree)
        try:
            scope, names = _reachable(seeds, packages)
            settings = [_settings(module, describe), _global_hooks(describe)]
            data = [
                _class_data(classes, scope, describe),
                _globals_read(scope, names, describe),
                _made(scope, describe),
            ]
            described = repr([settings, data, _loaded_code(scope)])
        except _Indescribable as error:
            raise Uncached(
                f"its settings and the data its code reads hold more than {_BUDGET:,} values (a data set kept on"
                " the model?); fix: keep data on the DataModule"
            ) from error
        except (KeyboardInterrupt, SystemExit):
            raise
        # a setting or module failing when read (a lazy mapping, a proxy; pytest's mark generator raises a
        # BaseException): never the fit's failure
        except BaseException as error:
            raise Uncached(f"reading one of its settings failed ({error!r})") from error
        held = {found.__name__ for found in map(sys.modules.get, describe.met) if _is_code(found)} - scope.keys()
        if not held:  # by a module's own name: one kept in sys.modules under an alias too is found again
            break
        seeds |= held
    # and every module of the user's own code by its file: one the model does not reach by name may still
    # patch what it runs (`F.gelu = my_gelu` in a module imported at start), so changing it misses
    files |= {_file_of(loaded) for loaded in [*scope.values(), *code_modules(())]}
    digest = hashlib.sha256(torch.__version__.encode())
    for name in sorted(files):
        digest.update(f"{name}:{_digest(name)}".encode())  # a file gone since its import: "", never a crash
    digest.update(described.encode())
    return digest.hexdigest()


def _reachable(seeds: Iterable[str], packages: Collection[str]) -> tuple[dict[str, ModuleType], dict[str, set[str]]]:
    """The modules whose code a model may run, and the names each one's code uses.

    From ``seeds`` (the modules of the model's classes and of the objects and functions its settings
    hold), the modules that the names in their code are bound to, and the modules that define the
    functions, classes and objects those names are bound to (``from helpers import clip``), again from
    those: through the user's own code and the ``packages`` the model comes from, one step into any other
    installed package (its globals are read, not followed). Never torch's, Lightning's or the standard
    library's (keyed by their versions), nor code torch.compile generated; and only modules reachable from
    the model, not every module loaded (a test suite loads hundreds). A name in any of that code counts
    in every module (``helpers.flags.SYNC`` reads ``flags`` of ``helpers``)."""
    scope: dict[str, ModuleType] = {}
    names: dict[str, set[str]] = {}
    frontier = [sys.modules.get(name) for name in sorted(seeds)]
    while frontier:
        for module in frontier:
            if not _is_code(module) or module.__name__ in scope:  # sys.modules may hold anything
                continue
            scope[module.__name__] = module
            if is_own_file(_file_of(module)) or module.__name__.partition(".")[0] in packages:
                names[module.__name__] = _names_in(module)
        used = set().union(*names.values())
        bound = [
            value for name in names for global_name, value in list(vars(scope[name]).items()) if global_name in used
        ]
        frontier = [target for target in map(_module_of, bound) if target and target.__name__ not in scope]
        frontier = [target for target in frontier if _is_code(target)]
    return scope, names


def _is_code(module: ModuleType | None) -> TypeGuard[ModuleType]:
    """Whether ``module`` is code a fingerprint hashes: a source file of the user's or of an installed
    package (not torch's, Lightning's, the standard library's, nor a lazily imported module not loaded yet)."""
    if module is None or _is_lazy(module):
        return False
    file = _file_of(module)
    # string tests first: os.path.isfile is the one system call
    return (
        file.endswith(".py")
        and is_user_file(file)
        and _GENERATED not in file
        and module.__name__.partition(".")[0] not in BOOKKEEPING
        and os.path.isfile(file)
    )


def _module_of(value: Any) -> ModuleType | None:
    """The module a global's value is, or that defines it (a function's, a class's, an object's class's)."""
    if isinstance(value, ModuleType):
        return value
    owner = value if inspect.isfunction(value) or isinstance(value, type) else type(value)
    name = _module_name(owner)
    return sys.modules.get(name) if isinstance(name, str) else None


def _names_in(module: ModuleType) -> set[str]:
    """The names the functions and classes ``module`` defines use, as globals or attributes."""
    return {name for code in _codes(module) for name in _names(code)}


def _codes(module: ModuleType) -> Iterator[CodeType]:
    """The code of the functions and classes ``module`` defines, as loaded."""
    for value in _defined_in(module):
        yield from _method_code(value) if isinstance(value, type) else _function_code(value)


def _made(scope: Mapping[str, ModuleType], describe: _Describer) -> list[tuple[str, str]]:
    """What the functions written in the user's modules in ``scope`` and their classes were made with, which
    their code does not hold: defaults (``def act(x, strict=STRICT)``), a decorator's closure
    (``@gate(flags.STRICT)``, behind ``functools.wraps``) and attributes set on them (``act.strict = True``)."""
    made = []
    for name, module in sorted(scope.items()):
        if not is_own_file(_file_of(module)):
            continue
        for value in _defined_in(module):
            for function in _functions(value):
                parts = _made_with(function)
                if any(parts):
                    made.append((f"{name}.{function.__qualname__}", describe(parts)))
    return made


def _functions(value: Any) -> Iterator[Any]:
    """A function and those it wraps, or a class's methods (static, class, properties' accessors)."""
    for item in vars(value).values() if isinstance(value, type) else (value,):
        for function in _accessors(item):
            seen = set()
            while inspect.isfunction(function) and id(function) not in seen:  # `f.__wrapped__ = f` ends too
                seen.add(id(function))
                yield function
                function = getattr(function, "__wrapped__", None)


def _made_with(function: Any) -> tuple[Any, ...]:
    """What a function holds besides its code: defaults, keyword defaults, its closure's contents, the
    attributes set on it (not ``__wrapped__``, the function it wraps, followed on its own)."""
    attributes = {key: held for key, held in vars(function).items() if key != "__wrapped__"}
    return function.__defaults__, function.__kwdefaults__, _cells(function), attributes


def _cells(function: Any) -> list[Any]:
    """What a function's closure holds ("<empty>" for a cell not yet filled)."""
    held = []
    for cell in function.__closure__ or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:
            held.append("<empty>")
    return held


def _loaded_code(scope: Mapping[str, ModuleType]) -> list[tuple[str, str]]:
    """Per module, a digest of the code it runs as loaded: a file edited after its import holds other
    code than the process runs (a notebook's kernel not restarted), and its hash alone would vouch for it."""
    return [(name, _code_digest(*_codes(module))) for name, module in sorted(scope.items())]


def code_modules(packages: Collection[str]) -> list[ModuleType]:
    """The loaded modules of the user's own code and of ``packages`` (the model's, installed)."""
    found = []
    for loaded in list(sys.modules.values()):
        if not isinstance(loaded, ModuleType) or _is_lazy(loaded):
            continue
        file = _file_of(loaded)
        # string tests first: of the thousands of modules loaded only these go on to _is_code's stat
        if (is_own_file(file) or loaded.__name__.partition(".")[0] in packages) and _is_code(loaded):
            found.append(loaded)
    return found


# Where torch.compile's inductor writes the modules it generates (under the temporary folder)
_GENERATED = f"{os.sep}torchinductor_"


def imported_code(model: nn.Module, before: Collection[str]) -> dict[str, str]:
    """The files of the modules of the user's code (and of the model's packages) imported since
    ``before`` (the names in ``sys.modules`` then), with their digests: a step that imports a helper
    as it runs (``from helpers import post`` inside it) runs code that a fingerprint taken before
    the step did not see. `TraceCache.hit` checks them."""
    new = [loaded for loaded in code_modules(model_packages(_model_classes(model))) if loaded.__name__ not in before]
    return {_file_of(loaded): _digest(_file_of(loaded)) for loaded in new}


def _model_classes(model: nn.Module) -> set[type]:
    """The classes of a model's modules and their bases."""
    return {cls for m in model.modules() for cls in type(m).__mro__ if cls is not object}


def _digest(path: str) -> str:
    """The sha256 of a file's bytes; empty for a file that cannot be read (it then matches no digest)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def _global_hooks(describe: _Describer) -> list[str]:
    """The hooks registered for every module (``register_module_forward_hook``)."""
    hooks = torch.nn.modules.module
    registries = (hooks._global_forward_pre_hooks, hooks._global_forward_hooks, hooks._global_backward_hooks)
    return sorted(describe(hook) for registry in registries for hook in registry.values())


def _settings(module: nn.Module, describe: _Describer) -> list[tuple[str, str, str]]:
    """Per submodule: its path, class, attributes and hooks described (not the state that torch and
    Lightning keep on every module: its parameters, trainer): any of them may pick the code path its
    forward takes."""
    return [(path, _class_name(type(sub)), describe.module(sub)) for path, sub in module.named_modules()]


@functools.cache
def _framework_attributes() -> frozenset[str]:
    """The attributes nn.Module and LightningModule give every instance: their state, not settings."""
    names = set(vars(nn.Module()))
    with contextlib.suppress(ImportError):  # the strategies that use the cache run on Lightning
        from lightning.pytorch import LightningModule

        names |= set(vars(LightningModule()))
    return frozenset(names - {"training"})  # train or eval mode (a frozen backbone's) does pick a code path


def _class_data(
    classes: Iterable[type], scope: Mapping[str, ModuleType], describe: _Describer
) -> list[tuple[str, str]]:
    """The data that the model's classes and the classes of the user's own modules in ``scope`` hold
    (``Net.debug = True``, ``Config.HOST_READ = True`` set at run time): not in any file."""
    own = [value for loaded in scope.values() if is_own_file(_file_of(loaded)) for value in _defined_in(loaded)]
    held = set()
    every = {*classes, *(value for value in own if isinstance(value, type))}
    for cls in sorted(every, key=_class_name):  # in the same order in every run: descriptions refer back
        if cls.__module__.partition(".")[0] in BOOKKEEPING:
            continue
        data = {name: value for name, value in vars(cls).items() if _is_setting(name, value)}
        # on its own: two classes of one name (a factory's) come in no fixed order, and texts refer back
        held.add((_class_name(cls), describe.alone(_not_written_here(data, cls.__module__, f"{cls.__qualname__}."))))
    return sorted(held)


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_lazy(module: ModuleType) -> bool:
    """A module still lazy (importlib.util.LazyLoader's) has run no code, and reading it would load it."""
    return type(module).__getattribute__ is not ModuleType.__getattribute__


def _file_of(module: ModuleType) -> str:
    """A module's file, read without loading a lazily imported one (importlib.util.LazyLoader's loads on
    any attribute read, and fails when the optional package is missing); empty when it has none."""
    file = object.__getattribute__(module, "__dict__").get("__file__")
    return file if isinstance(file, str) else ""


def _defined_in(module: ModuleType) -> list[Any]:
    """The functions and classes a module defines (not those it imports)."""
    return [value for value in list(vars(module).values()) if _module_name(value) == module.__name__]


def _module_name(value: Any) -> Any:
    """``value.__module__``, or None for a module (whose ``__getattr__``, PEP 562's, may import a submodule of
    that name) and for an object failing when read (a proxy)."""
    try:
        return None if isinstance(value, ModuleType) else getattr(value, "__module__", None)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - a proxy raising anything: no module of the user's defines it
        return None


def _globals_read(
    scope: Mapping[str, ModuleType], names: Mapping[str, set[str]], describe: _Describer
) -> list[tuple[str, str, str]]:
    """The globals of the modules in ``scope`` that code in it names (``names``, per module whose code
    is read): a step may branch on them as on a setting (``if DEBUG:``, ``ACT = relu`` rebound from the
    command line, with the value read from the environment or ``sys.argv``), and the source file that
    holds the name does not hold its value. A global counts when its own module's code names it, or
    any of that code names it as an attribute (``flags.SYNC``, ``getattr(flags, "SYNC")``; not of the
    script being run, whose globals no module reads so)."""
    anywhere = set().union(*names.values())
    read = set()
    for module in scope.values():
        used = names.get(module.__name__, set()) | (anywhere if module.__name__ != "__main__" else set())
        for name, value in list(vars(module).items()):
            if name not in used:
                continue
            if isinstance(value, type) and value.__module__.partition(".")[0] not in BOOKKEEPING:
                # a class read for its attributes (`Settings.HOST_CHECK`), wherever it is defined
                data = {key: held for key, held in vars(value).items() if _is_setting(key, held)}
                data = _not_written_here(data, value.__module__, f"{value.__qualname__}.")
                read.add((module.__name__, name, f"{_class_name(value)}{describe(data)}"))
            elif _is_setting(name, value) and _not_written_here({name: value}, module.__name__, ""):
                read.add((module.__name__, name, describe(value)))
    return sorted(read)


def _function_code(value: Any) -> list[CodeType]:
    """The code of a function, of what it wraps (``__wrapped__``, a wrapper's closure) and of the
    functions in its closure: a decorator without ``functools.wraps`` hides the function it runs."""
    found: list[CodeType] = []
    todo, seen = [value], set()
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        # only what wraps a function is unwrapped: a closure may hold any object, whose attributes may do anything
        if isinstance(item, (staticmethod, classmethod)) or inspect.ismethod(item):
            item = item.__func__
        elif isinstance(item, (functools.cached_property, functools.partial)):
            item = item.func
        if inspect.isroutine(item):  # a functools.wraps wrapper, functools.lru_cache's
            todo.append(getattr(item, "__wrapped__", None))
        if inspect.isfunction(item):
            found.append(item.__code__)
            todo.extend(_cells(item))
        elif not isinstance(item, type) and callable(item):  # a class-based decorator keeping the function
            todo.extend(value for value in _attributes_or_none(item) if inspect.isfunction(value))
    return found


def _attributes_or_none(value: Any) -> list[Any]:
    """The values of an object's attributes (`_attributes`); none for one failing when read."""
    try:
        return list(_attributes(value).values())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - no __dict__, or a proxy raising anything
        return []


def _names(code: CodeType) -> Iterator[str]:
    """The names a function's code uses, as globals or attributes (``getattr(x, "name")`` too), with
    those of its nested functions."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _names(constant)
        elif isinstance(constant, str) and constant.isidentifier():
            yield constant


def _not_written_here(values: Mapping[str, Any], module: str, prefix: str) -> dict[str, Any]:
    """``values`` but the functions and classes defined under their own name where they are bound, in
    ``module`` (``prefix`` the class's qualified name and a dot, or empty for a module's globals): their
    source is hashed with the file; one bound from elsewhere (``ACT = relu``) is described."""
    return {
        name: value
        for name, value in values.items()
        if not (
            (inspect.isfunction(value) or isinstance(value, type))
            and getattr(value, "__module__", None) == module
            and getattr(value, "__qualname__", None) == prefix + name
        )
    }


def _is_setting(name: str, value: Any) -> bool:
    """Whether a global or class attribute may configure the step: data, an object (a gate module kept at
    module level), or a function or class bound to it (``ACT = relu`` rebound at run time); not a module
    (read for its own globals), a property or Python's own names."""
    return not (
        name.startswith("__")
        or isinstance(value, (ModuleType, property))
        or (inspect.isdatadescriptor(value) and not isinstance(value, type))
    )


_SCALARS = (bool, int, float, complex, str, bytes, type(None), enum.Enum, torch.dtype, torch.device)
_CONTAINERS = (list, tuple, dict, set, frozenset)
# How many values one description may hold before the code is simply checked each run (a dataset
# held on the model, say); a container of more plain values than _LONG is hashed whole.
_BUDGET = 200_000
_LONG = 256
_ARRAY_BYTES = 1 << 20  # an array larger than this is data, described by its shape


class _Indescribable(Exception):
    """A setting too large to describe: the code it configures is then checked every run."""


class _Describer:
    """Stable texts for settings: plain data, tensors' shapes, functions by their code, the
    attributes of other objects at any depth (not of torch's and Lightning's, which the key's
    versions cover), and modules outside ``tree`` (the model's own, each described on its own) in
    full. With ``values=False`` plain values count by type only (a batch's fields). Raises
    _Indescribable past ``_BUDGET`` values."""

    def __init__(self, values: bool = True, tree: Collection[int] = ()) -> None:
        self.values = values
        self.tree = tree
        self.left = _BUDGET
        self.open: set[int] = set()  # the objects being described: one met again is a cycle
        # each object described once (a config every block holds), then named by the order it came in (the
        # same in every run); the object is kept so that its id stays its own
        self.done: dict[int, tuple[Any, str]] = {}
        self.met: set[str] = set()  # the modules of the classes and functions described: their code may run

    def __call__(self, value: Any) -> str:
        self.left -= 1
        if self.left < 0:
            raise _Indescribable
        if isinstance(value, _SCALARS):
            return repr(value) if self.values else type(value).__qualname__
        if isinstance(value, torch.Tensor):
            return f"tensor{tuple(value.shape)}{value.dtype}"
        if isinstance(value, nn.Module) and id(value) in self.tree:
            return "module"  # described on its own, as a submodule
        if not isinstance(value, _CONTAINERS):  # the many containers of plain data skip these tests
            named = self._named(value)
            if named is not None:
                return named
        key = id(value)
        if key in self.done:
            return self.done[key][1]
        if key in self.open:
            return "<cycle>"
        self.open.add(key)
        try:
            text = self._compound(value)
        finally:
            self.open.discard(key)
        self.done[key] = (value, f"<as #{len(self.done)}>")
        return text

    def _named(self, value: Any) -> str | None:
        """A class, TorchScript or C function by its name (and code), or None for any other value."""
        if isinstance(value, torch.jit.ScriptFunction):  # TorchScript: its code is its source
            return f"script {value.qualified_name}#{hashlib.sha256(str(value.code).encode()).hexdigest()[:16]}"
        if not (isinstance(value, type) or _is_builtin_routine(value)):
            return None
        if isinstance(value, type):
            self.met.add(value.__module__)
        if inspect.isfunction(getattr(value, "__wrapped__", None)):  # functools.lru_cache's wrapper
            return f"{_class_name(type(value))}({self(value.__wrapped__)})"
        bound = getattr(value, "__self__", None)
        if bound is not None and not isinstance(bound, (ModuleType, type)):  # `options.get`: its dict configures it
            return f"{type(bound).__qualname__}.{value.__name__} of {self(bound)}"
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"

    def module(self, module: nn.Module) -> str:
        """A module's attributes but the state torch and Lightning keep on every module, its hooks, and
        the children of one outside the model's tree."""
        framework = _framework_attributes()
        values = {name: value for name, value in vars(module).items() if name not in framework}
        hooks = ", ".join(sorted(self(hook) for name in _HOOKS for hook in getattr(module, name, {}).values()))
        children = {} if id(module) in self.tree else dict(module.named_children())
        return f"{_class_name(type(module))}{self(values)}[{hooks}]{self(children) if children else ''}"

    def alone(self, value: Any) -> str:
        """``value`` described without reference to what was described before, nor for what comes after."""
        describe = _Describer(self.values, self.tree)
        describe.left, describe.met = self.left, self.met
        text = describe(value)
        self.left = describe.left
        return text

    def _function(self, function: Any) -> str:
        """A function by name and code (one written in a notebook cell has no file to hash), its
        defaults, what its closure holds and the attributes set on it."""
        code = _code_digest(function.__code__)
        self.met.add(function.__module__)
        return f"{function.__module__}.{function.__qualname__}#{code}{self(_made_with(function))}"

    def _compound(self, value: Any) -> str:
        if isinstance(value, functools.partial):
            return f"partial({self(value.func)}, {self(value.args)}, {self(value.keywords)})"
        if inspect.ismethod(value):  # a bound method given as a setting: its object configures it
            return f"method {self(value.__func__)} of {self(value.__self__)}"
        if inspect.isfunction(value):
            return self._function(value)
        if isinstance(value, nn.Module):  # outside the model's tree (a teacher kept in a list)
            return self.module(value)
        name = _class_name(type(value))
        if isinstance(value, (Mapping, list, tuple, set, frozenset)) and len(value) > _LONG and self.values:
            plain = _plain_text(value)
            if plain is not None:  # a vocabulary, a table: one hash, not a description per entry
                return f"{name}#{hashlib.sha256(plain.encode()).hexdigest()[:16]}"
        # joined, not repr()-ed: repr would escape the quotes of what is inside once more at each level
        if isinstance(value, Mapping):  # in the order of the keys' texts: back references then number alike
            items = sorted(((self.alone(key), item) for key, item in value.items()), key=lambda pair: pair[0])
            return f"{name}{{{', '.join(f'{key}: {self(item)}' for key, item in items)}}}"
        if isinstance(value, (set, frozenset)):  # in no order: each member described on its own, then sorted
            return f"{name}{{{', '.join(sorted(self.alone(item) for item in value))}}}"
        if isinstance(value, (list, tuple)):
            return f"{name}[{', '.join(self(item) for item in value)}]"
        if not _holds_settings(type(value)):
            return name  # a Trainer, an optimizer, a logger: state of torch, Lightning, the standard library
        if hasattr(type(value), "tobytes") and hasattr(type(value), "shape"):  # a numpy array: small ones by value
            if getattr(value.dtype, "hasobject", False):  # its bytes are addresses: its items, described
                return f"{name}{tuple(value.shape)}{self(value.tolist())}"
            data = value.tobytes() if self.values and value.nbytes <= _ARRAY_BYTES else b""
            return f"{name}{tuple(value.shape)}{value.dtype}#{hashlib.sha256(data).hexdigest()[:16]}"
        self.met.add(type(value).__module__)
        attributes = _attributes(value)
        return f"{name}{self(attributes) if attributes else ''}"


def _code_digest(*codes: CodeType) -> str:
    """A digest of what functions' code does: its bytecode as compiled (``co_code``, not the specialized
    form a run leaves, which marshal writes), the names and constants it uses, and its nested functions'."""
    digest = hashlib.sha256()
    for code in codes:
        digest.update(code.co_code)
        digest.update(repr(code.co_names).encode())
        for constant in code.co_consts:
            if isinstance(constant, CodeType):
                text = _code_digest(constant)
            elif isinstance(constant, frozenset):  # `x in {"a", "b"}`: in no order, so sorted
                text = repr(sorted(constant, key=repr))
            else:
                text = repr(constant)
            digest.update(text.encode())
    return digest.hexdigest()[:16]


def _is_builtin_routine(value: Any) -> bool:
    """A function or method of C code (torch.relu, len): named, there is no code to describe."""
    return inspect.isroutine(value) and not (inspect.isfunction(value) or inspect.ismethod(value))


# The hooks a module runs around its forward and backward, which the user registers (their handles' ids,
# the dicts' keys, differ from run to run)
_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def _holds_settings(cls: type) -> bool:
    """Whether objects of ``cls`` are described by their attributes: the user's classes and installed
    libraries' (a model library's config), and the standard library's namespaces (argparse's); not
    torch's, Lightning's or the standard library's other objects (a logger's state is the process's)."""
    if cls.__module__.partition(".")[0] in BOOKKEEPING:
        return False
    if cls.__module__ in ("argparse", "types", "builtins"):
        return True
    module = sys.modules.get(cls.__module__)
    return isinstance(module, ModuleType) and not _is_lazy(module) and is_user_file(_file_of(module))


def _plain_text(values: Mapping[Any, Any] | Collection[Any]) -> str | None:
    """The repr of a container of scalars, or of tuples of them, alone (a mapping's keys and values), else None.
    A mapping and a set sorted: one filled from a set is in an order that varies by process."""
    items = [*values.keys(), *values.values()] if isinstance(values, Mapping) else values
    if not all(isinstance(item, _SCALARS) or _scalars(item) for item in items):
        return None
    if isinstance(values, Mapping):
        return repr(sorted(values.items(), key=repr))
    return repr(sorted(values, key=repr) if isinstance(values, (set, frozenset)) else values)


def _scalars(item: Any) -> bool:
    return isinstance(item, tuple) and all(isinstance(part, _SCALARS) for part in item)


def _attributes(value: Any) -> dict[str, Any]:
    """An object's attributes, in its ``__dict__`` and its slots (a ``@dataclass(slots=True)``)."""
    found = dict(getattr(value, "__dict__", None) or {})
    for cls in type(value).__mro__:
        slots = vars(cls).get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                found[slot] = getattr(value, slot)
    return found


def _source_files(cls: type) -> set[str] | None:
    """The files a class's code comes from: its module's, and those its methods were compiled
    from, which differ for a class that ``exec`` built inside a script's namespace (its module
    is the script, its methods come from ``<string>``). None when one is not a file."""
    try:
        module_file = inspect.getsourcefile(cls)
    except (OSError, TypeError):  # built at run time, or a builtin
        return None
    if module_file is None:
        return None
    files = {module_file, *(code.co_filename for code in _method_code(cls))}
    return files if all(os.path.isfile(name) for name in files) else None


def _method_code(cls: type) -> Iterator[CodeType]:
    """The code of the functions a class defines (methods, static and class methods, properties, those
    of the classes in its body), through decorators that keep ``__wrapped__``; not those ``@dataclass`` generates (from
    ``<string>``: the class's fields, in its own file, decide them)."""
    generated = _DATACLASS_METHODS if dataclasses.is_dataclass(cls) else frozenset()
    for name, value in vars(cls).items():
        if name in generated:
            continue
        if isinstance(value, type) and value.__qualname__.startswith(f"{cls.__qualname__}."):
            yield from _method_code(value)  # a class defined in this one's body
            continue
        for function in _accessors(value):
            if inspect.isfunction(function):
                yield from _function_code(function)  # through __wrapped__ and closures, a cycle too


def _accessors(member: Any) -> tuple[Any, ...]:
    """What runs for a class body's member: a static or class method's function, a cached_property's, a
    property's getter, setter and deleter, or the member itself."""
    if isinstance(member, (staticmethod, classmethod)):
        return (member.__func__,)
    if isinstance(member, functools.cached_property):
        return (member.func,)
    if isinstance(member, property):
        return member.fget, member.fset, member.fdel
    return (member,)


_DATACLASS_METHODS = frozenset(
    [
        "__init__",
        "__repr__",
        "__eq__",
        "__hash__",
        "__setattr__",
        "__delattr__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__getstate__",
        "__setstate__",
        "__replace__",
    ]
)


class TraceCache:
    """Trace-check verdicts on disk, one file per key.

    Args:
        root: the cache folder (its ``trace/`` subfolder holds the entries); default :func:`cache_dir`.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir()
        self.folder = self.root / _FOLDER
        self._entries = Entries(self.folder, "*.json")

    @staticmethod
    def key(code: str, inputs: Any, options: Mapping[str, Any]) -> str:
        """The entry key of model code ``code`` run on ``inputs`` under the check's ``options``; raises
        `Uncached` for inputs that cannot be described (the step is then checked each run)."""
        from cs_lightning import __version__

        described = {
            "format": _FORMAT,
            "code": code,
            "inputs": input_signature(inputs),
            "options": {name: repr(value) for name, value in sorted(options.items())},
            "torch": torch.__version__,
            "python": list(sys.version_info[:2]),
            "cs_lightning": __version__,
        }
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def hit(self, key: str) -> bool:
        """Whether code with this key passed the check before; a damaged entry warns and misses."""
        path = self._path(key)
        try:
            entry = json.loads(path.read_bytes())
        except (FileNotFoundError, NotADirectoryError):  # no entry (or no cache folder) yet
            return False
        except (OSError, ValueError) as error:  # unreadable, truncated, not JSON
            self._warn_unusable(path, f"it cannot be read ({type(error).__name__})")
            return False
        imported = entry.get("imported", {}) if isinstance(entry, dict) else None
        if not isinstance(imported, dict) or entry.get("format") != _FORMAT or entry.get("key") != key:
            self._warn_unusable(path, "it is not an entry for this key")
            return False
        # code the step imported as it ran, which the key could not see: changed, it misses
        return all(_digest(file) == digest for file, digest in imported.items())

    def store(self, key: str, about: Mapping[str, Any]) -> None:
        """Record that ``key`` passed, atomically; a cache that cannot be written only warns. ``about``
        may hold ``imported``: the files the step imported as it ran (:func:`imported_code`)."""
        try:
            write_atomic(self._path(key), json.dumps({"format": _FORMAT, "key": key, **about}).encode())
        except OSError as error:
            warnings.warn(
                f"cs_lightning trace cache: cannot write to {self.folder} ({error}); the trace"
                " check runs again next time. Fix: set CS_LIGHTNING_CACHE_DIR to a writable folder, or run"
                " `cs-lightning cache clear` if something is in the entry's place.",
                stacklevel=2,
            )

    def entries(self) -> list[Path]:
        """The entry files (not the temporary files of writes in progress)."""
        return self._entries.files()

    def info(self) -> str:
        """One line: where the cache is, how many entries and bytes it holds."""
        count = len(self.entries())
        return f"trace cache {self.folder}: {count} entr{'y' if count == 1 else 'ies'}, {self._entries.size()} bytes"

    def clear(self) -> int:
        """Delete every entry, and temporary files an interrupted write left over an hour ago;
        return how many entries went."""
        return self._entries.clear()

    def _warn_unusable(self, path: Path, why: str) -> None:
        warnings.warn(
            f"cs_lightning trace cache: ignoring {path}: {why}; the trace check runs again and rewrites it.",
            stacklevel=3,
        )
