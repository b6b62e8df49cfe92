"""Clocks. Logic never reads the time directly: it is handed a clock.

A clock is any zero-argument callable returning seconds as a float from an
arbitrary fixed origin (``time.perf_counter`` is the real one). Tests use
``FakeClock``, which only moves when told to.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]

monotonic_clock: Clock = time.perf_counter


class FakeClock:
    """A clock for tests: ``clock()`` returns the current fake time in seconds."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = float(start_s)

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self.now_s += seconds

    def sleep(self, seconds: float) -> None:
        """Stand-in for ``time.sleep`` that advances the fake time."""
        self.advance(max(0.0, seconds))
