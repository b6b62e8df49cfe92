"""A simulated asynchronous device: one CUDA stream whose work takes known times, driven by a fake host clock.

What it models is what makes GPU timing hard. The host *queues* work and goes
on; the device runs the queue in order. An event recorded on the stream
completes when the device reaches it: at once if the device is idle, else
when everything queued before it is done. A copy from pinned memory with
``non_blocking=True`` is queued like a kernel; a copy from pageable memory is
staged by the driver, so the host waits until the device has done everything
queued before it and the copy itself. ``loss.item()`` waits for everything.

``SimDevice`` is the stream, ``SimEvent`` a ``torch.cuda.Event(enable_timing=
True)`` stand-in (``record``/``query``/``synchronize``/``elapsed_time`` in ms;
``elapsed_time`` of an event the device has not reached yet raises, as CUDA
does). The host clock is a ``FakeClock``: it moves only when the simulated host
works (``load_s`` in ``next()``, ``launch_s`` queuing kernels) or waits.

``LoopCase`` is one training loop with known costs and ``CASES`` the standard
ones. ``device_truth(case)`` is how the device spent the loop's counted steps,
read off the simulated device's own timeline (its busy intervals and the
host's time in ``next()``), never from events; ``simulated_fractions(case)``
runs the loop under pipeprof's real script hooks (``pipeprof.script.hooks``,
the event file, ``pipeprof.script.event_steps``) with this device and reports
what pipeprof says. The tests hold the two against each other; ``make
gpu-check`` runs the same cases on a real GPU and holds it against the latter.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.steps import StepTimer
from pipeprof.script.event_steps import read_events, script_steps
from pipeprof.script.patches import Patches

PARTS = ("data_wait", "h2d", "compute", "other")


class SimEvent:
    """An event on the simulated stream (a ``torch.cuda.Event(enable_timing=True)`` stand-in), with torch's
    semantics: ``query()`` of an event never recorded is True and its ``synchronize()`` returns at once;
    ``elapsed_time`` raises ``ValueError`` unless both events were recorded (torch's own check) and
    ``RuntimeError`` (torch's CUDA errors, ``torch.AcceleratorError``, are RuntimeErrors) for one not reached
    or of another device, and returns float32 milliseconds, as ``cudaEventElapsedTime`` does: a span read
    hours from its start event is coarse (about 1 ms after four hours)."""

    def __init__(self, device: SimDevice) -> None:
        self.device = device
        self.at_s: float | None = None  # when the device reaches it (known at record: the queue's times are)

    def record(self, stream: Any = None) -> None:
        if stream is not None and stream is not self.device:
            raise RuntimeError("CUDA error: invalid resource handle (an event of one stream recorded on another)")
        self.at_s = self.device.reach()

    def query(self) -> bool:
        return self.at_s is None or self.at_s <= self.device.clock()

    def synchronize(self) -> None:
        if self.at_s is not None:
            self.device.wait_until(self.at_s)

    def elapsed_time(self, end: SimEvent) -> float:
        """Milliseconds from this event to ``end`` as a float32; both must have been reached (CUDA raises
        "device not ready" otherwise) and be of one device ("invalid resource handle")."""
        if self.at_s is None or end.at_s is None:  # torch checks this itself, before CUDA: a ValueError
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if end.device.index != self.device.index:
            raise RuntimeError("CUDA error: invalid resource handle (events of two devices)")
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        return float(np.float32((end.at_s - self.at_s) * 1e3))


@dataclass
class SimDevice:
    """One stream of device ``index`` (several streams of one device: several of these with one index).
    ``busy`` holds ``(start_s, end_s, kind)`` of every piece of work, in the order it ran."""

    clock: FakeClock
    index: int = 0
    free_at_s: float = field(init=False)
    busy: list[tuple[float, float, str]] = field(default_factory=list)
    synchronizes: int = 0  # times the host waited for the device

    def __post_init__(self) -> None:
        self.free_at_s = self.clock()

    def reach(self) -> float:
        """When the device gets to something queued now (an event: it takes no time)."""
        return max(self.free_at_s, self.clock())

    def launch(self, device_s: float, host_s: float = 0.0, kind: str = "compute") -> None:
        """Queue a kernel taking ``device_s`` on the device; the host spends ``host_s`` queuing it first."""
        self.clock.advance(host_s)
        start = self.reach()
        self.free_at_s = start + device_s
        self.busy.append((start, self.free_at_s, kind))

    def copy(self, device_s: float, pinned: bool) -> None:
        """A host-to-device copy: queued (pinned, ``non_blocking=True``) or waited for (pageable memory)."""
        self.launch(device_s, kind="h2d")
        if not pinned:
            self.wait_until(self.free_at_s, count=False)

    def synchronize(self) -> None:
        """The host waits for everything queued (``torch.cuda.synchronize()``, ``loss.item()``)."""
        self.wait_until(self.free_at_s)

    def wait_until(self, t_s: float, count: bool = True) -> None:
        self.synchronizes += count
        if t_s > self.clock():
            self.clock.advance(t_s - self.clock())

    def event(self) -> SimEvent:
        return SimEvent(self)

    def wait_stream(self, other: SimDevice) -> None:
        """This stream's later work waits for what ``other`` has queued (``Stream.wait_stream``), on the device."""
        self.free_at_s = max(self.free_at_s, other.free_at_s)


class SimCuda:
    """The simulated device as the script hooks see a device (``pipeprof.script.device_clock.Device``): events
    are recorded on its current stream (``device``, or another one inside ``with sim.stream(side)``, as in
    ``torch.cuda.stream``)."""

    def __init__(self, device: SimDevice, index: int = 0) -> None:
        self.device = device
        self.current = device  # the current stream
        self.index: int | None = None  # named by the first batch copied to it, as on CUDA
        self._index = index

    def mark(self) -> SimEvent | None:
        if self.index is None:
            return None
        event = self.current.event()
        event.record()
        return event

    def holds(self, tensor: Any) -> bool:
        """A copy the simulated loop made (``sim_device`` on it) is on the device; the first names it."""
        if getattr(tensor, "sim_device", None) is None:
            return False
        self.index = self._index
        return True

    def stream(self) -> Any:
        return self.current

    @contextlib.contextmanager
    def using(self, stream: SimDevice) -> Iterator[SimDevice]:
        """``with torch.cuda.stream(stream):`` work queued inside goes to ``stream``."""
        previous, self.current = self.current, stream
        try:
            yield stream
        finally:
            self.current = previous


@dataclass(frozen=True)
class LoopCase:
    """One training loop with known costs: ``load_s`` host seconds for ``next()`` to make a batch (the loader
    works in the loop: num_workers=0), ``copy_s`` and ``compute_s`` device seconds of the batch's copy and of
    the step's kernels, ``launch_s`` host seconds to queue them; ``pinned``: the copy is ``non_blocking`` from
    pinned memory (else pageable: the host waits for it); ``sync_every_step``: ``loss.item()`` every step."""

    name: str
    load_s: float
    copy_s: float
    compute_s: float
    launch_s: float = 0.0005
    pinned: bool = True
    sync_every_step: bool = False
    steps: int = 40
    warmup_steps: int = 5


CASES = (
    # The input is slower than the device: it idles while the host waits for each batch.
    LoopCase("input-bound", load_s=0.010, copy_s=0.001, compute_s=0.004),
    # The device is slower: the host runs ahead and its waits in next() happen while the device is still
    # busy with earlier steps. No stall at all, however long the host sits in next().
    LoopCase("host-ahead", load_s=0.005, copy_s=0.001, compute_s=0.008),
    # loss.item() every step: the host waits for the device, the next batch is made while the device idles.
    LoopCase("synchronising", load_s=0.005, copy_s=0.001, compute_s=0.008, sync_every_step=True),
    # Pageable memory: the copy waits for the previous step's kernels, and the host with it.
    LoopCase("pageable", load_s=0.005, copy_s=0.002, compute_s=0.008, pinned=False),
    LoopCase("pageable-input-bound", load_s=0.010, copy_s=0.002, compute_s=0.004, pinned=False),
)


@dataclass
class Timeline:
    """What the simulated loop did: the host's ``next()`` spans and, per step, when the device finished it."""

    device: SimDevice
    loads: list[tuple[float, float]] = field(default_factory=list)  # host time in next(), per batch
    step_ends_s: list[float] = field(default_factory=list)  # device time each step's work was done
    host_step_ends_s: list[float] = field(default_factory=list)  # host time of each optimizer step


class NoDevice:
    """A device without a clock: what the hooks see on the CPU (no event can be recorded)."""

    index = None

    def stream(self) -> None:
        return None

    def mark(self) -> None:
        return None

    def holds(self, tensor: Any) -> bool:
        return False


Profiler = Callable[[FakeClock, Any], AbstractContextManager[Any]]


def hooks_profiler(events_path: Path, memory: Any = None) -> Profiler:
    """Profile with the script hooks alone, writing ``events_path`` (what ``pipeprof profile`` puts in a script);
    ``memory``: the hooks' ``CudaMemoryWindows`` (default: torch.cuda's, which reads nothing without CUDA)."""
    @contextlib.contextmanager
    def profiling(clock: FakeClock, device: Any) -> Iterator[None]:
        from pipeprof.script.hooks import EventLog, Hooks  # imports torch: only when a loop is run
        hooks = Hooks(EventLog(str(events_path), clock=clock), clock=clock, device=device, memory=memory)
        hooks.install()
        try:
            yield
        finally:
            hooks.uninstall()
    return profiling


def run_loop(case: LoopCase, clock: FakeClock, profiler: Profiler, device_clock: bool = True,
             hooks_device: Callable[[SimDevice], Any] | None = None, device_index: int = 0) -> Timeline:
    """``case`` as a real training loop (a DataLoader, ``.to``, an optimizer) inside ``profiler(clock,
    device)``; ``device_clock`` False: the hooks see no device clock (the CPU path). ``hooks_device``: what the
    hooks see of the loop's stream (default ``SimCuda``; ``device_clock.CudaDevice`` over ``tests/support/sim_cuda.py``'s
    torch.cuda runs the real one); ``device_index``: the device the loop trains on (its copies say so in
    ``sim_device``)."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    device = SimDevice(clock, index=device_index)
    timeline = Timeline(device)

    class Samples(Dataset):
        def __len__(self) -> int:
            return case.steps

        def __getitem__(self, i: int) -> Any:
            t0 = clock()
            clock.advance(case.load_s)  # the host makes the sample (read, decode): it is not on the device
            timeline.loads.append((t0, clock()))
            return torch.zeros(4)

    def collate(samples: list[Any]) -> Any:
        batch = torch.stack(samples)
        setattr(batch, "sim_copy", True)  # noqa: B010 - its .to() is the simulated copy (torch types have no such field)
        return batch

    def simulated_to(original: Any) -> Any:
        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(self, *args, **kwargs)
            if getattr(self, "sim_copy", False):
                device.copy(case.copy_s, case.pinned)
                setattr(out, "sim_device", device.index)  # noqa: B010 - where the copy went (sim_cuda.where_simulated)
            return out
        return to

    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    own = Patches()
    own.apply(torch.Tensor, "to", simulated_to)  # under the hooks' patch: what they time is the copy
    try:
        seen = (hooks_device or SimCuda)(device) if device_clock else NoDevice()
        with profiler(clock, seen):
            for x in DataLoader(Samples(), batch_size=1, num_workers=0, collate_fn=collate):
                x.to(torch.float64, non_blocking=case.pinned)
                device.launch(case.compute_s, host_s=case.launch_s)
                if case.sync_every_step:
                    device.synchronize()
                weight.grad = torch.ones(1)
                optimizer.step()
                timeline.step_ends_s.append(device.reach())
                timeline.host_step_ends_s.append(clock())
    finally:
        own.undo()
    return timeline


def _overlap_s(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)


def device_truth(case: LoopCase) -> dict[str, float]:
    """Fractions of the counted steps' device time (after the warm-up): idle while the host was in ``next()``
    (data_wait), copying (h2d), running kernels (compute), idle otherwise (other). From the device's own
    timeline, not from events."""
    with tempfile.TemporaryDirectory(prefix="pipeprof-sim-") as folder:
        timeline = run_loop(case, FakeClock(100.0), hooks_profiler(Path(folder) / "events.jsonl"))
    a, b = timeline.step_ends_s[case.warmup_steps - 1], timeline.step_ends_s[-1]
    busy = {kind: sum(max(0.0, min(b, e) - max(a, s)) for s, e, k in timeline.device.busy if k == kind)
            for kind in ("h2d", "compute")}
    work = [(s, e) for s, e, _ in timeline.device.busy]
    # Idle while the host waited: within next()'s spans, less the work the device did meanwhile.
    wait = sum(max(0.0, min(b, e) - max(a, s)) - _overlap_s(max(a, s), min(b, e), work)
               for s, e in timeline.loads if e > a and s < b)
    total = b - a
    parts = {"data_wait": wait / total, "h2d": busy["h2d"] / total, "compute": busy["compute"] / total}
    parts["other"] = max(0.0, 1.0 - sum(parts.values()))
    return parts


def simulated_fractions(case: LoopCase, device_clock: bool = True) -> dict[str, Any]:
    """What pipeprof reports for ``case`` run on the simulated device: the counted steps' fractions of step time
    (keys ``PARTS``) and ``timing`` (which clock timed which part). ``device_clock`` False: as on a device
    whose clock cannot be read (the host clock's view)."""
    with tempfile.TemporaryDirectory(prefix="pipeprof-sim-") as folder:
        path = Path(folder) / "events.jsonl"
        run_loop(case, FakeClock(100.0), hooks_profiler(path), device_clock)
        cut = script_steps(read_events(path), 100.0, case.warmup_steps)
    return {**step_fractions(cut.steps), "timing": cut.timing}


def step_fractions(steps: Any) -> dict[str, float]:
    """Shares of the counted (non-warm-up) steps' time: data_wait, h2d, compute, and other (the rest)."""
    counted = steps[~steps["warmup"].astype(bool)]
    total = float(counted["step_s"].sum())
    parts = {part: float(counted[f"{part}_s"].sum()) / total for part in ("data_wait", "h2d", "compute")}
    parts["other"] = max(0.0, 1.0 - sum(parts.values()))
    return parts


def timer_fractions(case: LoopCase, device_clock: bool = True) -> dict[str, Any]:
    """What a scenario run's step timer (``pipeprof.measure.steps.StepTimer``) reports for ``case`` on the
    simulated device: the loop marks it as ``pipeline/train.py`` does (begin, batch in hand, copy issued,
    step done), with device events unless ``device_clock`` is False."""
    import pandas as pd

    clock = FakeClock(100.0)
    device = SimDevice(clock)
    timer = StepTimer(clock, clock(), warmup_steps=case.warmup_steps,
                      device_events=device.event if device_clock else None)
    for _ in range(case.steps):
        timer.begin()
        clock.advance(case.load_s)
        timer.waited()
        device.copy(case.copy_s, case.pinned)
        timer.copied()
        device.launch(case.compute_s, host_s=case.launch_s)
        if case.sync_every_step:
            device.synchronize()
        timer.computed(1, 0.0, 0.0)
    timer.finish()
    return {**step_fractions(pd.DataFrame(timer.rows())), "timing": timer.method,
            "synchronizes": device.synchronizes}
