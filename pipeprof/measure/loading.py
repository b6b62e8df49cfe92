"""Worker-side loading timing: fetch, prep and collate of every batch, where it is made.

A DataLoader makes a batch in one process — a worker, or the training
process itself when ``num_workers = 0`` — by calling ``dataset[i]`` for each
index of the batch and then ``collate_fn(samples)``, one after the other. The
recorder wraps both:

* ``TimedDataset.__getitem__`` times ``fetch(i)`` and ``prep(fetched)`` with
  three clock reads and adds them to this process's open batch;
* ``TimedCollate`` times the collate, closes the open batch and returns
  ``(x, y, LoadRecord)``: one small record per batch rides to the training
  process with the batch itself (the ``pin_memory`` thread passes objects it
  does not know through untouched).

Waiting for a core: the thread's run-queue wait (``measure.schedstat``) is
read when a batch's first sample begins and when its collate begins; the
difference, capped to the batch's fetch and prep time, is ``core_wait_s``,
taken out of fetch first and out of prep for the rest. Per batch, not per
sample (a reading costs 1-3 µs, as much as fetching a sample from RAM), so
where in the batch the thread waited is not known; fetch first because
a thread that leaves the CPU (storage latency, I/O) waits for a core to come
back, and so that what fetch keeps is never time waiting for a core: a
lower bound on the storage's time, never contention called storage. Where
the wait cannot be read it is unknown (None, NaN in the table) and fetch and
prep keep it, as they did before.

The training loop hands each record to ``LoadingRecorder.record`` with the
step that consumed the batch. Nothing is locked, written or sent per sample.

The open batch lives in a per-process table keyed by the recorder, not on the
dataset object: a spawned worker unpickles the dataset and the collate
function separately, and only a module-level table is shared by both. A
forked worker starts with the table emptied, so a batch left half-made in
the parent never leaks into a worker's first record.

Times are ``clock() - t0_s``. With ``time.perf_counter`` (CLOCK_MONOTONIC on
Linux) they share the step timer's axis across processes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.utils.data import Dataset, default_collate, get_worker_info

from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.schedstat import RunQueueClock, core_wait_s, run_queue_wait
from pipeprof.measure.spool import Spool
from pipeprof.run_folder import LOADING_COLUMNS

if TYPE_CHECKING:
    from pipeprof.storage.base import SampleDataset

Collate = Callable[[list[Any]], Any]

MAIN_PROCESS = -1  # ``LoadRecord.worker`` of a batch made in the training process
NAN = float("nan")


@dataclass(frozen=True)
class LoadRecord:
    """How one batch was made, in the process that made it (seconds since the run started)."""

    worker: int  # DataLoader worker id, or MAIN_PROCESS
    pid: int
    t_start_s: float  # the batch's first fetch began
    t_end_s: float  # its collate ended
    fetch_s: float  # sum over samples: reading bytes from storage (emulated slowness included), core wait excluded
    prep_s: float  # sum over samples: decode + transform (core wait excluded)
    collate_s: float  # stacking the samples into the batch
    samples: int
    nbytes: int  # bytes read from storage, summed over samples
    fetch_max_s: float  # the slowest sample's fetch
    core_wait_s: float | None = None  # runnable but waiting for a core during fetch and prep; None: unknown


class _OpenBatch:
    """Running sums for the batch being assembled in this process."""

    __slots__ = ("t_start", "fetch_s", "prep_s", "samples", "nbytes", "fetch_max_s", "queue_start_s")

    def __init__(self, t_start: float, queue_start_s: float | None = None) -> None:
        self.t_start = t_start
        self.queue_start_s = queue_start_s  # the thread's run-queue wait when the batch began (None: unknown)
        self.fetch_s = 0.0
        self.prep_s = 0.0
        self.samples = 0
        self.nbytes = 0
        self.fetch_max_s = 0.0


# Per process: recorder key -> the batch this process is assembling for it.
_OPEN: dict[str, _OpenBatch] = {}

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_OPEN.clear)


class TimedDataset(Dataset):
    """A ``SampleDataset`` whose ``__getitem__`` times ``fetch`` and ``prep`` (see module docstring)."""

    def __init__(self, dataset: SampleDataset, clock: Clock, key: str,
                 run_queue: RunQueueClock = run_queue_wait) -> None:
        self.dataset = dataset
        self.clock = clock
        self.key = key
        self.run_queue = run_queue

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        clock = self.clock
        batch = _OPEN.get(self.key)
        queue_s = self.run_queue() if batch is None else None  # the batch's first sample
        t0 = clock()
        fetched = self.dataset.fetch(index)
        t1 = clock()
        item = self.dataset.prep(fetched)
        t2 = clock()
        if batch is None:
            batch = _OPEN[self.key] = _OpenBatch(t0, queue_s)
        fetch_s = t1 - t0
        batch.fetch_s += fetch_s
        batch.prep_s += t2 - t1
        batch.samples += 1
        batch.nbytes += fetched.nbytes
        if fetch_s > batch.fetch_max_s:
            batch.fetch_max_s = fetch_s
        return item

    # The storage's housekeeping stays reachable through the wrapper.
    def paths(self) -> list:
        return self.dataset.paths()

    def close(self) -> None:
        self.dataset.close()


class TimedCollate:
    """Collate, timed; returns ``(x, y, LoadRecord)`` for the batch this process just assembled."""

    def __init__(self, collate: Collate, clock: Clock, t0_s: float, key: str,
                 run_queue: RunQueueClock = run_queue_wait) -> None:
        self.collate = collate
        self.clock = clock
        self.t0_s = t0_s
        self.key = key
        self.run_queue = run_queue

    def __call__(self, samples: list[Any]) -> tuple[Any, Any, LoadRecord]:
        queue_s = self.run_queue()
        t0 = self.clock()
        x, y = self.collate(samples)
        t1 = self.clock()
        batch = _OPEN.pop(self.key, None) or _OpenBatch(t0)  # None: the dataset was not wrapped
        made_s = batch.fetch_s + batch.prep_s
        core_s = core_wait_s(made_s, batch.queue_start_s, queue_s)
        from_fetch_s = min(core_s or 0.0, batch.fetch_s)
        info = get_worker_info()
        record = LoadRecord(
            worker=MAIN_PROCESS if info is None else int(info.id),
            pid=os.getpid(),
            t_start_s=batch.t_start - self.t0_s,
            t_end_s=t1 - self.t0_s,
            fetch_s=batch.fetch_s - from_fetch_s,
            prep_s=batch.prep_s - ((core_s or 0.0) - from_fetch_s),
            collate_s=t1 - t0,
            samples=batch.samples,
            nbytes=batch.nbytes,
            fetch_max_s=min(batch.fetch_max_s, batch.fetch_s - from_fetch_s),
            core_wait_s=core_s,
        )
        return x, y, record


class LoadingRecorder:
    """Wraps a dataset and a collate function, and keeps the records of consumed batches.

    ``rows()`` gives one dict per consumed batch with the columns of
    ``run.LOADING_COLUMNS``. Only the training process calls ``record``;
    the wrappers run wherever the DataLoader runs them.
    """

    def __init__(self, clock: Clock = monotonic_clock, t0_s: float = 0.0,
                 run_queue: RunQueueClock = run_queue_wait) -> None:
        self.clock = clock
        self.t0_s = t0_s
        self.run_queue = run_queue
        self.key = uuid.uuid4().hex  # names this recorder's open batches in every process
        self._rows = Spool(LOADING_COLUMNS)

    def spool_to(self, folder: Path) -> None:
        """Stream the records to a file in ``folder`` from now on (before the first record: a long run)."""
        if len(self._rows):
            raise RuntimeError("spool_to() must come before the first record")
        self._rows = Spool(LOADING_COLUMNS, folder, "loading")

    def wrap_dataset(self, dataset: SampleDataset) -> Dataset:
        return TimedDataset(dataset, self.clock, self.key, self.run_queue)

    def collate_fn(self, collate: Collate = default_collate) -> TimedCollate:
        return TimedCollate(collate, self.clock, self.t0_s, self.key, self.run_queue)

    def record(self, record: LoadRecord, step: int) -> None:
        """Keep ``record`` as the batch consumed by training step ``step``."""
        r = record
        self._rows.append({"batch": len(self._rows), "step": step, "worker": r.worker, "pid": r.pid,
                           "t_start_s": r.t_start_s, "t_end_s": r.t_end_s, "fetch_s": r.fetch_s,
                           "core_wait_s": NAN if r.core_wait_s is None else r.core_wait_s, "prep_s": r.prep_s,
                           "collate_s": r.collate_s, "samples": r.samples, "nbytes": r.nbytes, "fetch_max_s": r.fetch_max_s})

    @property
    def batches(self) -> int:
        return len(self._rows)

    def rows(self) -> list[dict[str, Any]]:
        return self._rows.rows()

    def frame(self) -> Any:
        """The loading table (a DataFrame), times as recorded (raw clock readings minus ``t0_s``)."""
        return self._rows.frame()
