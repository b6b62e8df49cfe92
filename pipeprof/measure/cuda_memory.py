"""torch.cuda's allocator, read in windows on the training device: what tensors and the caching allocator held.

Imported into the profiled process (the script hooks) as into the scenario
runner, so it needs only the standard library and torch. Reading the
allocator's counters is a host-side lookup (no synchronize, no kernel), a few
microseconds, so it can run at every step end; a row is made only once per
``window_s``, which keeps a long run's table small.

The counters are read on the device the script trains on, never torch's
current device: a script that trains on ``cuda:1`` without ``set_device``
(PyTorch's DDP tutorial does so) would read device 0's zeros. The peaks are
torch's own (``max_memory_allocated``): since the process started or the
script last reset them. pipeprof never resets them, because the script's own
``max_memory_allocated()`` must read what it would unprofiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MemoryRow = tuple[float, int, int, int, int]  # t_s, allocated, reserved, peak allocated, peak reserved (bytes)


class CudaMemoryWindows:
    """Rows of ``DEVICE_MEMORY_COLUMNS`` for the training device, one per window of ``window_s`` seconds.

    ``cuda`` is ``torch.cuda`` or a stand-in with ``is_initialized``,
    ``memory_allocated``, ``memory_reserved``, ``max_memory_allocated`` and
    ``max_memory_reserved`` (each taking the device). ``device``: the training
    device (an index or a ``torch.device``), or a function returning it, or
    None while it is not known (nothing is read then). Until CUDA is
    initialized (the process has touched no CUDA tensor) nothing is read:
    asking would not create a context, but there would be nothing to say.
    """

    def __init__(self, cuda: Any = None, window_s: float = 0.5,
                 device: Any | Callable[[], Any] = None) -> None:
        if not window_s >= 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        if cuda is None:
            # torch only when asked for: the script hooks import this module before the script has loaded torch
            import torch.cuda as cuda

        self._cuda = cuda
        self._device = device if callable(device) else (lambda: device)
        self.window_s = window_s
        self._last_s: float | None = None  # when the previous row was made

    def read(self, now_s: float) -> MemoryRow | None:
        """A row ending the window at ``now_s`` (seconds), or None: CUDA not initialized, the training device
        not known, or the window not yet over."""
        if self._last_s is not None and now_s - self._last_s < self.window_s:
            return None
        return self.final(now_s)

    def final(self, now_s: float) -> MemoryRow | None:
        """A row now, whether the window is over or not (the run's end); None when CUDA is not initialized or
        the training device is not known."""
        cuda = self._cuda
        if not cuda.is_initialized():
            return None
        device = self._device()
        if device is None:
            return None
        row = (float(now_s), int(cuda.memory_allocated(device)), int(cuda.memory_reserved(device)),
               int(cuda.max_memory_allocated(device)), int(cuda.max_memory_reserved(device)))
        self._last_s = now_s
        return row
