"""The name a user's own code gives a DataLoader, and the library (if any) that builds or iterates it.

A loader is named at its first ``iter()`` by walking the frames outward from
there, past library code (torch, Lightning, transformers, accelerate, tqdm,
pipeprof...: matched by top-level package), to the first user frame that
*holds* it under a name of its own: ``self.train_loader``, a local or global
``data_loader``, ``trainer.val_loader`` (an attribute of a local of the
user's own class), ``loaders['train']`` (an item of a local dict or list).
What a frame was handed is not a name: a function's parameter
(``def train_one_epoch(model, data_loader)``), any name in a generator
(``MetricLogger.log_every(self, iterable)``), and ``self`` in the loader's
own methods (a DataLoader subclass iterating itself) send the walk on to the
caller. A holder may also hold the loader at one remove: a wrapper whose
``base_dataloader`` is it (accelerate's ``DataLoaderShard``), or, for a
loader a library built, a user DataLoader over the same dataset (the
user's loader that ``accelerator.prepare`` re-built).

Where a user frame holds it only under a generic name (a loop variable:
``for loader, opt, fwd in phases:``), or no frame holds it, a loader is
named after what its building code stored it in, read from that code's
bytecode after the call (``stored_in``): the assignment target
(``scratch_loader = DataLoader(...)``), attribute, constant-key item, or
keyword (``trainer.fit(model, train_dataloaders=DataLoader(...))``); one
built in a function that returns it, after where the caller stores it.
Held by no name and stored in none, a loader is named after the user
function that built and returned it (Lightning's ``train_dataloader()`` / ``val_dataloader()``:
seen when ``DataLoader.__init__`` ran, ``note_built``; a loader a library
re-builds from such a loader keeps its function), then after the
library's builder (the Hugging Face Trainer's ``get_train_dataloader`` ->
``Trainer train loader``), then after a parameter that held it on the way
(unless generic: ``loader``, ``iterable``...), and last after its dataset's
class (``FakeData``). Loader numbers tell equal names apart elsewhere.

Holders are compared by identity and read through their own ``__dict__``:
no user ``__getattr__`` or property runs.
"""

from __future__ import annotations

import dis
import sys
from dataclasses import dataclass
from inspect import CO_ASYNC_GENERATOR, CO_GENERATOR, CO_VARARGS, CO_VARKEYWORDS
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from pipeprof import adapters

if TYPE_CHECKING:
    from types import CodeType, FrameType

# Library code a loader passes through: never where a user names it. Top-level packages: torch, pipeprof, the
# standard library's that iterate for a user, and every data library's (pipeprof.adapters).
LIBRARIES = frozenset({"torch", "tqdm", "pipeprof", "contextlib", "runpy", "threading", "functools",
                       "itertools"}) | adapters.library_packages()
# Which framework builds or iterates a loader, by the packages seen: the first found wins (the adapters' order).
FRAMEWORKS = adapters.framework_packages()
# Parameter names that say nothing about which loader was passed in.
GENERIC = frozenset({
    "self", "cls", "iterable", "iterator", "it", "obj", "x", "items", "seq", "data", "loader", "loaders",
    "dataloader", "dataloaders", "data_loader", "dl", "batches", "source", "args", "kwargs",
})
_GENERATOR_FLAGS = CO_GENERATOR | CO_ASYNC_GENERATOR
_MAX_ITEMS = 64  # a local dict / list looked into for the loader: no bigger (a dataset is not searched)

# How a holder refers to the loader, best first.
_IS, _WRAPS, _SAME_DATA = 0, 1, 2


@dataclass(frozen=True)
class BuildSite:
    """Where ``DataLoader.__init__`` ran for one loader: seen once, kept on the loader (``note_built``)."""

    function: str | None  # the innermost user function building it (not the loader's own __init__), if any
    code: tuple[str, int, str] | None  # ... its code (file, first line, name; picklable): whether it still runs at
    # the first iter() (then it did not return the loader)
    libraries: frozenset[str]  # the library packages between DataLoader.__init__ and that user frame
    builder: str | None  # a library builder's name for it: "Trainer train loader"
    target: str | None = None  # what the building code stores it in: "train_loader", "self.val_loader", a keyword
    returned: bool = False  # ``function`` returned it (Lightning's ``train_dataloader()``)

    @property
    def built_in(self) -> str | None:
        """The user function that built and returned the loader, if one did."""
        return self.function if self.returned else None

    @property
    def by_library(self) -> bool:
        return bool(self.libraries - {"torch", "pipeprof"})


_SITE_ATTR = "_pipeprof_built"  # on the loader's own __dict__: dies with it, no hash or __setattr__ involved


def note_built(loader: Any, start: FrameType | None = None) -> None:
    """At ``DataLoader.__init__``: remember where the loader is built (``start``: the frame to look out from)."""
    frame: FrameType | None = start if start is not None else sys._getframe(1)
    libraries: set[str] = set()
    builder = None
    function = code = None
    source = None  # a library re-building a loader: the one it re-builds, when that one was noted
    while frame is not None:
        package = _package(frame)
        if package in LIBRARIES:
            libraries.add(package)
            builder = builder or _builder_name(package, frame.f_code.co_name)
            if source is None and package not in ("torch", "pipeprof"):
                source = _rebuilt_from(frame, loader)
        elif frame.f_locals.get("self") is not loader:  # a subclass's own __init__ is not where it is built
            name = frame.f_code.co_name
            if not (name.startswith("<") or name.startswith("__")):
                function, code = name, _where(frame.f_code)
            break
        frame = frame.f_back
    target, returned = None, False
    if frame is not None and not libraries - {"torch", "pipeprof"}:
        try:
            target, returned = stored_in(frame)
        except (ValueError, TypeError, IndexError, AttributeError, KeyError):  # bytecode dis could not read:
            pass  # no name from it (the others still apply); the script's DataLoader is built all the same
    if source is not None and source.function is not None:  # Lightning's _update_dataloader: the user's hook
        function, code, target, returned = source.function, source.code, source.target, source.returned
    loader.__dict__[_SITE_ATTR] = BuildSite(function, code, frozenset(libraries), builder, target,
                                            returned and function is not None)


def stored_in(frame: FrameType, hops: int = 4) -> tuple[str | None, bool]:
    """The name the value a user frame's running call returns is stored in, read from the frame's bytecode after
    the call: a variable (``train_loader = DataLoader(...)``), an attribute (``self.val_loader = ...``), an item
    with a constant key (``loaders["train"] = ...``), or a keyword (``trainer.fit(model,
    train_dataloaders=DataLoader(...))``). Returned by a user function (``return DataLoader(...)``): where its
    caller stores it, up to ``hops`` user frames out. None when the code does something else with it. And
    whether the frame's own function returned it."""
    first_returned = False
    for hop in range(hops):
        instructions = _instructions(frame.f_code)
        i = next((k for k, ins in enumerate(instructions) if ins.offset > frame.f_lasti), len(instructions))
        name, returned = _store_after(frame.f_code, instructions, i)
        first_returned = first_returned or (returned and hop == 0)
        if not returned:
            return name, first_returned
        back = frame.f_back
        if back is None or _package(back) in LIBRARIES:
            break
        frame = back
    return None, first_returned


_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_FAST_CHECK"})
_PUSHES = _LOADS | {"LOAD_CONST", "LOAD_CLOSURE", "PUSH_NULL", "LOAD_FAST_LOAD_FAST", "LOAD_SMALL_INT"}
_NEUTRAL = frozenset({"NOP", "CACHE", "EXTENDED_ARG", "KW_NAMES", "RESUME"})
_ON_TOP = frozenset({"LOAD_ATTR", "LOAD_METHOD"})  # take the top value only
_CALLS = frozenset({"PRECALL", "CALL", "CALL_KW"})
_ENDS = frozenset({"RETURN_VALUE", "RETURN_CONST"})


def _store_after(code: CodeType, instructions: list[dis.Instruction], i: int) -> tuple[str | None, bool]:
    """From instruction ``i`` on, with the call's value on top of the stack: (where it is stored, whether it
    is returned instead). Straight-line code of the few kinds a store or an argument list is made of: anything
    else ends the search (no name)."""
    depth = 0  # values pushed above the call's value
    keywords: tuple[str, ...] = ()
    for k in range(i, min(len(instructions), i + 64)):
        ins = instructions[k]
        op = ins.opname
        if op in _NEUTRAL:
            if op == "KW_NAMES":  # 3.11, 3.12: the next call's keywords (its argval is not resolved by dis)
                keywords = _const_names(code, ins)
            continue
        if op in _PUSHES:
            depth += 2 if op == "LOAD_FAST_LOAD_FAST" else 1
            if op == "LOAD_GLOBAL" and int(ins.arg or 0) & 1:  # with the NULL before a call
                depth += 1
            continue
        if depth == 0 and op in _ENDS:
            return None, True
        if depth == 0 and op in _STORES:
            return str(ins.argval), False
        if op == "STORE_ATTR" and depth == 1:
            owner = instructions[k - 1]
            return (f"{owner.argval}.{ins.argval}" if owner.opname in _LOADS else None), False
        if op == "STORE_SUBSCR" and depth == 2:
            holder, key = instructions[k - 2], instructions[k - 1]
            if holder.opname in _LOADS and key.opname == "LOAD_CONST" and isinstance(key.argval, (str, int)):
                return f"{holder.argval}[{key.argval!r}]", False
            return None, False
        if op in _ON_TOP and depth > 0:
            depth += dis.stack_effect(ins.opcode, ins.arg)
            continue
        if op in _CALLS:
            argc = int(ins.arg or 0)
            if op == "CALL_KW":  # 3.13: the keywords' names are the top of the stack
                names = instructions[k - 1].argval
                keywords, depth = (tuple(names) if isinstance(names, tuple) else ()), depth - 1
            after_precall = op == "CALL" and any(x.opname == "PRECALL" for x in instructions[max(0, k - 2):k])
            taken = 2 if after_precall else argc if op == "PRECALL" else argc + 2  # 3.11: PRECALL the arguments
            if depth < argc and not after_precall:  # an argument of this call: by keyword, or positional
                return (keywords[len(keywords) - 1 - depth] if depth < len(keywords) else None), False
            if depth < taken:  # the callable itself
                return None, False
            depth += dis.stack_effect(ins.opcode, ins.arg)
            if not after_precall and op != "PRECALL":
                keywords = ()
            continue
        return None, False
    return None, False


def _const_names(code: CodeType, ins: dis.Instruction) -> tuple[str, ...]:
    names = code.co_consts[ins.arg] if isinstance(ins.arg, int) and ins.arg < len(code.co_consts) else None
    return tuple(names) if isinstance(names, tuple) and all(isinstance(n, str) for n in names) else ()


_CODE_CACHE: dict[Any, list[dis.Instruction]] = {}


def _instructions(code: CodeType) -> list[dis.Instruction]:
    found = _CODE_CACHE.get(code)
    if found is None:
        if len(_CODE_CACHE) > 256:
            _CODE_CACHE.clear()
        found = _CODE_CACHE[code] = list(dis.get_instructions(code))
    return found


def _rebuilt_from(frame: FrameType, loader: Any) -> BuildSite | None:
    """The build site of another DataLoader over ``loader``'s dataset that a library frame holds."""
    dataset = _own_attrs(loader).get("dataset")
    for value in frame.f_locals.values():
        if value is not loader and isinstance(value, DataLoader) and _own_attrs(value).get("dataset") is dataset:
            site = _own_attrs(value).get(_SITE_ATTR)
            if site is not None:
                return site
    return None


def build_site(loader: Any) -> BuildSite | None:
    return _own_attrs(loader).get(_SITE_ATTR)


def loader_name(loader: Any, start: FrameType | None = None) -> str:
    """The name the user's code gives ``loader`` (see the module's docstring), looking out from ``start``."""
    frame: FrameType | None = start if start is not None else sys._getframe(1)
    site = build_site(loader)
    parameter = None
    running: set[tuple[str, int, str]] = set()  # code still running: a builder among it did not return the loader
    while frame is not None:
        running.add(_where(frame.f_code))
        if _package(frame) not in LIBRARIES and not frame.f_code.co_flags & _GENERATOR_FLAGS:
            held, passed = _holder(frame, loader, same_data=site is not None and site.by_library)
            if held is not None:
                # a loop variable (``for loader, opt in phases:``) says less than where the loader was stored
                return site.target if _generic(held) and site is not None and site.target else held
            parameter = parameter or passed
        frame = frame.f_back
    if site is not None and site.target is not None and site.code not in running:
        return site.target
    if site is not None and site.function is not None and site.code not in running:
        return site.function
    if site is not None and site.builder is not None:
        return site.builder
    return parameter or type(_own_attrs(loader).get("dataset")).__name__


def framework(loader: Any, start: FrameType | None = None) -> str | None:
    """``lightning``, ``transformers`` or ``accelerate``: the library that builds or iterates ``loader``
    (its frames between the loader and the first user frame, at ``DataLoader.__init__`` or here), or None."""
    seen: set[str] = set()
    site = build_site(loader)
    if site is not None:
        seen |= site.libraries
    frame: FrameType | None = start if start is not None else sys._getframe(1)
    while frame is not None:
        package = _package(frame)
        if package not in LIBRARIES and not frame.f_code.co_flags & _GENERATOR_FLAGS:
            break
        seen.add(package)
        frame = frame.f_back
    return next((name for package, name in FRAMEWORKS if package in seen), None)


def _where(code: CodeType) -> tuple[str, int, str]:
    return code.co_filename, code.co_firstlineno, code.co_name


def _package(frame: FrameType) -> str:
    return (frame.f_globals.get("__name__") or "").split(".")[0]


def _builder_name(package: str, function: str) -> str | None:
    """A library builder's name for the loader its ``function`` builds (``pipeprof.adapters``)."""
    return adapters.builder_name(package, function)


def _holder(frame: FrameType, loader: Any, same_data: bool) -> tuple[str | None, str | None]:
    """The best name ``frame`` holds ``loader`` under, and else a telling parameter it came in by."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & CO_VARARGS) \
        + bool(code.co_flags & CO_VARKEYWORDS)
    parameters = set(code.co_varnames[:count])
    local = frame.f_locals
    found: list[tuple[int, int, str]] = []  # (how it refers, which kind of holder, name)
    parameter = None
    me = local.get("self")
    if me is not None and me is not loader:
        for attr, held in _own_attrs(me).items():
            _add(found, _refers(held, loader, same_data), 0, f"self.{attr}")
    for name, value in local.items():
        how = _refers(value, loader, same_data)
        if name == "self" or name.startswith("_") or not name.isidentifier() or how is None:
            continue  # not an identifier: a name a tool made (pytest's rewritten asserts), not the user
        if name in parameters:
            if how == _IS and parameter is None and name not in GENERIC:
                parameter = name
        else:
            _add(found, how, 1, name)
    if local is not frame.f_globals:
        for name, value in frame.f_globals.items():
            if not name.startswith("_"):
                _add(found, _refers(value, loader, same_data), 2, name)
    for name, value in local.items():
        if name == "self" or value is loader:
            continue
        if _is_users(value) and not _user_wrapper(value, loader):  # a wrapper is named as the loop holds it
            for attr, held in _own_attrs(value).items():
                if not attr.startswith("_"):
                    _add(found, _refers(held, loader, same_data), 3, f"{name}.{attr}")
        for key, item in _items(value):
            _add(found, _refers(item, loader, same_data), 4, f"{name}[{key!r}]")
    return (min(found, key=lambda f: (f[0], f[1], _generic(f[2]), f[2]))[2] if found else None), parameter


def _generic(name: str) -> bool:
    """A name that says nothing of which loader it holds (``loader``, ``self.dl``)."""
    return name.rpartition(".")[2] in GENERIC


def _add(found: list[tuple[int, int, str]], how: int | None, kind: int, name: str) -> None:
    if how is not None:
        found.append((how, kind, name))


def _refers(value: Any, loader: Any, same_data: bool) -> int | None:
    """How ``value`` refers to ``loader``: is it, wraps it (``base_dataloader``), or (``same_data``: the loader
    was built by a library) is a user DataLoader over the same dataset; None when it does not."""
    if value is loader:
        return _IS
    attrs = _own_attrs(value)
    if not attrs:
        return None
    if attrs.get("base_dataloader") is loader or (not _is_users(value) and wrapped(attrs) is loader):
        return _WRAPS  # accelerate's DataLoaderShard; timm's PrefetchLoader, WebDataset's WebLoader
    if _user_wrapper(value, loader):
        return _WRAPS  # the user's own wrapper the loop iterates (a prefetcher): named as the loop holds it
    if same_data and isinstance(value, DataLoader) and attrs.get("dataset") is _own_attrs(loader).get("dataset"):
        site = attrs.get(_SITE_ATTR)
        if site is None or not site.by_library:  # the user's loader, not another one the library built
            return _SAME_DATA
    return None


def _user_wrapper(value: Any, loader: Any) -> bool:
    """An object of the user's own that holds ``loader`` and that a loop can iterate (its class has
    ``__iter__``): a wrapper of the loader (a prefetcher), not a trainer that holds one."""
    return _is_users(value) and callable(getattr(type(value), "__iter__", None)) and \
        any(held is loader for held in _own_attrs(value).values())


def wrapped(attrs: dict[str, Any]) -> Any:
    """What a library's loader wrapper (its ``__dict__``: ``attrs``) wraps: its ``base_dataloader`` (accelerate),
    ``loader`` (timm's ``PrefetchLoader``) or the first stage of its ``pipeline`` (WebDataset's ``WebLoader``)."""
    for attr in ("base_dataloader", "loader"):
        if attr in attrs:
            return attrs[attr]
    pipeline = attrs.get("pipeline")
    return pipeline[0] if isinstance(pipeline, list) and pipeline else None


def inner_dataloader(obj: Any) -> DataLoader | None:
    """The DataLoader ``obj`` is, or that a library's wrapper around it holds (two wrappers deep at most)."""
    for _ in range(3):
        if isinstance(obj, DataLoader):
            return obj
        obj = wrapped(_own_attrs(obj))
    return None


def _own_attrs(obj: Any) -> dict[str, Any]:
    """``obj.__dict__`` read without running its class's ``__getattr__``, or {} when it has none."""
    if type(obj) in _NO_DICT:
        return {}
    try:
        attrs = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return {}
    return attrs if isinstance(attrs, dict) else {}


_NO_DICT = frozenset({int, float, str, bytes, bool, type(None), list, tuple, dict, set})


def _is_users(value: Any) -> bool:
    """An instance of a class of the user's own (a library's objects are not where a user names a loader)."""
    module = getattr(type(value), "__module__", "") or ""
    return module.split(".")[0] not in LIBRARIES and module != "builtins" and not isinstance(value, type)


def _items(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, dict) and len(value) <= _MAX_ITEMS:
        return [(k, v) for k, v in value.items() if isinstance(k, (str, int))]
    if isinstance(value, (list, tuple)) and len(value) <= _MAX_ITEMS:
        return list(enumerate(value))
    return []
