"""What-if probes: short measurements, right after a scenario's run, of the pieces a changed setting runs.

The recommendation model (``analysis.recommend``) composes its predictions
from these where the analytical model was measured wrong (issue 17):

* ``device_loop``: the real training loop (``pipeline.train.train_loop``) over
  the data held on the device and taken by index with a shuffled permutation,
  exactly as ``data.storage = "device"`` runs it (``storage.device.DeviceBatches``):
  the compute ceiling *inside a loop shaped like the real one* (indexing,
  the loop's own bookkeeping and the loss read included), which a training
  step repeated on one batch (``compute_ceiling``) overshoots. The run's own
  on-device data is used where it has some; else random values of the same
  shape (the step's cost does not depend on the values).
* ``loader_alone``: the run's own dataset through a DataLoader with 0 workers,
  iterated with no training: samples/s of the batches the training process
  would make itself (per-sample indexing, decode, transform, collate and the
  loader's bookkeeping: all that ``num_workers = 0`` adds to each step).
  For data read cold the data set's files are dropped from the page cache
  first (``pagecache.drop``, as the run drops them before every epoch: the
  cache is warm after the run, and a probe over it would measure the wrong
  storage), and the entry says ``"cold": true``; absent, with the reason,
  where they cannot be dropped.
* ``ram_loader``: the same over decoded samples cached in RAM (``storage.ram``
  over random values of the data set's shape, with the scenario's transform):
  what ``data.storage = "ram"`` makes per sample. For a run already in RAM
  the ``loader_alone`` probe is that measurement and this one is not made.
* ``loader_workers``: the run's own dataset through a DataLoader with ``k``
  workers (the run's batch size, multiprocessing context and prefetch factor),
  iterated with no training, for each ``k`` in
  ``workers_to_probe`` (the run's ``k + 1`` and ``k - 1 >= 1`` first, then
  the others up to ``2 x cores`` while the budget lasts): per ``k`` the
  samples/s (``samples_per_s_per_window``), the training process's own CPU
  seconds per sample spent receiving a batch (``time.thread_time`` of the
  main thread across ``next()``: unpickling, the shared-memory handover;
  ``receive_cpu_s_per_sample_per_window``) and the workers' CPU seconds per
  sample (their processes' user + system time, ``worker_cpu_s_per_sample``),
  all after the first batches; the workers' start-up (``iter()`` to the
  first batch) is recorded as ``startup_s``. The workers are shut down before
  the next ``k`` (none left: the test checks). For data read cold, each ``k``
  reads it cold as ``loader_alone`` does (the files dropped before it): how
  the storage serves ``k`` concurrent readers is measured, not assumed to
  scale with ``k`` (memmap-cold at 2 workers from 1: predicted +91% when the
  cold reads were scaled with the workers, measured +40%).
* ``train_workers``: the real training loop (as ``device_loop`` runs it)
  fed by a DataLoader with ``k`` workers over the run's own dataset (the
  run's batch size, context, prefetch factor and pinned memory), for the
  run's ``k + 1`` and ``k - 1`` (0 too, but for data read cold), then
  more while the budget lasts (``measure.probe_plan``, the plan a script's
  segments follow too), at the run's torch threads: per
  window the loop's samples/s and its compute's (``compute_samples_per_s``:
  ``n / Σ(compute + h2d)``, the seconds from a batch's arrival to its step's
  end), after the first step (the workers' start-up, ``startup_s``) and
  warm-up. It measures what the k-worker loader alone cannot: what compute
  keeps beside workers handing batches over. Compute beside a worker slows
  even where the worker has a core of its own: jpeg-decode at 1 thread and 1
  worker computed at 5,750-6,470 samples/s where the loop alone made
  7,882-8,425, and plain_loop's compute fell from 28k to 18-20k beside a
  worker busy at most 0.22 of a core; a stall formula on the workers' CPU
  (``exp(STALL·over)``) cannot see it, with ``over = 0`` there. Cold data
  is read cold, as ``loader_workers`` reads it. Its warm-up also takes the
  ``k × prefetch_factor`` batches the loader asks for at ``iter()`` (they
  may wait ready while the loop's first steps run slow), and its budget
  stretches for slow batches, up to ``TRAINED_FULL_BUDGET_S``, until the
  warm-up and every window have their batches: with 0.35 s and one warm-up
  step, augment-heavy's loop fed by 1 worker at 2 threads kept a single
  window of 3 batches at 3,342 samples/s, a queue drained, where three runs
  made 1,608-1,677 (its prediction +107%).
* ``train_as_run``: the same loop at the run's own settings (0 workers: the
  training process makes its batches itself, at the run's torch threads),
  for a run with 0 workers whose data is not read cold: the as-run loop a
  measured prediction reads each probe against (``analysis.prediction``). A neighbour's
  burst of work or the process's state after the run can slow every probe
  of a run alike: quick's probes all read 13-21% below the fresh runs of
  the changes they measured (its device loop 10,070 samples/s where three
  runs on the device made 12,505-12,756, and slower than the 0-worker run
  itself, 10,525). With workers it is not measured (their batches come in
  bursts: jpeg-decode's 0.1 s windows at 1 worker read 4,791, 2,337 and
  2,536 around runs of 3,385-3,516); for data on the device ``device_loop``
  is the run's own loop already.
* ``train_ram_workers``: the same loop fed by the run's own ``k`` workers
  over decoded samples in RAM (``ram_loader``'s data set), for a run with
  workers whose data is on disk: what ``data.storage = "ram"`` runs.
* ``train_threads``: the same loop fed by the run's own ``k`` workers at
  the other number of torch threads (``device_loop_threads``' ``threads``),
  for a run with workers training on the CPU: what ``train.threads`` runs.
* ``device_loop_threads``: ``device_loop`` again at the number of torch
  threads a ``train.threads`` change goes to (CPU training): 1 where the run
  had more, the usable cores where it had 1 (the entry's ``threads``): what
  compute keeps with fewer threads or gains with more (measured, not
  assumed in proportion: the loop at 2 threads against 1 measured x1.4,
  median of 202 runs on these 2 shared cores, most within x1.2-1.7, not 2).

``device_loop`` runs twice: first, and again after the loader probes, just
before the threads probe; its entry holds both parts' windows
(``parts: 2``), their median its ``samples_per_s``. On these 2 shared cores
the loop's rate drifts by ±15-20% over a second or two within one process
(a neighbour's work takes a core), and one part's 0.3 s read 23,085 where
the runs measured 17-18k: windows spread over the probes' 2-3 s weigh
that drift as a run of a few seconds does.

The loader probes read their samples as the run's loader does
(``as_the_run_reads``): through the run's own timed dataset and collate
where it recorded its loading (``profile.loading``; the probes' records are
dropped with their batches), so a sample costs them what it cost the run.
With PyTorch's plain dataset and collate the 0-worker probe read quick at
3.8-6.2 µs a sample where the runs' own 0-worker waits were 7.4-9.2 µs, and
the predictions to 0 workers from a run with workers were that much high
(quick 1 -> 0 workers: +24%, then -3% in the next yardstick invocation with
the timed probes).

Each probe runs ``windows`` time-bounded windows of at least ``window_s``
(a window ends at the first step end after that; a k-worker probe's window
also holds at least k + 1 batches: k workers hand batches over in bursts,
and augment-heavy's windows of 0.1 s had held 1-3 batches of 128, a burst or
a gap rather than the rate), after ``warmup`` steps,
within ``budget_s`` (all the probes within ``TOTAL_BUDGET_S``: one that
could not end within it is absent, saying so; the page-cache drops before
cold probes are left out of that budget, as the cold run's own cost, and kept
as ``drop_s`` per probe and ``drops_s`` in all); its entry keeps every window's rate
(``samples_per_s_per_window``, contract 4 of issue 17: the intervals
resample them) and their median as ``samples_per_s``. On CUDA the device is
synchronized before a window's end is read. Times come from the injected
clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader

from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.cuda_device import device_sync
from pipeprof.measure.environment import usable_cores
from pipeprof.measure.loading import TimedCollate, TimedDataset
from pipeprof.measure.probe_plan import probe_plan
from pipeprof.measure.steps import ThroughputTimer
from pipeprof.measure.windows import (  # noqa: F401 (re-exported)
    BUDGET_S,
    DEFAULT_PREFETCH,
    TOTAL_BUDGET_S,
    TRAINED_FULL_BUDGET_S,
    WARMUP_STEPS,
    WINDOW_S,
    WINDOWS,
    WORKERS_BUDGET_S,
    Windows,
    trained_windows,
)
from pipeprof.storage.device import DeviceBatches, DeviceDataset
from pipeprof.storage.pagecache import drop
from pipeprof.storage.ram import RamDataset
from pipeprof.storage.synthetic import FEATURES

PROBE_MAX_SAMPLES = 20_000  # random stand-in data: enough rows (61 MB) that indexing is not served from a cache


def device_batches(work: Any, max_samples: int = PROBE_MAX_SAMPLES) -> Iterable:
    """The batches ``data.storage = "device"`` would give this workload: its own when it has them."""
    batches = work.data.batches
    if isinstance(batches, DeviceBatches):
        return batches
    x, labels = _stand_in(work, max_samples)
    dataset = DeviceDataset(x.to(work.device), labels, getattr(work.data.dataset, "transform", None))
    return DeviceBatches(dataset, work.scenario.loader, work.scenario.data.seed)


def _stand_in(work: Any, max_samples: int) -> tuple[torch.Tensor, np.ndarray]:
    """Random samples and labels of the data set's shape (at most ``max_samples``, at least one batch)."""
    spec = work.scenario.data
    n = max(min(int(spec.samples), max_samples), work.scenario.loader.batch_size)
    x = torch.rand(n, FEATURES, generator=torch.Generator().manual_seed(spec.seed))
    return x, np.random.default_rng(spec.seed).integers(0, 10, n)


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for a probe, given back after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def device_loop(work: Any, loop: Callable[..., None], clock: Clock = monotonic_clock, *,
                batches: Iterable | None = None, threads: int | None = None, **windows: Any) -> dict[str, Any]:
    """Samples/s of ``loop`` (``train_loop``) over on-device batches taken by a shuffled index (module docstring).

    ``loop(work, total_steps, timer, stop_after=...)``: the runner's training loop; the probe's workload is
    ``work`` with its batches replaced by ``batches`` (default ``device_batches(work)``). ``threads``: torch's
    intra-op threads for the probe (restored after it).
    """
    if threads is not None:
        with torch_threads(threads):
            return {**device_loop(work, loop, clock, batches=batches, **windows), "threads": threads}
    batches = device_batches(work) if batches is None else batches
    data = dataclasses.replace(work.data, batches=batches)
    probe = dataclasses.replace(work, data=data)
    sync = device_sync(work.device)
    win = Windows(clock, sync=sync, **windows)
    with work.rank.solo() if work.rank is not None else contextlib.nullcontext():
        loop(probe, 1_000_000, ThroughputTimer(clock), stop_after=lambda i, samples: win.step_done(samples))
    return win.result(batch_size=work.scenario.loader.batch_size, threads=torch.get_num_threads())


def loader_alone(dataset: Any, batch_size: int, clock: Clock = monotonic_clock, *, seed: int = 0,
                 collate: Any = None, **windows: Any) -> dict[str, Any]:
    """Samples/s of a DataLoader with 0 workers over ``dataset``, iterated with no training (module docstring);
    ``collate``: its collate_fn (default PyTorch's)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=0, collate_fn=collate,
                        generator=torch.Generator().manual_seed(seed))
    win = Windows(clock, **windows)
    done = False
    while not done:
        for batch in loader:
            if win.step_done(len(batch[1])):
                done = True
                break
    return win.result(num_workers=0, batch_size=batch_size)


def workers_to_probe(k: int, cores: int) -> list[int]:
    """The numbers of workers the loader_workers probe measures, in order: k + 1, k - 1 (>= 1), then the rest
    of 1 .. max(2 x cores, k + 1) nearest the run's k first."""
    top = max(2 * cores, k + 1)
    first = [n for n in (k + 1, k - 1) if 1 <= n <= top]
    rest = sorted((n for n in range(1, top + 1) if n not in first and n != k), key=lambda n: (abs(n - k), n))
    return first + rest


def as_run_probe(k: int, cold: bool, probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``train_as_run``: the run's own loop at its own settings, the probes' pace (module docstring), where its
    batches come steadily: a run with 0 workers whose data is not read cold (``probe()``), else absent with
    the reason."""
    if k:
        return {"absent": f"the run had {k} worker{'s' if k > 1 else ''}: their batches come in bursts, which a "
                          "probe of a third of a second reads as a burst or a gap, not the run's pace"}
    if cold:
        return {"absent": "the data is read cold: a short probe right after the page-cache drop reads every page "
                          "cold, where the run's pass warmed them as it went"}
    return probe()


def _cpu_s(processes: list[Any]) -> float:
    """User + system CPU seconds of these worker processes (0 for one already gone)."""
    total = 0.0
    for proc in processes:
        with contextlib.suppress(psutil.Error, ValueError):
            times = psutil.Process(proc.pid).cpu_times()
            total += times.user + times.system
    return total


@contextlib.contextmanager
def _many_workers_expected() -> Iterator[None]:
    """PyTorch's warning of more workers than cores silenced: that is what the probe measures, not a mistake."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        yield


def loader_workers(dataset: Any, batch_size: int, k: int, clock: Clock = monotonic_clock, *, seed: int = 0,
                   context: Any = None, prefetch: int | None = None, collate: Any = None,
                   thread_clock: Callable[[], float] = time.thread_time, **windows: Any) -> dict[str, Any]:
    """A DataLoader with ``k`` workers over ``dataset``, iterated with no training (module docstring):
    samples/s, the main thread's CPU per sample receiving, the workers' CPU per sample, their start-up."""
    assert k >= 1
    kwargs: dict[str, Any] = {"multiprocessing_context": context, "collate_fn": collate}
    if prefetch is not None:
        kwargs["prefetch_factor"] = prefetch
    start_s = clock()
    with _many_workers_expected():
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=k,
                            generator=torch.Generator().manual_seed(seed), **kwargs)
        it: Any = iter(loader)
    try:
        batch = next(it)
        startup_s = clock() - start_s
        workers = list(getattr(it, "_workers", []))
        win = Windows(clock, **{"budget_s": WORKERS_BUDGET_S, "min_steps": k + 1, **windows})
        receive: list[float] = []
        worker_cpu: list[float] = []
        window_receive_s, window_samples, cpu_at = 0.0, 0, None
        done = win.step_done(len(batch[1]))  # the first batch is the first warm-up step
        if win.warmup <= 1:
            cpu_at = _cpu_s(workers)
        while not done:
            before = thread_clock()
            try:
                batch = next(it)
            except StopIteration:
                with _many_workers_expected():
                    it = iter(loader)  # another pass (its workers start anew: rare, the probe is short)
                workers = list(getattr(it, "_workers", []))
                cpu_at = 0.0 if cpu_at is not None else None  # the new workers' CPU counts from 0
                continue
            took = thread_clock() - before
            closed = len(win.rates)
            counting = win.steps >= win.warmup  # this batch falls in a window
            done = win.step_done(len(batch[1]))
            if counting:
                window_receive_s += took
                window_samples += len(batch[1])
            if cpu_at is None and win.steps >= win.warmup:
                cpu_at = _cpu_s(workers)  # the windows open now
                continue
            if len(win.rates) > closed:  # a window closed with this batch
                receive.append(window_receive_s / window_samples if window_samples else 0.0)
                now = _cpu_s(workers)
                worker_cpu.append((now - (cpu_at or now)) / window_samples if window_samples else 0.0)
                cpu_at, window_receive_s, window_samples = now, 0.0, 0
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
    out = win.result(num_workers=k, batch_size=batch_size, startup_s=startup_s)
    if receive:
        out.update(receive_cpu_s_per_sample=statistics.median(receive),
                   receive_cpu_s_per_sample_per_window=receive,
                   worker_cpu_s_per_sample=statistics.median(worker_cpu),
                   worker_cpu_s_per_sample_per_window=worker_cpu)
    return out


class ComputeTimer:
    """The training loop's marks (``StepTimer``'s interface) summing what ``C = n / Σ(compute + h2d)`` needs:
    seconds from a batch's arrival (``waited``) to its step's end (``computed``) and their samples, read and
    zeroed per window by ``take``. Host time: on CUDA the step's end is queued, not done (``train_workers``
    keeps no compute rate there rather than synchronize every step, which would stop the loop fetching the
    next batch while the device computes)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.busy_s, self.samples = 0.0, 0
        self._arrived_s = 0.0

    def begin(self, ready_batches: float = float("nan")) -> None:
        pass

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def waited(self) -> None:
        self._arrived_s = self.clock()

    def copied(self) -> None:
        pass

    def computed(self, samples: int, loss: Any, correct: Any, epoch: int = 0) -> None:
        self.busy_s += self.clock() - self._arrived_s
        self.samples += samples

    def finish(self) -> None:
        pass

    def take(self) -> float | None:
        """Samples/s of compute since the last ``take`` (None where no step was timed), then zeroed."""
        rate = self.samples / self.busy_s if self.busy_s > 0 and self.samples else None
        self.busy_s, self.samples = 0.0, 0
        return rate


def train_workers(work: Any, loop: Callable[..., None], dataset: Any, k: int, clock: Clock = monotonic_clock, *,
                  context: Any = None, prefetch: int | None = None, collate: Any = None, threads: int | None = None,
                  **windows: Any) -> dict[str, Any]:
    """The real training loop (``loop``, as ``device_loop`` runs it) fed by a ``k``-worker DataLoader over
    ``dataset`` (module docstring, ``train_workers``): per window its samples/s and its compute's samples/s
    (``n / Σ(compute + h2d)``: the compute ceiling *beside* k workers handing batches over; CPU training
    only, ``ComputeTimer``), after the first steps (the workers' start-up, kept as ``startup_s``, and
    warm-up); the workers shut down after. ``k = 0``: the training process makes its batches itself (no
    context, no prefetch). ``threads``: torch's intra-op threads for the probe (restored after it)."""
    if threads is not None:
        with torch_threads(threads):
            return train_workers(work, loop, dataset, k, clock, context=context, prefetch=prefetch,
                                 collate=collate, **windows)
    kwargs: dict[str, Any] = {"collate_fn": collate, "pin_memory": work.data.pin_memory}
    if k:
        kwargs["multiprocessing_context"] = context
        if prefetch is not None:
            kwargs["prefetch_factor"] = prefetch
    with _many_workers_expected():
        loader = DataLoader(dataset, batch_size=work.scenario.loader.batch_size, shuffle=True, num_workers=k,
                            generator=torch.Generator().manual_seed(work.scenario.data.seed), **kwargs)
    sync = device_sync(work.device)
    timer = ComputeTimer(clock)
    start_s = clock()
    found: dict[str, Any] = {}
    compute: list[float] = []

    def stop_after(i: int, samples: int) -> bool:
        if "win" not in found:  # the first step: the workers' start-up
            found["startup_s"] = clock() - start_s
            found["win"] = trained_windows(clock, k, prefetch, sync=sync, **windows)
            timer.take()
            return False
        win = found["win"]
        closed = len(win.rates)
        counting = win.steps >= win.warmup
        done = bool(win.step_done(samples))
        if not counting:
            timer.take()  # the warm-up's steps are not the window's
        elif len(win.rates) > closed:
            rate = timer.take()
            if rate is not None:
                compute.append(rate)
        return done

    data = dataclasses.replace(work.data, batches=loader)
    probe = dataclasses.replace(work, data=data)
    with _many_workers_expected(), work.rank.solo() if work.rank is not None else contextlib.nullcontext():
        loop(probe, 1_000_000, timer, stop_after=stop_after)
    win = found.get("win")
    if win is None:
        return {"absent": "the loader gave no batch", "num_workers": k, "took_s": clock() - start_s}
    out = win.result(num_workers=k, batch_size=work.scenario.loader.batch_size, threads=torch.get_num_threads(),
                     startup_s=found["startup_s"], warmup_steps=win.warmup + 1)
    if compute and sync is None and out.get("absent") is None:
        out.update(compute_samples_per_s=statistics.median(compute), compute_samples_per_s_per_window=compute)
    return out


def as_the_run_reads(work: Any, dataset: Any) -> tuple[Any, Any]:
    """(dataset, collate_fn) for a loader probe over ``dataset``: timed as the run's loader timed its samples
    (its ``TimedDataset``'s clocks and key, its ``TimedCollate``) where it recorded its loading, so a sample
    costs the probe what it cost the run (module docstring); as given, with PyTorch's collate, where not."""
    batches = work.data.batches
    timed = getattr(batches, "dataset", None)
    collate = getattr(batches, "collate_fn", None)
    if not isinstance(timed, TimedDataset) or not isinstance(collate, TimedCollate):
        return dataset, None
    return TimedDataset(dataset, timed.clock, timed.key, timed.run_queue, timed.cpu_clock), collate


def both_parts(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One probe's entry from its two parts (``device_loop`` before and after the loader probes): every window of
    both, their median, the seconds of both; the first alone where the second is absent."""
    if second.get("absent") is not None or first.get("absent") is not None:
        return first if first.get("absent") is None else second
    rates = [*first["samples_per_s_per_window"], *second["samples_per_s_per_window"]]
    return {**first, "samples_per_s": statistics.median(rates), "samples_per_s_per_window": rates,
            "steps_per_window": [*first["steps_per_window"], *second["steps_per_window"]],
            "took_s": first["took_s"] + second["took_s"], "cut_short": first["cut_short"] or second["cut_short"],
            "parts": 2}


def ram_dataset(work: Any, max_samples: int = PROBE_MAX_SAMPLES) -> RamDataset:
    """Decoded samples in RAM as ``storage.ram`` holds them (random values of the data set's shape)."""
    x, labels = _stand_in(work, max_samples)
    return RamDataset(x, labels, getattr(work.data.dataset, "transform", None))


def read_cold(dataset: Any, probe: Callable[[], dict[str, Any]], clock: Clock = monotonic_clock) -> dict[str, Any]:
    """``probe`` over ``dataset`` read cold: its files dropped from the page cache first (this process's own
    map closed, as the run does before each epoch, and again after: nothing stays mapped), the drop's seconds
    kept as ``drop_s``; absent with the reason where they could not be dropped."""
    dataset.close()
    start_s = clock()
    result = drop(dataset.paths())
    drop_s = clock() - start_s
    if not result.dropped:
        return {"absent": f"the data is read cold and its page cache could not be dropped: {result.reason}",
                "drop_s": drop_s}
    try:
        return {**probe(), "cold": True, "drop_s": drop_s}
    finally:
        dataset.close()


def measure_what_ifs(work: Any, loop: Callable[..., None], clock: Clock = monotonic_clock, *,
                     total_budget_s: float = TOTAL_BUDGET_S, wanted: int | None = None,
                     **windows: Any) -> dict[str, Any]:
    """run.json's ``what_ifs``: the probes of the module docstring, each an entry or ``{"absent": reason}``;
    ``total_budget_s`` and ``windows`` from ``measure.windows.probes_budget`` (the run's step time); ``wanted``:
    the workers the run's step says would feed its compute, probed first of the extras (``probe_plan``)."""
    spec, batch = work.scenario.data, work.scenario.loader.batch_size
    start_s = clock()
    budget_s = float(windows.get("budget_s", BUDGET_S))

    dropping_s: list[float] = []  # the cold probes' page-cache drops: the cold run's own cost, not the budget's

    def spent_s() -> float:
        return clock() - start_s - sum(dropping_s)

    def started(probe: Callable[[], dict[str, Any]], need_s: float = budget_s) -> dict[str, Any]:
        """``probe()``, or absent where ``need_s`` more would overrun the probes' total budget."""
        if spent_s() + need_s > total_budget_s:
            return {"absent": f"not started: the probes after a run take at most {total_budget_s:g} s"}
        return probe()

    on_device = device_batches(work)
    out: dict[str, Any] = {"device_loop": device_loop(work, loop, clock, batches=on_device, **windows)}
    dataset = work.data.dataset

    def storage(probe: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        """A probe of the run's own storage: read cold where the run read it cold."""
        if spec.cache != "cold":
            return probe

        def cold() -> dict[str, Any]:
            entry = read_cold(dataset, probe, clock)
            dropping_s.append(entry["drop_s"])
            return entry

        return cold

    read, collate = as_the_run_reads(work, dataset)

    @functools.cache
    def ram_read() -> Any:
        """Decoded samples in RAM, read as the run reads (made once: the RAM loader and the loop trained on it)."""
        return as_the_run_reads(work, ram_dataset(work))[0]

    if spec.storage == "device":
        out["loader_alone"] = {"absent": "the data is on the device: no loader"}
    else:
        out["loader_alone"] = started(storage(lambda: loader_alone(read, batch, clock, seed=spec.seed,
                                                                   collate=collate, **windows)))
    if spec.storage in ("ram", "device"):
        out["ram_loader"] = {"absent": f"the data is already {'in RAM' if spec.storage == 'ram' else 'on the device'}"
                                       + (": loader_alone measures it" if spec.storage == "ram" else "")}
    else:
        out["ram_loader"] = started(lambda: loader_alone(ram_read(), batch, clock, seed=spec.seed, collate=collate,
                                                         **windows))
    workers_probe = None
    cold = spec.cache == "cold"
    threads = torch.get_num_threads()
    # the trained probes follow the plan a script's segments follow (measure.probe_plan)
    variants = probe_plan(int(work.scenario.loader.num_workers or 0), threads, usable_cores(), cold=cold,
                          cpu=work.device.type == "cpu", wanted=wanted)
    if out["loader_alone"].get("absent") is not None:
        out["loader_workers"] = {"absent": out["loader_alone"]["absent"]}
        out["train_as_run"] = {"absent": "the data is on the device: device_loop is the run's own loop"
                               if spec.storage == "device" else out["loader_alone"]["absent"]}
    else:
        k = int(work.scenario.loader.num_workers or 0)
        probe_ks = workers_to_probe(k, usable_cores())
        context = getattr(work.data.batches, "multiprocessing_context", None)
        prefetch = work.scenario.loader.prefetch_factor
        wbudget = float(windows.get("budget_s", WORKERS_BUDGET_S))

        def one(n: int) -> dict[str, Any]:
            return started(storage(lambda: loader_workers(read, batch, n, clock, seed=spec.seed, context=context,
                                                          prefetch=prefetch, collate=collate,
                                                          **{"budget_s": WORKERS_BUDGET_S, **windows})), wbudget)

        def trained(n: int) -> dict[str, Any]:
            return started(storage(lambda: train_workers(work, loop, read, n, clock, context=context,
                                                         prefetch=prefetch, collate=collate, **windows)), wbudget)

        # the plan's order: the as-run loop first (every measured prediction is read against it), then the
        # changed loops; the loader alone with k workers after them (recorded; no prediction reads it)
        out["train_as_run"] = as_run_probe(k, cold, lambda: started(
            lambda: train_workers(work, loop, read, 0, clock, collate=collate, **windows), wbudget))
        out["train_workers"] = {str(v.num_workers): trained(v.num_workers) for v in variants
                                if v.key == "train_workers" and not v.extra}
        workers_probe = {str(n): one(n) for n in probe_ks[:2]}
        out["loader_workers"] = workers_probe
        if k >= 1 and spec.storage not in ("ram", "device"):
            out["train_ram_workers"] = {str(k): started(lambda: train_workers(
                work, loop, ram_read(), k, clock, context=context, prefetch=prefetch, collate=collate, **windows),
                wbudget)}
    # The device loop again, its windows spread over the probes' time (module docstring).
    again = started(lambda: device_loop(work, loop, clock, batches=on_device, **windows))
    out["device_loop"] = both_parts(out["device_loop"], again)
    # Last: only the threads changes need it, and a run's budget goes first to what more changes use.
    other = 1 if threads > 1 else usable_cores()  # the threads a train.threads change goes to
    if work.device.type != "cpu":
        out["device_loop_threads"] = {"absent": f"training on {work.device.type}: its compute does not run on the "
                                                "CPU threads"}
    elif other == threads:
        out["device_loop_threads"] = {"absent": "1 torch thread on 1 usable core: no other number of threads"}
    else:
        out["device_loop_threads"] = started(lambda: device_loop(work, loop, clock, batches=on_device,
                                                                 threads=other, **windows))
    if workers_probe is not None:
        for v in variants:
            if v.key == "train_threads":  # the run's own workers beside the other number of threads
                out["train_threads"] = {str(v.num_workers): started(storage(functools.partial(
                    train_workers, work, loop, read, v.num_workers, clock, context=context, prefetch=prefetch,
                    collate=collate, threads=v.threads, **windows)), wbudget)}
        for v in variants:  # more numbers of workers while the budget lasts
            if not v.extra:
                continue
            entry = trained(v.num_workers)
            if entry.get("absent") is not None:
                break
            out["train_workers"][str(v.num_workers)] = entry
    out["took_s"] = clock() - start_s
    if dropping_s:
        out["drops_s"] = sum(dropping_s)
    return out
