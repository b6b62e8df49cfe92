"""The device's clock in a profiled script: CUDA events at host moments, resolved lazily to device times.

Imported into the user's process (standard library and torch only). With
asynchronous kernels the host runs ahead of the GPU: it can sit in ``next()``
while the GPU still works through the previous step, and that host time is no
stall. An event recorded on the current stream completes when the GPU has
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
* ``("C", t0_s, t1_s, nbytes, device_s)``: a batch copy, its device time.

``CudaDevice`` is the real device (``torch.cuda``); the tests and ``make
gpu-check`` use ``pipeprof.measure.sim_device``'s simulated one through the same
two methods.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

import torch


class Device(Protocol):
    """What the hooks need of a device: an event recorded now on its current stream, and where a tensor is."""

    def mark(self) -> Any | None:
        """An event recorded now (``torch.cuda.Event(enable_timing=True)`` or a stand-in), or None when the
        device's clock cannot be read now (CUDA not initialized: the script trains on the CPU so far)."""

    def holds(self, tensor: Any) -> bool:
        """Whether ``tensor`` lives on this device (a copy to it is timed with its events)."""


class CudaDevice:
    """The current CUDA device. ``mark()`` is None until the script itself initializes CUDA (pipeprof never does:
    a CPU-only script stays CPU-only)."""

    def __init__(self) -> None:
        self._initialized = torch.cuda.is_initialized
        self._event = torch.cuda.Event
        self.refused = 0  # events the stream would not take (the step is then timed on the host clock)

    def mark(self) -> Any | None:
        if not self._initialized():
            return None
        event = self._event(enable_timing=True)
        try:
            event.record()
        except RuntimeError:  # the stream is being captured into a CUDA graph: no timing event there
            self.refused += 1
            return None
        return event

    def holds(self, tensor: Any) -> bool:
        return bool(tensor.is_cuda)


class DeviceMarks:
    """Pending device events, resolved in the order recorded (one stream: they complete in that order)."""

    def __init__(self) -> None:
        self._origin: Any = None
        self._pending: deque[tuple] = deque()
        self.dropped = 0  # events that could not be resolved (another device's, a torn-down context)

    def __len__(self) -> int:
        return len(self._pending)

    def mark(self, t_s: float, event: Any) -> None:
        """``event`` was recorded at host time ``t_s``."""
        if self._origin is None:
            self._origin = event
        self._pending.append(("G", t_s, event))

    def copy(self, t0_s: float, t1_s: float, nbytes: int, start: Any, end: Any) -> None:
        """A batch copy of ``nbytes`` issued from ``t0_s`` to ``t1_s`` on the host, bracketed by two events."""
        self._pending.append(("C", t0_s, t1_s, nbytes, start, end))

    def resolve(self, final: bool = False) -> list[tuple]:
        """The event tuples of the events done by now (``final``: all of them, waiting once for the last)."""
        pending = self._pending
        out: list[tuple] = []
        if final and pending:
            try:
                pending[-1][-1].synchronize()
            except RuntimeError:
                pass  # a context already gone: each one left is dropped below
        while pending:
            item = pending[0]
            last = item[-1]
            try:
                if not final and not last.query():
                    break  # the GPU is not there yet: neither is anything recorded after it
                if item[0] == "G":
                    out.append(("G", item[1], self._origin.elapsed_time(last) / 1e3))
                else:
                    out.append(("C", item[1], item[2], item[3], item[4].elapsed_time(last) / 1e3))
            except RuntimeError:  # another device's event, or one never recorded
                self.dropped += 1
            pending.popleft()
        return out
