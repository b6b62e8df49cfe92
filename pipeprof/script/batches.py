"""Timing each batch where it is made — a DataLoader worker or the training process — and carrying the record back.

Part of the hooks of a profiled script (``pipeprof.script.hooks``); standard
library and torch only. The dataset fetchers' ``fetch`` is patched in every
process that makes batches: it times ``__getitem__`` over the batch (wall and
thread CPU time, and the thread's run-queue wait: ``pipeprof.measure.schedstat``)
and the collate (``TimedCollate``), and returns the batch as
``Tagged(batch, record)``; the training process unwraps it in ``next()``, so
the script never sees it. The pin-memory thread pins a ``Tagged`` through its
``pin_memory()``. A spawned or forkserver worker imports this module when it
unpickles the ``TimedCollate``, which installs the fetch patch there too.

Inside the fetch (issue 18): the decode calls are timed while it runs
(``pipeprof.script.decode_hooks``), and what the batch's samples spent in
each timed transform (under the collate's ``transform_keys``,
``pipeprof.script.transform_hooks``) and decode call rides back in
``Tagged.parts``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils import fetch as _fetch
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory

from pipeprof.measure.schedstat import core_wait_s, run_queue_wait
from pipeprof.script import decode_hooks, worker_start
from pipeprof.script.patches import Patches
from pipeprof.script.transform_hooks import batch_parts

clock = time.perf_counter  # CLOCK_MONOTONIC on Linux: one time axis for the script, its workers and pipeprof
cpu_clock = time.thread_time
run_queue = run_queue_wait  # this thread's cumulative wait for a core, s (None: unknown)


class Tagged:
    """A batch and the record of how it was made; the training process unwraps it in ``next()``."""

    __slots__ = ("batch", "record", "parts", "start")

    def __init__(self, batch: Any, record: list, parts: list | None = None,
                 start: dict[str, float | None] | None = None) -> None:
        self.batch = batch
        self.start = start  # a spawned worker's first batch: how the worker started (script.worker_start)
        # [worker, pid, t_start_s, t_end_s, fetch_s, prep_s, collate_s, samples, core_wait_s]: __getitem__'s
        # off-CPU time split into fetch (storage, sleep) and core_wait_s (runnable, no core; None: unknown)
        self.record = record
        # what the samples spent in timed transforms and decode calls: [(kind, name, calls, wall_s, cpu_s)]
        self.parts = parts

    def pin_memory(self) -> Tagged:  # the pin-memory thread calls this instead of passing us through
        return Tagged(_pin_memory(self.batch), self.record, self.parts, self.start)

    def __reduce__(self) -> tuple:
        return Tagged, (self.batch, self.record, self.parts, self.start)


class TimedCollate:
    """The loader's collate function, timed (wall and thread CPU clocks at its start and end, the run-queue
    wait at its start)."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate
        self.transform_keys: tuple[str, ...] = ()  # where the loader's timed transforms add up (transform_hooks)
        # w0, c0, w1, c1, samples, q0 (the thread's run-queue wait at the start, None: unknown)
        self.last: tuple[float, float, float, float, int, float | None] | None = None

    def __call__(self, samples: Any) -> Any:
        q0 = run_queue()  # before the clocks: its microsecond falls in __getitem__'s prep, not the collate
        w0, c0 = clock(), cpu_clock()
        batch = self.collate(samples)
        self.last = (w0, c0, clock(), cpu_clock(), len(samples) if isinstance(samples, list) else 1, q0)
        return batch

    def __getstate__(self) -> dict:
        return {"collate": self.collate, "pid": _pid(), "transform_keys": self.transform_keys}

    def __setstate__(self, state: dict) -> None:
        if state.get("pid") != os.getpid():  # a spawned worker (not a deepcopy in the training process)
            worker_start.unpickled()  # the dataset, unpickled before the collate: the worker's start-up is done
            _install_fetch_in_worker()
        self.collate = state["collate"]
        self.transform_keys = state.get("transform_keys", ())
        self.last = None


def leading_samples(batch: Any) -> int:
    """The samples in a ready-made batch (a loader without automatic batching: ``batch_size=None``): the leading
    dimension its tensors share, where at least two tensors (inputs and targets, two levels deep) show one and
    none is a scalar; else 1 (one tensor alone, such as an image, shows no batch dimension)."""
    found = tensors(batch)
    if len(found) < 2 or any(t.dim() == 0 for t in found):
        return 1
    sizes = {int(t.shape[0]) for t in found}
    return sizes.pop() if len(sizes) == 1 else 1


def tensors(data: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors of a batch: itself, or in a tuple / list / dict, two levels deep. Read at every batch the
    loop takes: a batch of tensors alone (the usual ``(inputs, targets)``) is taken without a call per item."""
    if isinstance(data, torch.Tensor):
        return [data]
    if depth >= 2:
        return []
    items: Iterable[Any]
    if isinstance(data, (list, tuple)):
        items = data
    elif isinstance(data, dict):
        items = data.values()
    else:
        return []
    found: list[torch.Tensor] = []
    for item in items:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif depth == 0 and isinstance(item, (list, tuple, dict)):
            found.extend(tensors(item, 1))
    return found


def _timed_fetch(original: Callable, session: Any = None) -> Callable:
    """``fetch``, timed for loaders whose collate is a ``TimedCollate`` while ``session.live`` (``None``: a
    worker's own patch, on for its life)."""
    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        collate = self.collate_fn
        if not isinstance(collate, TimedCollate) or (session is not None and not session.live):
            return original(self, possibly_batched_index)
        collate.last = None
        q0 = run_queue()
        decode_hooks.begin()
        w0, c0 = clock(), cpu_clock()
        try:
            batch = original(self, possibly_batched_index)
        finally:
            decode_hooks.end()
        # torch's fetchers call the collate last: __getitem__ ran from w0 to the collate's start. Its clocks
        # end the record (one pair of clock reads fewer per batch than reading them again here).
        timed = collate.last or (clock(), cpu_clock(), clock(), cpu_clock(), 1, run_queue())  # no collate call
        samples = timed[4] if getattr(self, "auto_collation", True) else leading_samples(batch)
        getitem_s = max(timed[0] - w0, 0.0)
        prep_s = min(max(timed[1] - c0, 0.0), getitem_s)
        off_cpu_s = getitem_s - prep_s
        core_s = core_wait_s(off_cpu_s, q0, timed[5])
        info = get_worker_info()
        return Tagged(batch, [-1 if info is None else info.id, _pid(), w0, timed[2],
                              off_cpu_s if core_s is None else off_cpu_s - core_s, prep_s, timed[2] - timed[0],
                              samples, core_s], batch_parts(collate.transform_keys),
                      worker_start.take() if worker_start._PENDING else None)
    fetch.__wrapped__ = original  # type: ignore[attr-defined]
    fetch._pipeprof = True  # type: ignore[attr-defined]
    return fetch


_PID: list[int] = []  # this process's pid, read once (os.getpid is a system call); emptied in a forked child


def _pid() -> int:
    if not _PID:
        _PID.append(os.getpid())
    return _PID[0]


os.register_at_fork(after_in_child=_PID.clear)


FETCHERS = (_fetch._MapDatasetFetcher, _fetch._IterableDatasetFetcher)
_WORKER_PATCHES = Patches()  # a spawned worker's own fetch patches: for the worker's life, never undone


def _install_fetch_in_worker() -> None:
    """A spawned or forkserver worker unpickling a ``TimedCollate``: patch its fetchers, once (not where they
    are pipeprof's already), and its decode calls."""
    for cls in FETCHERS:
        if not getattr(cls.fetch, "_pipeprof", False):
            _WORKER_PATCHES.apply(cls, "fetch", _timed_fetch)
    decode_hooks.install(_WORKER_PATCHES)  # the decode calls of what this worker imported (where not yet)


def install_fetch(patches: Patches, session: Any) -> None:
    """Patch the fetchers of this process through ``patches``; they time batches while ``session.live``
    (and pass through for loaders without a ``TimedCollate``)."""
    for cls in FETCHERS:
        patches.apply(cls, "fetch", lambda original: _timed_fetch(original, session))
