"""Step ends grouped into time-bounded windows: the rate of each, and when a short measurement stops.

Shared by the what-if probes after a scenario's run (``measure.what_if``) and the what-if segments after a
script's run (``script.segments``, inside the user's process: standard library only). Times come from the
injected clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from pipeprof.loader_rules import DEFAULT_PREFETCH_FACTOR  # standard library only
from pipeprof.measure.clock import Clock

WINDOW_S = 0.1
WINDOWS = 3
WARMUP_STEPS = 2
BUDGET_S = 0.35  # per probe
TOTAL_BUDGET_S = 5.5  # all probes (or segments) after a run: one that could not end within it is not started
WORKERS_BUDGET_S = 0.35  # per number of workers (their start-up included)
# a trained probe's budget stretches up to this for slow batches, until its warm-up and windows have their batches
TRAINED_FULL_BUDGET_S = 1.2
DEFAULT_PREFETCH = DEFAULT_PREFETCH_FACTOR  # DataLoader's prefetch_factor with workers when not set (loader_rules)
# The probes' default cap after a run: the larger of MIN_PROBES_S and PROBES_SHARE of the run's own training time.
MIN_PROBES_S = 3.0
PROBES_SHARE = 0.1
STEPS_PER_WINDOW = 3  # a window holds at least this many of the run's steps (a 300 ms GPU step: 0.9 s)


def probes_budget(training_s: float | None, step_s: float | None,
                  total_s: float | None = None) -> dict[str, float]:
    """The probes' budgets after a run that trained ``training_s`` seconds at ``step_s`` seconds a step, counted
    in steps with wall-time caps that follow the run's step time: ``total_budget_s`` = max(``MIN_PROBES_S``,
    ``PROBES_SHARE`` × training); ``window_s`` = ``STEPS_PER_WINDOW`` steps (at least ``WINDOW_S``); a probe's
    ``budget_s`` = its warm-up and windows' steps (at least ``BUDGET_S``, at most the total). Unknown times:
    the defaults. ``total_s``: the total the user asked for, in place of the default."""
    total = max(MIN_PROBES_S, PROBES_SHARE * training_s) if training_s and training_s > 0 else MIN_PROBES_S
    if total_s is not None and total_s > 0:
        total = total_s
    if not step_s or step_s <= 0:
        return {"total_budget_s": total, "window_s": WINDOW_S, "budget_s": BUDGET_S}
    window = max(WINDOW_S, STEPS_PER_WINDOW * step_s)
    budget = min(max(BUDGET_S, (WARMUP_STEPS + WINDOWS * STEPS_PER_WINDOW) * step_s), total)
    return {"total_budget_s": total, "window_s": window, "budget_s": budget}


class Windows:
    """Step ends grouped into time-bounded windows: the rate of each, and when to stop.

    ``step_done(samples)`` after each step; True when enough windows are measured or the
    budget is spent (then the open window, if it has a step, is closed short: ``cut_short``;
    steps slower than the budget leave no window, and the probe is absent with that reason).
    A window closes at the first step end after ``window_s`` that is at least its ``min_steps``-th
    (k workers hand batches over in bursts: a window of fewer than k + 1 batches reads a burst or a gap,
    not the rate); one the budget ends short of ``min_steps`` steps is dropped where a full one was
    measured. ``sync`` (CUDA) runs before a window's end is read. With ``full_budget_s`` the budget is not
    spent until the warm-up and ``windows × min_steps`` steps have run (slow batches), or ``full_budget_s``.
    """

    def __init__(self, clock: Clock, *, window_s: float = WINDOW_S, windows: int = WINDOWS,
                 warmup: int = WARMUP_STEPS, budget_s: float = BUDGET_S, min_steps: int = 1,
                 sync: Callable[[], None] | None = None, full_budget_s: float | None = None) -> None:
        self.clock, self.window_s, self.windows, self.warmup = clock, window_s, windows, warmup
        self.budget_s, self.min_steps, self.sync = budget_s, min_steps, sync
        # with full_budget_s: the budget is not spent before the warm-up and every window's min_steps have run
        self.full_budget_s = full_budget_s
        self.start_s = clock()
        self.steps = 0
        self.rates: list[float] = []
        self.steps_per_window: list[int] = []
        self._window_start_s: float | None = None
        self._samples = 0
        self._window_steps = 0
        self.short = False  # a window cut short by the budget
        if warmup == 0:
            self._open()

    def step_done(self, samples: int) -> bool:
        self.steps += 1
        if self.steps <= self.warmup:
            if self.steps == self.warmup:
                self._open()
            return self._spent()
        assert self._window_start_s is not None  # opened when the warm-up ended
        self._samples += samples
        self._window_steps += 1
        now_s = self.clock()
        spent = self._spent()
        full = now_s - self._window_start_s >= self.window_s and self._window_steps >= self.min_steps
        if spent and self.rates and self._window_steps < self.min_steps:
            self.short = True  # a window short of its batches reads a burst or a gap: the full ones stand
            return True
        if full or spent:  # the budget spent: the open window is the last
            if self.sync is not None:
                self.sync()
                now_s = self.clock()
            took_s = now_s - self._window_start_s
            self.rates.append(self._samples / took_s if took_s > 0 else float("inf"))
            self.steps_per_window.append(self._window_steps)
            self.short = self.short or not full
            if len(self.rates) >= self.windows or spent:
                return True
            self._open()
        return False

    def skip(self, span_s: float) -> None:
        """``span_s`` seconds that are not the loop's measured steps (a step spanning a validation pass): neither
        the open window's time nor the budget's; no step is counted for them."""
        self.start_s += span_s
        if self._window_start_s is not None:
            self._window_start_s += span_s

    def _open(self) -> None:
        if self.sync is not None:
            self.sync()
        self._window_start_s, self._samples, self._window_steps = self.clock(), 0, 0

    def _spent(self) -> bool:
        took_s = self.clock() - self.start_s
        if self.full_budget_s is not None and took_s < self.full_budget_s \
                and self.steps < self.warmup + self.windows * self.min_steps:
            return False  # slow batches: the budget stretches (to full_budget_s) for the windows' batches
        return took_s >= self.budget_s

    def result(self, **extra: Any) -> dict[str, Any]:
        """The probe's run.json entry (``absent`` with the reason when no window closed)."""
        took_s = self.clock() - self.start_s
        if not self.rates:
            return {"absent": f"no window of {self.window_s:g} s closed within the budget of {self.budget_s:g} s "
                              f"({self.steps} steps)", "took_s": took_s, **extra}
        return {"samples_per_s": statistics.median(self.rates), "samples_per_s_per_window": list(self.rates),
                "steps_per_window": list(self.steps_per_window), "window_s": self.window_s, "took_s": took_s,
                "cut_short": self.short, **extra}


def trained_windows(clock: Clock, k: int, prefetch: int | None, *, sync: Callable[[], None] | None = None,
                    **windows: Any) -> Windows:
    """The windows of a training loop fed by ``k`` workers, opened at its first step's end (a trained probe,
    ``measure.what_if``, or a script's what-if segment, ``script.segments``): windows of at least ``k + 1``
    batches within ``WORKERS_BUDGET_S``, stretched up to ``TRAINED_FULL_BUDGET_S`` for slow batches. The first
    step is one of the warm-up; with workers the warm-up also takes the ``k × prefetch_factor`` batches asked
    for at ``iter()``, which may wait ready while the loop's first steps run slow: a window over them reads the
    queue, not the workers' rate. ``windows``: settings that override these (tests: shorter)."""
    settings: dict[str, Any] = {"budget_s": WORKERS_BUDGET_S, "min_steps": k + 1,
                                "full_budget_s": TRAINED_FULL_BUDGET_S, **windows}
    settings["warmup"] = max(int(settings.get("warmup", WARMUP_STEPS)) - 1, 0,
                             k * (prefetch if prefetch is not None else DEFAULT_PREFETCH) if k else 0)
    return Windows(clock, sync=sync, **settings)
