"""Step timing: each training step split into data wait, host-to-device copy and compute.

The training loop marks four moments per step::

    timer.begin()                 # before next() on the loader
    batch = next(it)
    timer.waited()                # the batch is in hand
    x, y = x.to(device), ...
    timer.copied()                # the copy is issued
    loss, correct = step(x, y)
    timer.computed(samples, loss, correct, epoch)
    ...
    timer.finish()                # after the last step

On the CPU every phase is synchronous, so host clock differences are the
truth: ``step_s`` runs from one ``begin()`` to the next (so the loop's own
bookkeeping lands in "other"), and the phases are the gaps between marks.

On CUDA the host runs ahead of the device, so host clocks would hand the
device's compute to whatever the host does next (usually waiting for the
next batch). Device events are recorded at ``waited``/``copied``/``computed``
and resolved lazily, never with a host synchronisation during the counted
steps: a step becomes a row once its last event has completed (``query()``),
its loss and accuracy copied to pinned host memory without blocking
(``.item()`` on a CUDA tensor would wait for the whole queue); the rest wait
for the run's end. A device error (a sticky CUDA error) leaves the steps not
yet resolved on the host clock, said in ``timing()``, never lost:

* ``h2d_s`` and ``compute_s`` are event spans on the device;
* ``step_s`` runs from the previous step's compute-end event to this one's;
* the device sat idle between the previous compute end and this step's copy
  start; of that gap, the part the host spent blocked in ``next()`` is
  ``data_wait_s`` and the rest falls to "other". The raw host time blocked
  in ``next()`` is kept as ``host_wait_s``.

``collective_wait``, when given, returns the seconds the step's compute spent
blocked in collectives since its last call (``workload.distributed``: DDP's
gradient all-reduce); the timer reads it at ``computed()`` and moves it from
``compute_s`` to ``collective_wait_s``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pipeprof.measure.clock import Clock
from pipeprof.measure.spool import Spool
from pipeprof.run_folder import STEP_COLUMNS

if TYPE_CHECKING:
    from typing_extensions import Self


class DeviceEvent(Protocol):
    """What pipeprof needs of ``torch.cuda.Event(enable_timing=True)``."""

    def record(self) -> None: ...

    # ms to ``end``, an event of the same kind (torch's Event takes an Event, not any DeviceEvent)
    def elapsed_time(self, end: Self, /) -> float: ...

    def synchronize(self) -> None: ...

    def query(self) -> bool: ...


EventFactory = Callable[[], DeviceEvent]
CPU_TIMING = "training on the CPU: every phase is synchronous, so the host clock is the truth"


@dataclass
class _Pending:
    epoch: int
    begin_s: float
    waited_s: float
    copied_s: float
    computed_s: float
    samples: int
    loss: Any  # a tensor (resolved lazily) or a float
    correct: Any
    events: tuple[DeviceEvent, DeviceEvent, DeviceEvent] | None = None
    excluded_s: float = 0.0  # paused while waiting for data (e.g. dropping the page cache)
    ready_batches: float = float("nan")  # prefetched batches waiting when the step asked for one
    collective_s: float = 0.0  # blocked in collectives inside the compute span


def _value(x: Any) -> float:
    return float(x.item()) if hasattr(x, "item") else float(x)


def _to_host(x: Any) -> Any:
    """A CUDA tensor copied to pinned host memory without blocking (torch pins the output of a non_blocking
    device-to-host copy); anything else as it is."""
    if getattr(x, "is_cuda", False):
        return x.detach().to("cpu", non_blocking=True)
    return x


def _done(event: DeviceEvent) -> bool:
    """Whether the device has reached ``event`` (never waits); a failing device reads as done: the drain says."""
    try:
        return bool(event.query())
    except (RuntimeError, ValueError):
        return True


@dataclass
class StepTimer:
    """Records one row per step; ``rows()`` resolves them (see module docstring)."""

    clock: Clock
    t0_s: float
    warmup_steps: int = 0
    device_events: EventFactory | None = None
    collective_wait: Callable[[], float] | None = None  # seconds blocked in collectives since its last call
    _pending: list[_Pending] = field(default_factory=list)
    _marks: list[float] = field(default_factory=list)
    _events: list[DeviceEvent] = field(default_factory=list)
    _end_s: float | None = None
    _excluded_s: float = 0.0
    _paused_at_s: float | None = None
    _ready_batches: float = float("nan")
    # Where finished rows go (a file-backed one streams a long run to disk).
    spool: Spool = field(default_factory=lambda: Spool(STEP_COLUMNS))
    keep_steps: int = 256  # unfinished steps held back before rows are made (their successors' begin is needed)
    _previous: _Pending | None = None  # the last step already turned into a row (its end event times the next)
    _first: int = 0  # the step number of _pending[0]
    device_error: str | None = None  # the device failed while steps were resolved: they keep host times
    _host_rows: int = 0  # rows with device events left on the host clock by device_error

    @property
    def method(self) -> str:
        return "cuda-events" if self.device_events else "host-clock"

    def timing(self) -> dict[str, Any]:
        """run.json's ``timing``: the clock of the whole and of each part, and why not the device's, when not."""
        method, reason = self.method, None if self.device_events else CPU_TIMING
        if self._host_rows:
            method = "mixed" if self._host_rows < self.steps else "host-clock"
            reason = (f"the device failed ({self.device_error}): {self._host_rows} of {self.steps} steps are "
                      f"timed on the host clock and their loss is unknown")
        return {"method": method, "parts": dict.fromkeys(("data_wait", "h2d", "compute"), method),
                "reason": reason}

    def begin(self, ready_batches: float = float("nan")) -> None:
        """A step starts; ``ready_batches``: prefetched batches waiting (see ``measure.prefetch``)."""
        self._marks = [self.clock()]
        self._events = []
        self._excluded_s = 0.0
        self._ready_batches = ready_batches

    def pause(self) -> None:
        """Stop the clock inside a step's wait for work that is no part of training.

        The page-cache drop of a cold-cache scenario is such work: the time
        between ``pause()`` and ``resume()`` is taken out of the step's data
        wait and of the step.
        """
        self._paused_at_s = self.clock()

    def resume(self) -> None:
        if self._paused_at_s is None:
            raise RuntimeError("StepTimer.resume() without pause()")
        self._excluded_s += self.clock() - self._paused_at_s
        self._paused_at_s = None

    def waited(self) -> None:
        self._marks.append(self.clock())
        self._record_event()

    def copied(self) -> None:
        self._marks.append(self.clock())
        self._record_event()

    def computed(self, samples: int, loss: Any, correct: Any, epoch: int = 0) -> None:
        if self.device_events:  # copied before the step's last event: ready when it is
            loss, correct = _to_host(loss), _to_host(correct)
        self._record_event()
        begin, waited, copied = self._marks
        events: tuple[DeviceEvent, DeviceEvent, DeviceEvent] | None = None
        if self.device_events:
            start, copy_done, compute_done = self._events  # one per mark: waited, copied, computed
            events = (start, copy_done, compute_done)
        computed = self.clock()
        collective_s = self.collective_wait() if self.collective_wait is not None else 0.0
        collective_s = min(max(collective_s, 0.0), max(computed - copied, 0.0))  # inside the compute span
        self._pending.append(_Pending(epoch, begin, waited, copied, computed, samples, loss, correct, events,
                                      self._excluded_s, self._ready_batches, collective_s))
        if len(self._pending) > 2 * self.keep_steps:
            count = len(self._pending) - self.keep_steps
            events = self._pending[count - 1].events
            if events is None or _done(events[2]):  # else the device is behind: try again next step
                self._drain(count)

    def settle(self) -> None:
        """Turn the steps held back into rows now, all but the last (its end is the next step's begin); on a
        device only once the newest of them is done (a query, never a wait: else at a later call). For a run
        whose rows stream to disk as it goes (``pipeline.recording``), between steps, outside their parts."""
        count = len(self._pending) - 1
        if count > 0:
            events = self._pending[count - 1].events
            if events is None or _done(events[2]):
                self._drain(count)

    def finish(self) -> None:
        """Close the last step (its ``step_s`` ends here)."""
        self._end_s = self.clock()

    def _record_event(self) -> None:
        if self.device_events:
            event = self.device_events()
            event.record()
            self._events.append(event)

    @property
    def steps(self) -> int:
        return self._first + len(self._pending)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per step with the columns of ``run.STEP_COLUMNS`` (the run is over: every step is made a row)."""
        self._drain(len(self._pending))
        return self.spool.rows()

    def flush(self) -> None:
        """The run is over (after ``finish()``): every step made a row and written to the spool's file, so that
        a run recorded as it goes (``pipeline.recording``) keeps its last steps if its save then fails."""
        self._drain(len(self._pending))
        self.spool.flush()

    def frame(self) -> Any:
        """The steps table (a DataFrame); like ``rows()``, for the end of the run."""
        self._drain(len(self._pending))
        return self.spool.frame()

    def _drain(self, count: int) -> None:
        """Turn the oldest ``count`` pending steps into rows (the last one ends at ``finish()`` if it is the last)."""
        pending = self._pending
        if not count:
            return
        last_events = pending[count - 1].events
        if last_events and self.device_error is None:
            try:
                if not last_events[2].query():
                    last_events[2].synchronize()  # done already unless the run is over: every earlier one is too
            except (RuntimeError, ValueError) as e:  # a sticky CUDA error: the steps stay, on the host clock
                self.device_error = " ".join(str(e).split())
        for i in range(count):
            p = pending[i]
            if i + 1 < len(pending):
                end_s = pending[i + 1].begin_s
            else:
                end_s = self._end_s if self._end_s is not None else p.computed_s
            host_wait_s = p.waited_s - p.begin_s - p.excluded_s
            step = self._first + i
            row = {
                "step": step,
                "epoch": p.epoch,
                "warmup": step < self.warmup_steps,
                "t_start_s": p.begin_s - self.t0_s,
                "data_wait_s": host_wait_s,
                "h2d_s": p.copied_s - p.waited_s,
                "compute_s": p.computed_s - p.copied_s - p.collective_s,
                "step_s": end_s - p.begin_s - p.excluded_s,
                "host_wait_s": host_wait_s,
                "samples": p.samples,
                "loss": _value(p.loss) if not (p.events and self.device_error) else float("nan"),
                "correct": _value(p.correct) if not (p.events and self.device_error) else float("nan"),
                "ready_batches": p.ready_batches,
                "collective_wait_s": p.collective_s,
            }
            if p.events:
                # After a pause the device's idle gap holds untimed work: time such a step like the first.
                previous = (pending[i - 1] if i else self._previous) if not p.excluded_s else None
                previous_done = previous.events[2] if previous is not None and previous.events else None
                try:
                    if self.device_error is None:
                        row.update(_device_times(p.events, previous_done, host_wait_s))
                except (RuntimeError, ValueError) as e:
                    self.device_error = " ".join(str(e).split())
                if self.device_error is not None:
                    self._host_rows += 1
            self.spool.append(row)
        self._previous = pending[count - 1]
        del pending[:count]
        self._first += count


def _device_times(events: tuple[DeviceEvent, DeviceEvent, DeviceEvent], previous_done: DeviceEvent | None,
                  host_wait_s: float) -> dict[str, float]:
    """A step's device spans from its events; ``previous_done``: the previous step's compute-end event."""
    start, copied, done = events
    times = {
        "h2d_s": start.elapsed_time(copied) / 1e3,
        "compute_s": copied.elapsed_time(done) / 1e3,
    }
    if previous_done is None:
        # No earlier device event: the first step keeps its host-clock span.
        times["step_s"] = host_wait_s + times["h2d_s"] + times["compute_s"]
        return times
    idle_s = max(0.0, previous_done.elapsed_time(start) / 1e3)
    times["data_wait_s"] = min(host_wait_s, idle_s)
    times["step_s"] = previous_done.elapsed_time(done) / 1e3
    return times


class ThroughputTimer:
    """The unprofiled baseline: counts samples after warm-up and reads the clock twice.

    Same marking interface as StepTimer, so the training loop is identical
    with and without the profiler; used by the overhead benchmark.
    """

    def __init__(self, clock: Clock, warmup_steps: int = 0, synchronize: Callable[[], None] | None = None) -> None:
        self.clock = clock
        self.synchronize = synchronize  # on CUDA: wait for queued work before reading the clock
        self.warmup_steps = warmup_steps
        self.steps = 0
        self.samples = 0
        self.start_s: float | None = None
        self.end_s: float | None = None
        self.excluded_s = 0.0
        self._paused_at_s = 0.0

    def begin(self, ready_batches: float = float("nan")) -> None:
        if self.steps == self.warmup_steps:
            self._sync()
            self.start_s = self.clock()

    def pause(self) -> None:
        self._paused_at_s = self.clock()

    def resume(self) -> None:
        if self.start_s is not None:
            self.excluded_s += self.clock() - self._paused_at_s

    def waited(self) -> None:
        pass

    def copied(self) -> None:
        pass

    def computed(self, samples: int, loss: Any, correct: Any, epoch: int = 0) -> None:
        if self.steps >= self.warmup_steps:
            self.samples += samples
        self.steps += 1

    def finish(self) -> None:
        self._sync()
        self.end_s = self.clock()

    def _sync(self) -> None:
        if self.synchronize:
            self.synchronize()

    @property
    def samples_per_s(self) -> float:
        """Counted samples over the counted time (after ``finish()``; the warm-up steps must have run)."""
        if self.start_s is None or self.end_s is None:
            raise RuntimeError("ThroughputTimer.samples_per_s before its counted steps began and finish()")
        return self.samples / (self.end_s - self.start_s - self.excluded_s)
