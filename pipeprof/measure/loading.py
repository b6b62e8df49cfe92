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

Inside the sample (issue 18): ``wrap_dataset`` installs a keyed
``measure.transforms.TransformTimer`` on the dataset's transform (its
totals pickle by key, so a forked or spawned worker adds into its own
process's table), and where the storage kind names a ``decoder`` the
``__getitem__`` wrapper times the decode apart from the transform (two more
clock reads and two thread-CPU reads a sample). The collate takes the
process's totals for the batch (``take_table``) and they ride with its
``LoadRecord`` as a tuple of ``(kind, name, calls, wall_s, cpu_s)``: the
transforms that ran, the decode, and the batch's whole ``__getitem__``
("batch": calls = samples, wall = fetch + prep, CPU not read: NaN). The
recorder turns them into transforms.csv rows (``run_folder.TRANSFORM_COLUMNS``)
and keeps the pipeline's leaves (``pipeline``) for run.json.

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
from pipeprof.measure.transforms import TransformTimer, cpu_thread_clock, take_table
from pipeprof.run_folder import LOADING_COLUMNS, MAIN_PROCESS, TRANSFORM_COLUMNS

if TYPE_CHECKING:
    from pipeprof.storage.base import SampleDataset

Collate = Callable[[list[Any]], Any]

NAN = float("nan")
SCENARIO_LOADER = 0  # transforms.csv's loader number of a scenario's one loader
Inside = tuple[tuple[str, str, int, float, float], ...]  # (kind, name, calls, wall_s, cpu_s) rows of one batch


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
    inside: Inside = ()  # transforms.csv's rows for the batch (module docstring); empty: nothing timed inside


class _OpenBatch:
    """Running sums for the batch being assembled in this process."""

    __slots__ = ("t_start", "fetch_s", "prep_s", "samples", "nbytes", "fetch_max_s", "queue_start_s",
                 "decode_s", "decode_cpu_s", "decoder")

    def __init__(self, t_start: float, queue_start_s: float | None = None, decoder: str | None = None) -> None:
        self.t_start = t_start
        self.decoder = decoder  # the dataset's decode call, when timed apart (its name for transforms.csv)
        self.queue_start_s = queue_start_s  # the thread's run-queue wait when the batch began (None: unknown)
        self.fetch_s = 0.0
        self.prep_s = 0.0
        self.samples = 0
        self.nbytes = 0
        self.fetch_max_s = 0.0
        self.decode_s = 0.0
        self.decode_cpu_s = 0.0


# Per process: recorder key -> the batch this process is assembling for it.
_OPEN: dict[str, _OpenBatch] = {}

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_OPEN.clear)


class TimedDataset(Dataset):
    """A ``SampleDataset`` whose ``__getitem__`` times ``fetch`` and ``prep`` (see module docstring)."""

    def __init__(self, dataset: SampleDataset, clock: Clock, key: str,
                 run_queue: RunQueueClock = run_queue_wait, cpu_clock: Clock = cpu_thread_clock) -> None:
        self.dataset = dataset
        self.clock = clock
        self.key = key
        self.run_queue = run_queue
        self.cpu_clock = cpu_clock
        self.decoder: str | None = getattr(dataset, "decoder", None)  # None: no decode timed apart

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        clock = self.clock
        batch = _OPEN.get(self.key)
        queue_s = self.run_queue() if batch is None else None  # the batch's first sample
        t0 = clock()
        fetched = self.dataset.fetch(index)
        t1 = clock()
        if self.decoder is not None:  # prep's two halves, the decode timed (wall and CPU) on its own
            c1 = self.cpu_clock()
            x = self.dataset.decode(fetched.payload)
            decoded, c2 = clock(), self.cpu_clock()
            item = self.dataset.transformed(x), fetched.label
        else:
            item = self.dataset.prep(fetched)
        t2 = clock()
        if batch is None:
            batch = _OPEN[self.key] = _OpenBatch(t0, queue_s, self.decoder)
        if self.decoder is not None:
            batch.decode_s += decoded - t1
            batch.decode_cpu_s += c2 - c1
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
            inside=self._inside(batch),
        )
        return x, y, record

    def _inside(self, batch: _OpenBatch) -> Inside:
        """The batch's transforms.csv rows: the transforms that ran, the decode, the whole ``__getitem__``."""
        rows = [("transform", name, calls, wall_s, cpu_s) for name, calls, wall_s, cpu_s in take_table(self.key)
                if calls]
        if batch.decoder is not None and batch.samples:
            rows.append(("decode", batch.decoder, batch.samples, batch.decode_s, batch.decode_cpu_s))
        if not rows:
            return ()
        rows.append(("batch", "", batch.samples, batch.fetch_s + batch.prep_s, NAN))
        return tuple(rows)


class LoadingRecorder:
    """Wraps a dataset and a collate function, and keeps the records of consumed batches.

    ``rows()`` gives one dict per consumed batch with the columns of
    ``run.LOADING_COLUMNS``. Only the training process calls ``record``;
    the wrappers run wherever the DataLoader runs them.
    """

    def __init__(self, clock: Clock = monotonic_clock, t0_s: float = 0.0,
                 run_queue: RunQueueClock = run_queue_wait, cpu_clock: Clock = cpu_thread_clock) -> None:
        self.clock = clock
        self.t0_s = t0_s
        self.run_queue = run_queue
        self.cpu_clock = cpu_clock
        self.key = uuid.uuid4().hex  # names this recorder's open batches (and transform totals) in every process
        self._rows = Spool(LOADING_COLUMNS)
        self._inside = Spool(TRANSFORM_COLUMNS)
        # run.json's transform_pipelines entry for the loader: its timed leaves in call order
        self.pipeline: list[dict[str, Any]] = []

    def spool_to(self, folder: Path) -> None:
        """Stream the records to a file in ``folder`` from now on (before the first record: a long run)."""
        if len(self._rows):
            raise RuntimeError("spool_to() must come before the first record")
        self._rows = Spool(LOADING_COLUMNS, folder, "loading")
        self._inside = Spool(TRANSFORM_COLUMNS, folder, "transforms")

    def flush(self) -> None:
        """Write the records held in memory to the spool files now (a run recorded as it goes, between steps:
        ``record`` itself, inside the step's data wait, only appends)."""
        self._rows.flush()
        self._inside.flush()

    def wrap_dataset(self, dataset: SampleDataset) -> Dataset:
        """The timed dataset; its transform's leaves are timed from now on (in place, keyed by this recorder)."""
        if dataset.transform is not None:
            timer = TransformTimer(self.clock, self.cpu_clock, key=self.key)
            dataset.transform = timer.install(dataset.transform)
            self.pipeline = [{"name": name, "random": random} for name, random in timer.leaves]
        return TimedDataset(dataset, self.clock, self.key, self.run_queue, self.cpu_clock)

    def collate_fn(self, collate: Collate = default_collate) -> TimedCollate:
        return TimedCollate(collate, self.clock, self.t0_s, self.key, self.run_queue)

    def record(self, record: LoadRecord, step: int) -> None:
        """Keep ``record`` as the batch consumed by training step ``step``."""
        r = record
        self._rows.append({"batch": len(self._rows), "step": step, "worker": r.worker, "pid": r.pid,
                           "t_start_s": r.t_start_s, "t_end_s": r.t_end_s, "fetch_s": r.fetch_s,
                           "core_wait_s": NAN if r.core_wait_s is None else r.core_wait_s, "prep_s": r.prep_s,
                           "collate_s": r.collate_s, "samples": r.samples, "nbytes": r.nbytes, "fetch_max_s": r.fetch_max_s})
        worker = r.worker
        for kind, name, calls, wall_s, cpu_s in r.inside:
            self._inside.append({"step": step, "loader": SCENARIO_LOADER, "worker": worker, "kind": kind, "name": name,
                                 "calls": calls, "wall_s": wall_s, "cpu_s": cpu_s})

    @property
    def batches(self) -> int:
        return len(self._rows)

    def rows(self) -> list[dict[str, Any]]:
        return self._rows.rows()

    def frame(self) -> Any:
        """The loading table (a DataFrame), times as recorded (raw clock readings minus ``t0_s``)."""
        return self._rows.frame()

    def transforms_frame(self) -> Any:
        """transforms.csv's table (a DataFrame, ``TRANSFORM_COLUMNS``): empty when nothing was timed inside."""
        return self._inside.frame()
