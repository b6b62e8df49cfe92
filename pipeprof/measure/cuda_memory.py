"""torch.cuda's allocator, read in windows: what tensors and the caching allocator held, and their peaks.

Imported into the profiled process (the script hooks) as into the scenario
runner, so it needs only the standard library and torch. Reading the
allocator's counters is a host-side lookup (no synchronize, no kernel), a few
microseconds, so it can run at every step end; a row is made only once per
``window_s``, which keeps a long run's table small.
"""

from __future__ import annotations

from typing import Any

MemoryRow = tuple[float, int, int, int, int]  # t_s, allocated, reserved, peak allocated, peak reserved (bytes)


class CudaMemoryWindows:
    """Rows of ``DEVICE_MEMORY_COLUMNS`` for the current CUDA device, one per window of ``window_s`` seconds.

    ``cuda`` is ``torch.cuda`` or a stand-in with ``is_initialized``,
    ``memory_allocated``, ``memory_reserved``, ``max_memory_allocated``,
    ``max_memory_reserved`` and ``reset_peak_memory_stats``. Until CUDA is
    initialized (the process has touched no CUDA tensor) nothing is read: asking
    would not create a context, but there would be nothing to say.
    """

    def __init__(self, cuda: Any = None, window_s: float = 0.5) -> None:
        if not window_s >= 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        if cuda is None:
            # torch only when asked for: the script hooks import this module before the script has loaded torch
            import torch.cuda as cuda

        self._cuda = cuda
        self.window_s = window_s
        self._last_s: float | None = None  # when the previous row was made

    def read(self, now_s: float) -> MemoryRow | None:
        """A row ending the window at ``now_s`` (seconds), or None: CUDA not initialized, or the window
        not yet over. The peaks are those since the previous row (they are reset after each row)."""
        if self._last_s is not None and now_s - self._last_s < self.window_s:
            return None
        return self.final(now_s)

    def final(self, now_s: float) -> MemoryRow | None:
        """A row now, whether the window is over or not (the run's end); None when CUDA is not initialized."""
        cuda = self._cuda
        if not cuda.is_initialized():
            return None
        row = (float(now_s), int(cuda.memory_allocated()), int(cuda.memory_reserved()),
               int(cuda.max_memory_allocated()), int(cuda.max_memory_reserved()))
        cuda.reset_peak_memory_stats()
        self._last_s = now_s
        return row
