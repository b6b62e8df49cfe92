"""torch.cuda's surface over the simulated device (``pipeprof.gpu_check.sim_device``), for the real ``CudaDevice``.

The script hooks' ``pipeprof.script.device_clock.CudaDevice`` takes ``torch.cuda`` or this: numbered devices,
each with its default stream (a ``SimDevice``) made when first used (a CUDA context: ``contexts`` lists them),
a current device (``current``, 0 unless set) distinct from the one the script trains on, and
``Event(enable_timing=True)`` whose ``record(stream=None)`` records on the stream given or, as torch's does,
on the current device's current stream. Tests run the real ``CudaDevice`` on it and see which device it timed
and where it made contexts.
"""

from __future__ import annotations

from typing import Any

from pipeprof.gpu_check.sim_device import SimDevice, SimEvent
from pipeprof.measure.clock import FakeClock


class SimTorchCuda:
    """``torch.cuda`` as ``CudaDevice`` uses it: ``is_initialized``, ``Event``, ``current_stream``,
    ``is_current_stream_capturing``; ``streams`` holds the devices' streams made so far, by index."""

    def __init__(self, clock: FakeClock, streams: dict[int, SimDevice] | None = None, current: int = 0) -> None:
        self.clock = clock
        self.streams: dict[int, SimDevice] = dict(streams or {})
        self.contexts: set[int] = set()  # devices a stream was asked of (a context made there)
        self.current = current
        self.capturing = False
        api = self

        class Event(SimEvent):
            """``torch.cuda.Event``: made without a device; recording puts it on a stream."""

            def __init__(self, enable_timing: bool = False) -> None:
                if not enable_timing:
                    raise ValueError("pipeprof's events time: enable_timing=True")
                self.at_s = None

            def record(self, stream: Any = None) -> None:
                self.device = stream if stream is not None else api.current_stream()
                self.at_s = self.device.reach()

        self.Event = Event

    def is_initialized(self) -> bool:
        return True

    def current_stream(self, device: Any = None) -> SimDevice:
        index = self.current if device is None else int(getattr(device, "index", device))
        self.contexts.add(index)
        if index not in self.streams:
            self.streams[index] = SimDevice(self.clock, index=index)
        return self.streams[index]

    def is_current_stream_capturing(self) -> bool:
        return self.capturing


def where_simulated(tensor: Any) -> int | None:
    """The simulated device a tensor of the simulated loop lives on (``sim_device`` on the copy), or None."""
    index = getattr(tensor, "sim_device", None)
    return None if index is None else int(index)
