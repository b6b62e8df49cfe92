"""The training device's clock and synchronisation for pipeprof's own runs (scenario runs, probes).

Every event and synchronize names the device the run trains on, never torch's
current device: a rank training on ``cuda:1`` with device 0 current would time
device 0's idle stream, wait for the wrong device, and make a context on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class StreamEvent:
    """A ``torch.cuda.Event(enable_timing=True)`` recorded on ``device``'s current stream, never on torch's
    current device's (a rank training on ``cuda:1`` with device 0 current would time device 0's idle stream)."""

    def __init__(self, device: torch.device, cuda: Any = torch.cuda) -> None:
        self.device, self._cuda = device, cuda
        self.event = cuda.Event(enable_timing=True)

    def record(self) -> None:
        self.event.record(self._cuda.current_stream(self.device))

    def query(self) -> bool:
        return bool(self.event.query())

    def synchronize(self) -> None:
        self.event.synchronize()

    def elapsed_time(self, end: StreamEvent) -> float:
        return float(self.event.elapsed_time(end.event))


def cuda_events(device: torch.device) -> Callable[[], StreamEvent]:
    """The step timer's event factory for ``device``."""
    return lambda: StreamEvent(device)


def device_sync(device: torch.device) -> Callable[[], None] | None:
    """Wait for everything queued on ``device`` (``torch.cuda.synchronize(device)``); None on the CPU."""
    if device.type != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)
