"""Steady-state measurement: stop training once windowed throughput is stable, or a time budget is spent.

With ``train.steady = true`` the loop asks ``SteadyState.after_step`` after
every step. Counted steps (after ``train.warmup_steps``) are grouped into
consecutive windows of at least ``window_s`` seconds and at least
``MIN_WINDOW_STEPS`` steps; each window's samples/s is its samples over its
duration. The run is **stable** when the last ``windows`` windows' samples/s
have a coefficient of variation (population std / mean) at or under ``cv``:
training stops there and every step before those windows becomes warm-up —
worker start, the first epoch filling the page cache, allocator and
thread-pool warm-up are all left out of the statistics, however long they
took. The limit of any such test: a transient that is itself steady for
``windows`` windows (a long first epoch from a cold disk) is taken as the
steady state; more or longer windows (``train.steady_windows``,
``train.steady_window_s``) look further. ``max_seconds`` (> 0) stops the loop once that much time has passed
since training began, stable or not; the statistics then cover the last
``windows`` windows (or every counted step when there are fewer), and the
coefficient of variation reached is recorded so the report can say the
number is not steady. Without either, the loop runs its steps.

The durations come from this object's own clock readings at the end of
each step (a step's time plus the loop's bookkeeping between steps), which
is all a stability test needs; the statistics themselves come from the step
timer's records as always.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pipeprof.measure.clock import Clock

MIN_WINDOW_STEPS = 3


@dataclass
class SteadyState:
    """Decides after each step whether to stop; remembers where the steady stretch began."""

    clock: Clock
    warmup_steps: int
    steady: bool = True
    cv: float = 0.05
    windows: int = 5
    window_s: float = 0.5
    max_seconds: float = 0.0
    start_s: float | None = None
    stopped: str = "steps"
    _last_s: float | None = None
    _window: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, -1.0])  # seconds, samples, steps, first
    _rates: list[float] = field(default_factory=list)
    _firsts: list[int] = field(default_factory=list)
    last_cv: float | None = None

    def begin(self) -> None:
        """Call once, right before the first step."""
        self.start_s = self._last_s = self.clock()

    def after_step(self, step: int, samples: int) -> bool:
        """Record step ``step`` (0-based) of ``samples`` samples; True when the loop should stop now."""
        now = self.clock()
        if self.start_s is None:  # no begin(): training is taken to start at the end of this step
            self.start_s = now
        last_s = now if self._last_s is None else self._last_s
        took_s, self._last_s = now - last_s, now
        if step >= self.warmup_steps:
            w = self._window
            if w[3] < 0:
                w[3] = step
            w[0] += took_s
            w[1] += samples
            w[2] += 1
            if w[0] >= self.window_s and w[2] >= MIN_WINDOW_STEPS:
                self._rates.append(w[1] / w[0] if w[0] > 0 else math.inf)
                self._firsts.append(int(w[3]))
                self._window = [0.0, 0.0, 0.0, -1.0]
                self.last_cv = variation(self._rates[-self.windows:]) if len(self._rates) >= self.windows else None
                if self.steady and self.last_cv is not None and self.last_cv <= self.cv:
                    self.stopped = "stable"
                    return True
        if self.max_seconds > 0 and now - self.start_s >= self.max_seconds:
            self.stopped = "budget"
            return True
        return False

    def counted_from(self) -> int | None:
        """The first step the statistics should count, or None to keep ``warmup_steps``."""
        if self.stopped == "steps" or len(self._firsts) < 1:
            return None
        return self._firsts[-min(self.windows, len(self._firsts))]

    def meta(self) -> dict[str, Any]:
        """run.json's ``steady``: the settings, why the loop stopped, and how steady it was."""
        return {"steady": self.steady, "cv_threshold": self.cv, "windows": self.windows,
                "window_s": self.window_s, "max_seconds": self.max_seconds, "stopped": self.stopped,
                "cv": self.last_cv, "windows_measured": len(self._rates), "counted_from_step": self.counted_from(),
                "window_samples_per_s": list(self._rates[-self.windows:])}


def variation(rates: list[float]) -> float | None:
    """Coefficient of variation (population std / mean); None for no rates or a zero mean."""
    if not rates:
        return None
    mean = sum(rates) / len(rates)
    if not mean or not math.isfinite(mean):
        return None
    return math.sqrt(sum((r - mean) ** 2 for r in rates) / len(rates)) / mean
