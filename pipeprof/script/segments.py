"""What-if segments: after ``--steps``, a profiled script's own training loop goes on for a few seconds, fed by
variants of its training loader (issue 17).

A scenario's changes are measured after its run by probes that re-run its workload (``measure.what_if``). A
script's workload is its own code: pipeprof cannot call its training step. But the script's loop is still
there when ``--steps N`` ends the run: instead of ending it at the next ``next()`` on the training loader, the
hooks hand that ``next()``, and those after it, batches from a *variant* of the loader (the same dataset,
batch sampler, collate function, pinned memory, worker start-up function and multiprocessing context, with
another ``num_workers``) or the same loader's settings at another number of torch threads; the script trains
on them as on its own, and its loop's seconds per batch are timed in windows (``measure.windows``), exactly as
a trained probe times the scenario's loop. What each segment measures is the script's own loop at a changed
setting: its compute beside the workers handing batches over, the receiving, the contention for the cores.
The analytical model cannot see that compute slows beside a worker even where the worker has a core of its
own: plain_loop (collate 1 ms) with 1 worker was predicted 19,284 samples/s and made 14,313; trainer_class at
2 threads beside its worker was predicted 7,329 and made 5,797.

The segments, in order, for a run with ``k`` workers at ``T`` torch threads on ``N`` usable cores
(``plan``), each recorded under the run.json ``what_ifs`` key the model reads for a scenario's probes:

* ``train_as_run`` (``k = 0`` only): the run's own settings, the as-run loop a measured prediction reads each
  segment against (``analysis.prediction``); with workers it is not measured (their batches come in bursts);
* ``train_workers["k+1"]`` and ``train_workers["k-1"]`` (``k >= 1``) at ``T`` threads;
* ``train_threads["k"]``: ``k`` workers at the other number of threads (1, or ``N`` from 1);
* then ``train_workers`` at ``k + 2`` up to ``2 × N`` workers while the budget lasts (a recommendation
  of more workers is then measured too; one the budget leaves out is not recorded).

pipeprof never changes what the script sees: its pass of the loader ends where its own would have, after
``len(loader)`` batches in all (``StopIteration``; a loader without a length: where the variant's ends), and
torch's warnings about the variant's workers are not the script's to see. Each variant's batch sampler goes
round without end (``Endless``), so that a new pass of the script's goes on with the same variant, and the
variant's workers start once (their start-up, the first batch's wait and step, is kept as
``startup_s``); its warm-up takes the first steps (and the ``k × prefetch_factor`` batches asked for at
``iter()``), then up to ``WINDOWS`` windows of at least ``k + 1`` batches within the segment's budget (stretched
to ``TRAINED_FULL_BUDGET_S`` for slow batches: ``measure.windows.trained_windows``, as a trained probe's). A
segment that would overrun the segments' total budget is not started. The budgets follow the run's own pace,
as a scenario's probes' do (``measure.windows.probes_budget``): in all the larger of 3 s and 10 % of the run's
training, windows of a few of its steps, so a 300 ms GPU step gets windows that hold steps, and a 1 ms CPU step
no more than the 3 s.
The variant's workers are shut down and the threads restored before the next segment; after the last one the
script ends as ``--steps`` ends it (``SystemExit(0)``).

The script's own time away from its loop (another loader's ``next()``: a validation pass, its batches the
script's own, untimed) is neither a window's nor the budget's: the step spanning it is not measured, nor, with
workers, the ``k × prefetch_factor`` steps after it (they drain the queue filled meanwhile); a new pass of the
training loader (a framework that ends its epoch by counting batches, as Lightning does) goes on with the
same variant. The segments end by ``HARD_LIMIT_TIMES`` their budget whatever the time away.

The event log is muted while the segments run: none of their steps, batches or copies is the run's. Their
results are one ``A`` event (``{"train_workers": {...}, ...}``, or ``{"absent": reason}``), written when they end,
or when the script ends during them (what was measured so far). Not run (``absent``, with the reason): a rank
of a multi-rank job (its steps wait on the other ranks' collectives, and one rank cannot change its loader
alone), a script whose first ``next()`` after the stop is on another loader than the training one, and an
iterable dataset whose variant ends (what was measured stands). Standard library and torch only at import:
this runs in the user's process (the usable cores, ``measure.environment``, are read when the segments begin).
"""

from __future__ import annotations

import inspect
import statistics
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from pipeprof.measure.clock import Clock
from pipeprof.measure.probe_plan import Variant, probe_plan, workers_wanted
from pipeprof.measure.windows import (
    DEFAULT_PREFETCH,
    TRAINED_FULL_BUDGET_S,
    WARMUP_STEPS,
    WORKERS_BUDGET_S,
    Windows,
    probes_budget,
    trained_windows,
)
from pipeprof.script.batches import Tagged
from pipeprof.script.loaders import batch_samples

HARD_LIMIT_TIMES = 3  # the segments end by this many times their budget whatever the script's time away


Segment = Variant  # one variant of the run (measure.probe_plan)


def plan(k: int, threads: int, cores: int, wanted: int | None = None) -> list[Segment]:
    """The segments after a run with ``k`` workers at ``threads`` torch threads on ``cores`` usable cores
    (``wanted``: the workers its step says would feed its compute): the probe plan a scenario's probes follow
    too (``measure.probe_plan``)."""
    return probe_plan(k, threads, cores, wanted=wanted)


class Endless:
    """A (batch) sampler that goes round again when it ends: a variant's epoch never ends in a segment."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[Any]:
        while True:
            empty = True
            for item in self.sampler:
                empty = False
                yield item
            if empty:
                return


def variant_loader(loader: DataLoader, k: int) -> DataLoader:
    """``loader`` with ``k`` workers: the same dataset, sampling, collate function (the hooks' timed one: the
    run's per-batch cost stays), pinned memory, worker start-up function and context; its sampler endless."""
    kwargs: dict[str, Any] = {"num_workers": k, "collate_fn": loader.collate_fn, "pin_memory": loader.pin_memory,
                              "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
                              "generator": loader.generator}
    device = getattr(loader, "pin_memory_device", "")
    if device:
        kwargs["pin_memory_device"] = device
    if k:
        kwargs["multiprocessing_context"] = loader.multiprocessing_context
        kwargs["prefetch_factor"] = loader.prefetch_factor if loader.num_workers else DEFAULT_PREFETCH
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **kwargs)
    if loader.batch_sampler is not None:
        return DataLoader(loader.dataset, batch_sampler=Endless(loader.batch_sampler), **kwargs)
    return DataLoader(loader.dataset, batch_size=None, sampler=Endless(loader.sampler), **kwargs)


class _Running:
    """The segment being measured: its loader's iterator, the windows, the batch handed out last."""

    def __init__(self, segment: Segment, iterator: Any, start_s: float, prefetch: int) -> None:
        self.segment, self.iterator, self.start_s, self.prefetch = segment, iterator, start_s, prefetch
        self.windows: Windows | None = None  # made at the first step's end (the workers' start-up before it)
        self.startup_s: float | None = 0.0  # None: the first step spanned the script's time away from the loop
        self.gapped = False
        self.refill = 0  # steps after the script's time away not measured: they drain the queue filled meanwhile
        self.handed: int | None = None  # samples of the batch the loop is training on


class WhatIfSegments:
    """The segments of one profiled process (module docstring). ``next_batch`` is the training loader's
    ``next()`` once ``--steps`` has stopped the run; ``SystemExit(0)`` when they are done."""

    def __init__(self, log: Any, clock: Clock, *, cores: int | None = None,
                 make_loader: Callable[[DataLoader, int], DataLoader] = variant_loader,
                 total_budget_s: float | None = None,
                 **windows: Any) -> None:
        self.log, self.clock, self.make_loader = log, clock, make_loader
        self.cores = cores  # usable cores (None: read when the segments begin)
        self.training_device: int | None = None  # the CUDA device the script trains on (set by the hooks)
        # None: sized when the segments begin by the run's own pace (measure.windows.probes_budget), as a
        # scenario's probes are; the budget used is recorded in the results (``budget``)
        self.total_budget_s = total_budget_s
        self.windows = windows  # Windows' settings (tests: shorter); the run's pace sizes those not given
        self.results: dict[str, Any] = {}
        self.plan: list[Segment] = []
        self.loader: DataLoader | None = None
        self.number: int | None = None  # the training loader's number (the hooks')
        self.iterator: Any = None  # the script's own iterator of its training loader
        self.gap = False  # the script took another loader's batch since the last segment batch
        self.last_s = 0.0  # the last next() that got a segment's batch
        self.away_s = 0.0  # the script's time away from its loop (validation passes): not the budget's
        self.running: _Running | None = None
        self.start_s: float | None = None
        self.threads = 0  # the run's torch threads, restored after each segment
        self.written = False
        self.left: int | None = None  # batches left in the script's pass of its loader (None: unknown, no end)
        self.ended_pass = False  # the script's pass ended (StopIteration) at the last next(): it went away since

    @property
    def begun(self) -> bool:
        return self.start_s is not None

    def begin(self, loader: DataLoader | None, number: int | None, iterator: Any,
              step_ends_s: list[float] | None = None, waits_s: list[float] | None = None) -> None:
        """The first ``next()`` after the stop, on ``iterator``; ``number``: the training loader's number when
        ``loader`` is the one whose batch the last step trained on, else None (the segments do not run).
        ``step_ends_s``: the run's step ends (host seconds), which size the budget (``run_pace``); ``waits_s``:
        its training loader's waits in ``next()``, which with them say which workers to measure first."""
        self.start_s = self.clock()
        training_s, step_s = run_pace(step_ends_s or [])
        self._size_budget(training_s, step_s)
        counted = (waits_s or [])[WARMUP_STEPS:] or waits_s or []
        wait_s = statistics.median(counted) if counted else None
        self.loader, self.number, self.iterator = loader, number, iterator
        self.left = batches_left(loader, iterator)
        self.threads = torch.get_num_threads()
        self.log.muted = True
        why = None
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            why = ("a rank of a multi-rank job: its steps wait on the other ranks' collectives, and one rank "
                   "cannot change its loader alone")
        elif loader is None or number is None:
            why = ("the script's first next() after --steps was on another loader than the one its last step "
                   "trained on")
        elif not isinstance(loader, DataLoader):
            why = (f"the training loader is a {type(loader).__module__}.{type(loader).__name__}, not a torch "
                   "DataLoader: pipeprof cannot make a variant of it")
        if why is not None:
            self.results = {"absent": why}
            return
        assert loader is not None
        if self.cores is None:
            from pipeprof.measure.environment import usable_cores  # psutil: loaded after the run, not at start

            self.cores = usable_cores()
        k = int(loader.num_workers or 0)
        wanted = workers_wanted(k, step_s, wait_s)
        self.results["workers_wanted"] = wanted
        self.plan = plan(k, self.threads, self.cores, wanted)

    def decline(self, why: str) -> None:
        """The run ended at ``--steps`` with nothing the segments can vary: recorded as absent, with ``why``."""
        self.start_s = self.clock()
        self.results = {"absent": why}

    def _size_budget(self, training_s: float | None, step_s: float | None) -> None:
        """The budgets from the run's pace, as a scenario's probes get theirs (``measure.windows.probes_budget``):
        all the segments take at most the larger of 3 s and 10 % of the run's training; a segment's windows
        hold a few of its steps. Settings given to the constructor stand."""
        budget = probes_budget(training_s, step_s, self.total_budget_s)
        self.total_budget_s = budget["total_budget_s"]
        self.windows = {"window_s": budget["window_s"], "budget_s": budget["budget_s"], **self.windows}
        self.results["budget"] = {"total_budget_s": self.total_budget_s, "window_s": self.windows["window_s"],
                                  "budget_s": self.windows["budget_s"]}

    @property
    def _total_s(self) -> float:
        assert self.total_budget_s is not None  # sized at begin()
        return self.total_budget_s

    def new_pass(self, number: int, iterator: Any) -> None:
        """The script began a pass of loader ``number`` (its ``iter()``): of the training loader, its batches are
        counted anew (a loader with persistent workers hands back the same iterator, reset)."""
        if self.begun and number == self.number:
            self.iterator, self.gap = iterator, True
            self.left = batches_left(self.loader, iterator)

    def serves(self, number: int, iterator: Any) -> bool:
        """Whether this ``next()`` (on ``iterator`` of loader ``number``) gets a segment's batch. Another
        loader's (a validation pass) is the script's own: its time is not measured (module docstring). The end
        (``SystemExit(0)``): the segments did not run, or took their whole budget and more."""
        assert self.start_s is not None
        took_s = self.clock() - self.start_s
        if "absent" in self.results or took_s - self.away_s > self._total_s + self._stretch_s \
                or took_s > HARD_LIMIT_TIMES * (self._total_s + self._stretch_s):
            self.finish("the script left the training loop for too long")
            raise SystemExit(0)
        if number != self.number:
            self.gap = True
            return False
        if iterator is not self.iterator:  # a new pass of the training loader (an epoch counted by its length)
            self.iterator, self.gap = iterator, True
            self.left = batches_left(self.loader, iterator)
        return True

    @property
    def _stretch_s(self) -> float:
        """How far a segment's windows may stretch past its budget for slow batches (``trained_windows``)."""
        return max(TRAINED_FULL_BUDGET_S, float(self.windows.get("full_budget_s", 0.0)),
                   float(self.windows.get("budget_s", 0.0)))

    def next_batch(self) -> Any:
        """The batch for the script's ``next()`` on its training loader (module docstring); ``SystemExit(0)``
        when the segments are done."""
        now_s = self.clock()
        running = self.running
        if self.ended_pass:  # the script was away since its pass ended (a validation pass, the next epoch's start)
            self.ended_pass = False
            self.away_s += now_s - self.last_s
            if running is not None:  # neither the windows' time nor the steps that drain the queue filled meanwhile
                self._skip(running, now_s - self.last_s)
                if running.windows is not None:
                    running.refill = running.segment.num_workers * running.prefetch
        if running is not None and running.handed is not None:
            span_s = now_s - self.last_s
            if self.gap:  # that step spans the script's time away from the loop: not the segment's
                self.away_s += span_s
                # the variant's workers filled their queue meanwhile: the steps that drain it are not measured
                running.refill = running.segment.num_workers * running.prefetch
                self._skip(running, span_s)
            elif running.refill and running.windows is not None:
                running.refill -= 1
                self._skip(running, span_s)
            elif self._step_done(running, now_s):
                self._close(running)
        self.gap = False
        self.last_s = now_s
        if self.left is not None:
            if self.left <= 0:  # the script's pass ends where its own would have: len(loader) batches, no more
                self.ended_pass = True
                raise StopIteration
            self.left -= 1
        while True:
            if self.running is None and not self._open_next():
                self.finish()
                raise SystemExit(0)
            running = self.running
            assert running is not None
            try:
                batch = next(running.iterator)
            except StopIteration:  # an iterable dataset's variant ended: what it measured stands
                self._close(running, ended=True)
                continue
            except Exception as e:  # noqa: BLE001 - a variant that fails (a worker died): said, the script unharmed
                self._close(running, failed=f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
                continue
            if type(batch) is Tagged:  # made by the hooks' timed fetch, as the run's batches were
                batch, record = batch.batch, batch.record
            else:
                record = None
            running.handed = batch_samples(batch, record)
            return batch

    @staticmethod
    def _skip(running: _Running, span_s: float) -> None:
        """The step that just ended is not measured: neither its samples nor its seconds."""
        running.handed = None
        if running.windows is None:  # the start-up spans it: unknown
            running.gapped = True
        else:
            running.windows.skip(span_s)

    def _step_done(self, running: _Running, now_s: float) -> bool:
        """The step on the batch handed out ended at ``now_s``: True when the segment is measured."""
        samples, running.handed = running.handed or 0, None
        if running.windows is None:  # the first step: the workers' start-up
            running.startup_s = None if running.gapped else now_s - running.start_s
            running.windows = trained_windows(self.clock, running.segment.num_workers, running.prefetch,
                                              sync=_sync(self.training_device), **self.windows)
            return False
        return bool(running.windows.step_done(samples))

    def _open_next(self) -> bool:
        """Start the next segment that fits in the budget; False when none is left."""
        while self.plan:
            segment = self.plan.pop(0)
            assert self.start_s is not None and self.loader is not None
            need_s = float(self.windows.get("budget_s", WORKERS_BUDGET_S))
            if self.clock() - self.start_s - self.away_s + need_s > self._total_s:
                if not segment.extra:
                    self._record(segment, {"absent": f"not started: the segments after a run take at most "
                                                     f"{self._total_s:g} s"})
                continue
            start_s = self.clock()
            try:
                if segment.threads != torch.get_num_threads():
                    _set_threads(segment.threads)
                with warnings.catch_warnings():  # torch's about the variant's workers: pipeprof's, not the script's
                    warnings.simplefilter("ignore")
                    variant = self.make_loader(self.loader, segment.num_workers)
                    iterator = variant._get_iterator()  # not iter(): untagged, the hooks pass its next() through
            except Exception as e:  # noqa: BLE001 - a variant that cannot be made: said, the run unharmed
                self._restore_threads()
                self._record(segment, {"absent": f"the variant could not be made: {type(e).__name__}: {e}"})
                continue
            prefetch = int(getattr(variant, "prefetch_factor", None) or DEFAULT_PREFETCH)
            self.running = _Running(segment, iterator, start_s, prefetch)
            return True
        return False

    def _close(self, running: _Running, ended: bool = False, failed: str | None = None,
               cut: str | None = None) -> None:
        """Record the segment (``cut``: why the script ended it), shut its workers down and restore the threads."""
        self.running = None
        extra: dict[str, Any] = {"num_workers": running.segment.num_workers, "threads": torch.get_num_threads(),
                                 "source": "segment of the script's own loop"}
        if running.startup_s is not None:
            extra["startup_s"] = running.startup_s
        if failed is not None:
            entry = {"absent": f"the variant failed: {failed}", **extra}
        elif running.windows is None:
            entry = {"absent": "the variant gave no batch" if ended else "no step ended", **extra}
        else:
            entry = running.windows.result(**extra, warmup_steps=running.windows.warmup + 1,
                                           **({"ended": True} if ended else {}))
        if cut is not None:
            entry["cut"] = cut
        self._record(running.segment, entry)
        shutdown = getattr(running.iterator, "_shutdown_workers", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # noqa: BLE001,S110 - workers already gone: nothing left to shut down
                pass
        self._restore_threads()

    def _record(self, segment: Segment, entry: dict[str, Any]) -> None:
        if segment.key == "train_as_run":
            self.results[segment.key] = entry
        else:
            self.results.setdefault(segment.key, {})[str(segment.num_workers)] = entry

    def _restore_threads(self) -> None:
        if self.threads and torch.get_num_threads() != self.threads:
            _set_threads(self.threads)

    def finish(self, why: str | None = None) -> None:
        """Write the ``A`` event once: the segments measured (the one running, cut where the script left it:
        ``why``), the log unmuted."""
        if self.written or not self.begun:
            return
        self.written = True
        if self.running is not None:
            self._close(self.running, cut=why)
        for segment in self.plan:
            if not segment.extra:
                self._record(segment, {"absent": why or "not started"})
        self.plan = []
        assert self.start_s is not None
        self.results["took_s"] = self.clock() - self.start_s
        self.log.muted = False
        now_s = self.clock()
        self.log.add(("A", now_s, self.results), now_s)


def run_pace(step_ends_s: list[float], warmup: int = WARMUP_STEPS) -> tuple[float | None, float | None]:
    """(training seconds, median seconds a step) of a run from its step ends: the steps after ``warmup`` give
    the step time (all of them where the run had no more); the training spans the first step end to the last,
    plus one step. (None, None) with fewer than two step ends."""
    if len(step_ends_s) < 2:
        return None, None
    gaps = [b - a for a, b in zip(step_ends_s, step_ends_s[1:])]
    counted = gaps[warmup:] or gaps
    step_s = statistics.median(counted)
    return step_ends_s[-1] - step_ends_s[0] + step_s, step_s


def batches_left(loader: Any, iterator: Any) -> int | None:
    """The batches the script's pass ``iterator`` of ``loader`` has yet to hand over: ``len(loader)`` less those
    it yielded (None: a loader without a length, such as an iterable dataset's without ``__len__``)."""
    try:
        return max(len(loader) - int(iterator._num_yielded), 0)
    except (TypeError, AttributeError, NotImplementedError):
        return None


def _set_threads(n: int) -> None:
    """``torch.set_num_threads(n)`` itself: through the wrapper ``--threads`` holds the script's calls with."""
    inspect.unwrap(torch.set_num_threads)(n)


def _sync(index: int | None) -> Callable[[], None] | None:
    """CUDA: the training device (``index``, the hooks': where the batches went, never torch's current one)
    synchronized before a window's end is read (the host runs ahead of it); None on the CPU."""
    if index is None or not torch.cuda.is_initialized():
        return None
    return lambda: torch.cuda.synchronize(index)

