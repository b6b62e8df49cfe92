"""The device's clock in a profiled script: CUDA events at host moments, resolved lazily to device times.

Imported into the user's process (standard library and torch only). With
asynchronous kernels the host runs ahead of the GPU: it can sit in ``next()``
while the GPU still works through the previous step, and that host time is no
stall. An event recorded on the training device's current stream completes when the GPU has
done everything queued before it, or (when the GPU is idle) right when it is
queued. So for a ``next()`` bracketed by two events the device time between
them is exactly the time the GPU sat idle because the batch was not there:
zero when the batch came while the GPU was still busy.

``DeviceMarks`` keeps the events of the hooks until they are done (``query()``,
never a synchronize per step; the last flush of the run waits for them once)
and turns them into event tuples for the event file:

* ``("G", t_s, device_s)``: an event recorded at host time ``t_s`` (the same
  float as the ``N``/``I``/``O``/``M``/``B`` event it marks) completed at
  ``device_s`` seconds on the device's clock, counted from the first mark;
* ``("C", t0_s, t1_s, nbytes, device_s[, 1])``: a batch copy, its device time (the 1: issued on another
  stream than the step marks', so it overlaps compute instead of delaying it).

``CudaDevice`` is the real device (``torch.cuda``); the tests and ``make
gpu-check`` use ``pipeprof.gpu_check.sim_device``'s simulated one through the same
two methods.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import torch


class Device(Protocol):
    """What the hooks need of a device: an event recorded now on its current stream, and where a tensor is."""

    index: int | None  # the training device's ordinal, once known

    def mark(self) -> Any | None:
        """An event recorded now on the training device's current stream (``torch.cuda.Event(enable_timing=
        True)`` or a stand-in), or None when the device's clock cannot be read now (CUDA not initialized, or
        the training device not yet known: the script trains on the CPU so far)."""

    def holds(self, tensor: Any) -> bool:
        """Whether ``tensor`` lives on the training device (a copy to it is timed with its events); the first
        CUDA tensor of a batch names the training device."""

    def stream(self) -> Any:
        """The training device's current stream now (a copy issued on another stream than the step's marks
        overlaps the step's compute), or None."""


class CudaDevice:
    """The device the script trains on: the one its first CUDA batch tensor lives on, never torch's current
    device (a DDP script that does ``.to(f"cuda:{rank}")`` without ``set_device`` has device 0 current on
    every rank, and an event there would time device 0's idle stream and create a context on it).
    ``mark()`` is None until the script itself has put a batch on CUDA (pipeprof never initializes CUDA: a
    CPU-only script stays CPU-only)."""

    def __init__(self, cuda: Any = None, where: Callable[[Any], int | None] | None = None) -> None:
        cuda = torch.cuda if cuda is None else cuda  # a stand-in in the tests (the simulated device's)
        self._where = where or _cuda_index  # the device a tensor lives on (None: not CUDA)
        self._initialized = cuda.is_initialized
        self._event = cuda.Event
        self._current_stream = cuda.current_stream
        self._capturing = cuda.is_current_stream_capturing
        self.index: int | None = None
        self.refused = 0  # events not recorded: the stream was being captured into a CUDA graph

    def mark(self) -> Any | None:
        if self.index is None or not self._initialized():
            return None
        if self._capturing():
            # An event recorded inside a CUDA-graph capture is no timing event (it fails at query()): the step
            # is timed on the host clock, and the count of such marks is written at the end.
            self.refused += 1
            return None
        event = self._event(enable_timing=True)
        try:
            event.record(self._current_stream(self.index))
        except RuntimeError:
            self.refused += 1
            return None
        return event

    def holds(self, tensor: Any) -> bool:
        index = self._where(tensor)
        if index is None:
            return False
        if self.index is None:
            self.index = index
        return index == self.index

    def stream(self) -> Any:
        if self.index is None or not self._initialized():
            return None
        return self._current_stream(self.index)


def _cuda_index(tensor: Any) -> int | None:
    return int(tensor.device.index) if tensor.is_cuda else None


class DeviceMarks:
    """Pending device events, resolved in the order recorded. The step marks are on one stream and complete in
    that order; each is read against the one before it, never against one origin: ``elapsed_time`` is a
    float32 count of milliseconds, about 0.25 ms coarse an hour from its origin and 1 ms after four, while a
    step's span is read to the microsecond. Their sum, a float64, is the device time from the first mark."""

    def __init__(self) -> None:
        self._last: Any = None  # the last step mark resolved
        self._device_s = 0.0  # its device time from the first mark
        self._pending: deque[tuple] = deque()
        self.dropped = 0  # events that could not be resolved (another device's, a torn-down context)

    def __len__(self) -> int:
        return len(self._pending)

    def mark(self, t_s: float, event: Any) -> None:
        """``event`` was recorded at host time ``t_s``."""
        self._pending.append(("G", t_s, event))

    def copy(self, t0_s: float, t1_s: float, nbytes: int, start: Any, end: Any, overlapped: bool = False) -> None:
        """A batch copy of ``nbytes`` issued from ``t0_s`` to ``t1_s`` on the host, bracketed by two events;
        ``overlapped``: issued on another stream than the step marks' (a prefetcher's side stream)."""
        self._pending.append(("C", t0_s, t1_s, nbytes, int(overlapped), start, end))

    def resolve(self, final: bool = False) -> list[tuple]:
        """The event tuples of the events done by now (``final``: all of them, waiting for each once)."""
        pending = self._pending
        out: list[tuple] = []
        if final:
            # Wait for the last; a side stream's copies complete apart from the marks: any not done then too.
            for item in (pending[-1], *pending) if pending else ():
                try:
                    if not item[-1].query():
                        item[-1].synchronize()
                except (RuntimeError, ValueError):
                    pass  # a context already gone: each one left is dropped below
        while pending:
            item = pending[0]
            last = item[-1]
            try:
                if not final and not last.query():
                    break  # the GPU is not there yet: neither is anything recorded after it on its stream
                if item[0] == "G":
                    if self._last is not None:
                        self._device_s += self._last.elapsed_time(last) / 1e3
                    self._last = last
                    out.append(("G", item[1], self._device_s))
                else:
                    span_s = item[5].elapsed_time(last) / 1e3
                    out.append(("C", item[1], item[2], item[3], span_s, *((1,) if item[4] else ())))
            except (RuntimeError, ValueError):  # another device's event, one never recorded (torch: ValueError)
                self.dropped += 1
            pending.popleft()
        return out
