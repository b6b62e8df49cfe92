"""Per-transform timing inside a sample (issue 18, item 1): each transform of a pipeline timed where it runs.

``TransformTimer.install(transform)`` walks a transform pipeline and times
every *leaf* transform in it, in place, without changing what it computes:

* ``torchvision.transforms.Compose`` (v1) and anything shaped like it (a
  ``transforms`` list of callables: ``RandomApply``, ``RandomChoice``,
  ``RandomOrder``): each entry of the list is replaced by a ``Timed`` wrapper
  (containers nested inside are walked, not timed: their children are);
  (``torchvision.transforms.v2`` containers hold plain lists too);
* a container whose list is a ``ModuleList`` (v2's ``RandomApply`` takes
  one), which takes modules only: each leaf module is replaced by a
  ``TimedModule`` (a module that calls it between the clocks). No forward
  hooks: they put every call on torch's slow path (+8 µs a call, against
  +2.5 µs wrapped);
* any other transform given directly (a module, a user's own function):
  wrapped, the wrapper returned for the caller to put in its place.

A transform that a random container skips is not called, so its ``calls``
say how often it ran. Times are read from two injected clocks: ``clock``
(wall, ``time.perf_counter``) and ``cpu_clock`` (the calling thread's CPU,
``time.thread_time``: what the transform computed rather than waited).
Each process that makes samples (a DataLoader worker, or the training
process with ``num_workers = 0``) holds its own timer; ``take()`` returns
and clears what was measured since the last call (one batch's worth, for
the loading records), and ``rank`` turns the totals into summary rows.

**Where the timings are read** (a profiled script, ``pipeprof.script.transform_hooks``):
a timer made with a ``key`` keeps its totals in this process's table for
that key (``take_table(key)``), and its totals pickle *by key*: a spawned
worker that unpickles the timed pipeline (with the dataset, apart from
whatever reads the totals) adds into its own process's table for the key,
and a forked worker starts from zeroed copies. ``DEPTH.n`` counts the timed
calls running in this thread's process (transforms and the decode calls of
``pipeprof.script.decode_hooks``): a call inside another is not timed twice.

``leaves`` keeps each timed leaf's name and whether it is random (``True``:
a ``Random*`` class, a known random one like ``ColorJitter``, or anything
inside a random container; ``False``: another torchvision transform; ``None``:
a user's own callable), in call order.

Names are the class name, with the ``repr`` where it is short
(``RandomResizedCrop(size=224)``-like, at most ``NAME_REPR_MAX`` characters),
a function's ``__name__`` for plain functions and ``Lambda``; equal names
in one pipeline are told apart by their position (``Normalize #2``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch

from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.timed_depth import DEPTH

NAME_REPR_MAX = 40
cpu_thread_clock: Clock = time.thread_time


@dataclasses.dataclass
class TransformTimes:
    """One transform's totals since the last ``take()``: calls, wall seconds, on-CPU seconds."""

    calls: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def add(self, wall_s: float, cpu_s: float) -> None:
        self.calls += 1
        self.wall_s += wall_s
        self.cpu_s += cpu_s


class KeyedTimes(TransformTimes):
    """Totals kept in this process's table for ``key``: they pickle by key and name, so a spawned worker's
    copy of a pipeline adds into that worker's own table (``take_table``)."""

    def __init__(self, key: str, name: str) -> None:
        super().__init__()
        self.key, self.name = key, name

    def __reduce__(self) -> tuple:
        return keyed_times, (self.key, self.name)


# Per process: key -> name -> totals, in the order they were made (installed, or unpickled in a spawned worker).
_TABLES: dict[str, dict[str, KeyedTimes]] = {}


def keyed_times(key: str, name: str) -> KeyedTimes:
    """This process's totals for ``name`` under ``key`` (made on first use)."""
    table = _TABLES.setdefault(key, {})
    times = table.get(name)
    if times is None:
        times = table[name] = KeyedTimes(key, name)
    return times


def take_table(key: str) -> list[tuple[str, int, float, float]]:
    """``(name, calls, wall_s, cpu_s)`` of every transform under ``key`` in this process since the last call
    (zero calls included: a transform a random container skipped), then zeroed; [] for an unknown key."""
    table = _TABLES.get(key)
    if not table:
        return []
    out = []
    for name, t in table.items():
        out.append((name, t.calls, t.wall_s, t.cpu_s))
        t.calls, t.wall_s, t.cpu_s = 0, 0.0, 0.0
    return out


def drop_table(key: str) -> None:
    _TABLES.pop(key, None)


def _zero_tables() -> None:  # a forked child: what the parent had measured is not its own
    for table in _TABLES.values():
        for t in table.values():
            t.calls, t.wall_s, t.cpu_s = 0, 0.0, 0.0


os.register_at_fork(after_in_child=_zero_tables)




class Timed:
    """A callable transform, timed: calls ``inner`` and adds its wall and CPU time to ``times``."""

    def __init__(self, inner: Callable[..., Any], times: TransformTimes, clock: Clock, cpu_clock: Clock) -> None:
        self.inner = inner
        self.times = times
        self._clock, self._cpu = clock, cpu_clock

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        depth = DEPTH
        depth.n += 1
        t0, c0 = self._clock(), self._cpu()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.times.add(self._clock() - t0, self._cpu() - c0)
            depth.n -= 1

    def __repr__(self) -> str:  # the pipeline prints as it did
        return repr(self.inner)

    def __getattr__(self, name: str) -> Any:  # the transform's own attributes stay readable
        if name == "inner" or name.startswith("__"):  # unpickling (a spawned worker) looks these up first
            raise AttributeError(name)
        return getattr(self.inner, name)


class TimedModule(torch.nn.Module):
    """A module transform held in a ``ModuleList`` (one given to v2's ``RandomApply``), timed: a module
    in its place (the list takes modules only) that calls ``inner`` between the clocks. Cheaper than forward
    hooks on ``inner``, which put every call on torch's slow path (+8 µs a call measured, against +2.5 µs)."""

    def __init__(self, inner: torch.nn.Module, times: TransformTimes, clock: Clock, cpu_clock: Clock) -> None:
        super().__init__()
        self.inner = inner
        self.times = times
        self._clock, self._cpu = clock, cpu_clock

    forward = Timed.__call__  # the same attributes (inner, times, _clock, _cpu): the same timed call
    __repr__ = Timed.__repr__

    def __getattr__(self, name: str) -> Any:  # the transform's own attributes stay readable
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "inner" or name.startswith("__"):
                raise
            return getattr(super().__getattr__("inner"), name)


def transform_name(transform: Any) -> str:
    """``ClassName`` or its short ``repr``; a function's ``__name__`` (``Lambda``'s too); a timed one's own."""
    if isinstance(transform, (Timed, TimedModule)):
        transform = transform.inner
    if callable(getattr(transform, "lambd", None)):
        return f"Lambda({getattr(transform.lambd, '__name__', 'lambda')})"
    if not isinstance(transform, type) and hasattr(transform, "__name__") and not hasattr(transform, "forward"):
        return str(transform.__name__)
    text = " ".join(repr(transform).split())
    name = type(transform).__name__
    return text if text.startswith(name) and len(text) <= NAME_REPR_MAX else name


def is_container(transform: Any) -> bool:
    """Whether ``transform`` holds others in its ``transforms`` (``Compose``, ``RandomApply``, ...), not
    functions of its own library it applies itself (``own_steps``)."""
    inner = getattr(transform, "transforms", None)
    if inner is None or isinstance(inner, (str, bytes)) or not isinstance(inner, Iterable):
        return False
    return not own_steps(transform, inner)


_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)


def own_steps(transform: Any, inner: Any) -> bool:
    """Whether ``inner`` (a transform's ``transforms``) holds only functions of the transform's own library: the
    steps of one transform (albumentations' ``ColorJitter`` keeps its brightness, contrast, saturation and hue
    adjustments there, to apply in a random order), timed as that one transform, not as four. A pipeline of
    a user's own functions (``Compose([to_tensor, normalize])``) is a container."""
    if not isinstance(inner, (list, tuple)) or not inner:
        return False
    package = (type(transform).__module__ or "").split(".")[0]

    def library(f: Any) -> str:
        return (getattr(getattr(f, "func", f), "__module__", None) or "").split(".")[0]
    return all(isinstance(f, _FUNCTIONS) and library(f) == package for f in inner)


# Random transforms whose class name does not start with "Random" (torchvision v1 and v2)
KNOWN_RANDOM = frozenset({"ColorJitter", "AutoAugment", "RandAugment", "TrivialAugmentWide", "AugMix",
                          "ElasticTransform", "GaussianBlur", "GaussianNoise", "ScaleJitter", "MixUp", "CutMix"})


def is_random(transform: Any) -> bool | None:
    """Whether ``transform`` draws at random: a ``Random*`` class or a known random one; False for another
    torchvision transform; None for anything else (a user's own callable: not known)."""
    name = type(transform).__name__
    if name.startswith("Random") or name in KNOWN_RANDOM:
        return True
    return False if type(transform).__module__.startswith("torchvision.") else None


class TransformTimer:
    """Times the leaf transforms of pipelines installed into it; ``take()`` gives and clears their totals.

    ``key``: keep the totals in this process's table for that key (``take_table``), where a spawned worker's
    unpickled copy of the pipeline adds too."""

    def __init__(self, clock: Clock = monotonic_clock, cpu_clock: Clock = cpu_thread_clock,
                 key: str | None = None) -> None:
        self.clock, self.cpu_clock = clock, cpu_clock
        self.key = key
        self.times: dict[str, TransformTimes] = {}
        self.leaves: list[tuple[str, bool | None]] = []  # (name, random) of each timed leaf, in call order
        self._undo: list[Callable[[], None]] = []

    def install(self, transform: Any) -> Any:
        """Time every leaf of ``transform`` in place; returns what to call instead (``transform`` itself for a
        container, a ``Timed`` wrapper for a bare transform)."""
        if is_container(transform):
            self._walk(transform, bool(is_random(transform)))
            return transform
        return self._leaf(transform, False)

    def _walk(self, container: Any, random: bool) -> None:
        inner = container.transforms
        if not hasattr(inner, "__setitem__"):  # a tuple: a list in its place while timed
            original, inner = inner, list(inner)
            container.transforms = inner
            self._undo.append(lambda: setattr(container, "transforms", original))
        modules_only = isinstance(inner, torch.nn.ModuleList)
        for i, child in enumerate(list(inner)):
            if is_container(child):
                self._walk(child, random or bool(is_random(child)))
                continue
            timed = self._leaf(child, random, modules_only)
            if timed is not child:
                inner[i] = timed
                self._undo.append(_put_back(inner, i, child))

    def _leaf(self, transform: Any, random: bool, modules_only: bool = False) -> Any:
        """``random``: inside a random container; ``modules_only``: in a list that takes modules only."""
        name = self._new_times(transform_name(transform))
        times = self.times[name]
        self.leaves.append((name, True if random else is_random(transform)))
        if modules_only and isinstance(transform, torch.nn.Module):
            return TimedModule(transform, times, self.clock, self.cpu_clock)
        return Timed(transform, times, self.clock, self.cpu_clock)

    def _new_times(self, name: str) -> str:
        """Totals for a new leaf named ``name`` (``name #2``... when taken); returns the name given."""
        unique, n = name, 1
        while unique in self.times:
            n += 1
            unique = f"{name} #{n}"
        self.times[unique] = TransformTimes() if self.key is None else keyed_times(self.key, unique)
        return unique

    def take(self) -> dict[str, TransformTimes]:
        """The totals since the last call (in installation order), then zeroed."""
        out = {name: TransformTimes(t.calls, t.wall_s, t.cpu_s) for name, t in self.times.items()}
        for t in self.times.values():
            t.calls, t.wall_s, t.cpu_s = 0, 0.0, 0.0
        return out

    def uninstall(self) -> None:
        """Put every pipeline back as it was (wrappers out of the lists)."""
        while self._undo:
            self._undo.pop()()


def _put_back(items: Any, index: int, value: Any) -> Callable[[], None]:
    def undo() -> None:
        items[index] = value
    return undo


def rank(totals: dict[str, TransformTimes], samples: int, prep_s: float | None) -> list[dict[str, Any]]:
    """summary rows, costliest first: ``{"name", "per_sample_s", "cpu_per_sample_s", "calls", "share_of_prep"}``
    over ``samples`` samples; ``share_of_prep`` the transform's wall time over the prep time those samples took
    (None where that is unknown or zero)."""
    if samples <= 0:
        return []
    rows = [{"name": name, "per_sample_s": t.wall_s / samples, "cpu_per_sample_s": t.cpu_s / samples,
             "calls": t.calls, "share_of_prep": t.wall_s / prep_s if prep_s else None}
            for name, t in totals.items() if t.calls]
    return sorted(rows, key=lambda r: (-r["per_sample_s"], r["name"]))
