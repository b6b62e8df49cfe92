"""Emulated slow storage: each read waits a fixed latency plus its bytes over a bandwidth.

This is an emulation, not a device model. ``SleepThrottle.wait(nbytes)``
sleeps ``latency_s + nbytes / bandwidth_bytes_per_s`` after a sample's bytes
were read, so it adds time per read and nothing else:

* It does not model queueing or a shared device's parallelism. Each
  DataLoader worker holds its own copy and delays its own reads
  independently, as parallel requests to remote storage would be; N workers
  together get N times the emulated bandwidth.
* The reads themselves still hit the local disk or the page cache; their
  real cost comes on top of the emulated one.

Units: the scenario's ``ThrottleSpec`` says milliseconds and MB/s with
MB = 10**6 bytes (as storage vendors count); ``from_spec`` converts to
seconds and bytes per second.

A ``SleepThrottle`` is picklable (DataLoader workers receive it): it stores
numbers and the sleep function, which pickles by reference when it is a
module-level function such as ``time.sleep``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeprof.scenario import ThrottleSpec

BYTES_PER_MB = 1_000_000


class SleepThrottle:
    """``wait(nbytes)`` sleeps ``latency_s + nbytes / bandwidth_bytes_per_s`` seconds."""

    def __init__(self, latency_s: float, bandwidth_bytes_per_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        if not bandwidth_bytes_per_s > 0:
            raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s}")
        self.latency_s = float(latency_s)
        self.bandwidth_bytes_per_s = float(bandwidth_bytes_per_s)
        self.sleep = sleep

    def delay_s(self, nbytes: int) -> float:
        """Seconds a read of ``nbytes`` bytes is made to take."""
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s

    def wait(self, nbytes: int) -> None:
        self.sleep(self.delay_s(nbytes))

    def __repr__(self) -> str:
        return (f"SleepThrottle(latency_s={self.latency_s!r}, "
                f"bandwidth_bytes_per_s={self.bandwidth_bytes_per_s!r})")


def from_spec(spec: ThrottleSpec, sleep: Callable[[float], None] = time.sleep) -> SleepThrottle:
    """The throttle for a scenario's ``ThrottleSpec`` (ms -> s; MB/s -> bytes/s with MB = 10**6 bytes)."""
    return SleepThrottle(spec.latency_ms / 1000.0, spec.bandwidth_mb_s * BYTES_PER_MB, sleep)
