"""Windowed throughput: samples/s over consecutive windows of counted steps, with its spread.

One run's ``samples_per_s`` is a single number; how much it moved during the
run says whether a difference to another run means anything. This module
cuts the counted steps (``warmup == False``, in step order) into consecutive
windows and computes samples/s per window (samples in the window over the
summed ``step_s`` of its steps).

**The window rule** (``window_count`` and ``assign_windows``):

* the number of windows ``k`` is the number of whole target windows of step
  time (``TARGET_WINDOW_S`` = 1 s) in the counted steps, raised to at least
  ``MIN_WINDOWS`` (3) and then capped so every window can hold at least
  ``MIN_STEPS_PER_WINDOW`` (5) steps: ``k = min(max(floor(T / 1 s), 3), n // 5)``
  for ``n`` counted steps lasting ``T`` seconds;
* fewer than 2 windows (under 10 counted steps) give no spread: every
  statistic is ``None`` and ``reason`` says why;
* windows split the step time evenly: a step belongs to window
  ``floor(k * m / T)`` where ``m`` is the time at the middle of the step
  (seconds of counted step time before it plus half its own). If a stall makes
  a window come out with fewer than 5 steps, the steps are split into ``k``
  groups of equal step counts instead (``split`` says which was used).

**The mean and its interval**: ``mean`` is the windows' rates weighted by
their duration — total samples over total step time, so it equals the
summary's ``samples_per_s`` (with equal windows, the plain mean of the
rates). Its standard error ``se`` is the ratio estimator's,
``sqrt(sum((s_j - mean * t_j)^2) / (k (k - 1))) / mean(t_j)`` over the
windows' samples ``s_j`` and seconds ``t_j`` — for equal windows exactly
``std / sqrt(k)`` of the rates — and ``ci95_low`` / ``ci95_high`` are the
Student-t 95% interval ``mean ± t(0.975, k - 1) · se``. It assumes the window
rates are independent draws around one steady rate. Consecutive windows are
correlated when the machine drifts (another job starts, the page cache
fills), so read it as the within-run noise: it says nothing about how a
re-run on a shared machine would differ.

``std`` is the sample standard deviation (ddof = 1) of the window rates and
``cv`` is ``std`` over their plain mean; ``is_stable`` applies the same
coefficient of variation to the last few windows: the steady-state test for
measurement loops (sweeps, tuning) that add windows until the rate settles.

Pure functions over the steps DataFrame (``pipeprof.run_folder.STEP_COLUMNS``); no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.numbers import finite
from pipeprof.run_meta import JsonObject, as_number, as_object, as_str

TARGET_WINDOW_S = 1.0  # seconds of counted step time per window, when the run is long enough
MIN_STEPS_PER_WINDOW = 5
MIN_WINDOWS = 3  # raised to this when there are enough steps, so a spread can be estimated

# t(0.975, df) for df = 1..30; beyond that the Cornish-Fisher expansion in t_975 is exact to 1e-4.
_T_975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
          2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
          2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
_Z_975 = 1.959963984540054

STAT_KEYS = ("mean", "median", "min", "max", "std", "cv", "se", "ci95_low", "ci95_high")


@dataclass(frozen=True)
class Throughput:
    """summary.json ``throughput``: samples/s per window of counted steps and its spread (``throughput_windows``).

    ``windows`` (count), ``window_s`` (mean seconds of step time per window), ``steps_per_window`` (fewest and
    most steps in a window), ``split`` (``time`` or ``steps``), ``per_window_samples_per_s``, the rates'
    statistics in samples/s (``cv`` has no unit), the rule's parameters, and ``reason``: None, or why the
    statistics are None. ``to_json`` is its summary.json form, ``from_json`` reads it back.
    """

    windows: int = 0
    window_s: float | None = None
    steps_per_window: tuple[int, int] | None = None  # (min, max)
    split: str | None = None
    per_window_samples_per_s: tuple[float, ...] = ()
    mean: float | None = None  # = the summary's samples_per_s
    median: float | None = None
    min: float | None = None
    max: float | None = None
    std: float | None = None
    cv: float | None = None
    se: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    target_window_s: float = TARGET_WINDOW_S
    min_steps_per_window: int = MIN_STEPS_PER_WINDOW
    reason: str | None = None

    def to_json(self) -> JsonObject:
        steps = self.steps_per_window
        return {"windows": self.windows, "window_s": self.window_s,
                "steps_per_window": {"min": steps[0], "max": steps[1]} if steps is not None else None,
                "split": self.split, "per_window_samples_per_s": list(self.per_window_samples_per_s),
                **{k: getattr(self, k) for k in STAT_KEYS},
                "target_window_s": self.target_window_s, "min_steps_per_window": self.min_steps_per_window,
                "reason": self.reason}

    @classmethod
    def from_json(cls, data: Any) -> Throughput | None:
        """A summary.json's ``throughput`` read back; None where it has none."""
        if not isinstance(data, dict):
            return None
        steps = as_object(data.get("steps_per_window"))
        low, high = as_number(steps.get("min")), as_number(steps.get("max"))
        rates = data.get("per_window_samples_per_s")
        read = cls(windows=int(as_number(data.get("windows")) or 0), window_s=as_number(data.get("window_s")),
                   steps_per_window=(int(low), int(high)) if low is not None and high is not None else None,
                   split=as_str(data.get("split")),
                   per_window_samples_per_s=tuple(float(v) for v in rates if finite(v) is not None)
                   if isinstance(rates, list) else (),
                   target_window_s=as_number(data.get("target_window_s")) or TARGET_WINDOW_S,
                   min_steps_per_window=int(as_number(data.get("min_steps_per_window")) or MIN_STEPS_PER_WINDOW),
                   reason=as_str(data.get("reason")))
        return _with_stats(read, {k: as_number(data.get(k)) for k in STAT_KEYS})


def _with_stats(t: Throughput, stats: Mapping[str, float | None]) -> Throughput:
    """``t`` with the rates' statistics (``STAT_KEYS``) of ``stats``."""
    return replace(t, mean=stats["mean"], median=stats["median"], min=stats["min"], max=stats["max"],
                   std=stats["std"], cv=stats["cv"], se=stats["se"], ci95_low=stats["ci95_low"],
                   ci95_high=stats["ci95_high"])


def t_975(df: float) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (two-sided 95%).

    Whole ``df`` up to 30 come from the table; a fractional ``df`` (Welch)
    is rounded down there, which widens the interval slightly.
    """
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T_975):
        return _T_975[int(math.floor(df)) - 1]
    z = _Z_975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def window_count(n_steps: int, duration_s: float, *, target_window_s: float = TARGET_WINDOW_S,
                 min_steps: int = MIN_STEPS_PER_WINDOW, min_windows: int = MIN_WINDOWS) -> int:
    """How many windows ``n_steps`` counted steps lasting ``duration_s`` are cut into (see the module rule)."""
    if n_steps <= 0 or not duration_s > 0:
        return 0
    by_time = int(math.floor(duration_s / target_window_s + 1e-9))
    return min(max(by_time, min_windows), n_steps // min_steps)


def assign_windows(step_s: np.ndarray, k: int, *, min_steps: int = MIN_STEPS_PER_WINDOW) -> tuple[np.ndarray, str]:
    """The window index (0..k-1) of each step, and the split used (``time`` or ``steps``)."""
    step_s = np.asarray(step_s, dtype=float)
    n = len(step_s)
    total_s = float(step_s.sum())
    middle_s = np.cumsum(step_s) - step_s / 2
    index = np.minimum((k * middle_s / total_s).astype(int), k - 1)
    if np.bincount(index, minlength=k).min() >= min_steps:
        return index, "time"
    # Equal step counts: np.array_split's sizes, as indices.
    sizes = [len(part) for part in np.array_split(np.arange(n), k)]
    return np.repeat(np.arange(k), sizes), "steps"


def throughput_windows(steps: pd.DataFrame, *, target_window_s: float = TARGET_WINDOW_S,
                       min_steps: int = MIN_STEPS_PER_WINDOW, min_windows: int = MIN_WINDOWS) -> Throughput:
    """samples/s per window of counted steps and its spread (the ``throughput`` key of summary.json:
    ``Throughput``); every statistic None, and ``reason`` why, where there are fewer than 2 windows."""
    counted = steps.loc[~steps["warmup"].astype(bool)] if len(steps) else steps
    step_s = pd.to_numeric(counted["step_s"], errors="coerce").to_numpy(dtype=float)
    samples = pd.to_numeric(counted["samples"], errors="coerce").to_numpy(dtype=float)
    result = Throughput(target_window_s=target_window_s, min_steps_per_window=min_steps)
    n = len(step_s)
    if n == 0:
        return replace(result, reason="no counted steps")
    if not (np.isfinite(step_s).all() and np.isfinite(samples).all()):
        return replace(result, reason="a counted step has no step_s or samples value")
    total_s = float(step_s.sum())
    if not total_s > 0:
        return replace(result, reason="the counted steps took no time")
    k = window_count(n, total_s, target_window_s=target_window_s, min_steps=min_steps, min_windows=min_windows)
    if k < 2:
        return replace(result, reason=f"only {n} counted steps: a spread needs at least 2 windows of "
                                      f"{min_steps} steps ({2 * min_steps} steps)")
    index, split = assign_windows(step_s, k, min_steps=min_steps)
    window_s = np.bincount(index, weights=step_s, minlength=k)
    window_samples = np.bincount(index, weights=samples, minlength=k)
    counts = np.bincount(index, minlength=k)
    return _with_stats(replace(result, windows=k, window_s=float(window_s.mean()), split=split,
                   steps_per_window=(int(counts.min()), int(counts.max())),
                   per_window_samples_per_s=tuple(float(r) for r in window_samples / window_s)),
                       rate_stats(window_samples, window_s))


def rate_stats(samples: Sequence[float] | np.ndarray, seconds: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """Statistics of the rates ``samples / seconds`` of k >= 2 windows (see the module docstring).

    ``mean`` (duration-weighted: total samples / total seconds), ``median``,
    ``min``, ``max`` and ``std`` (ddof = 1) of the rates, ``cv`` (std / plain
    mean of the rates), ``se`` (ratio-estimator standard error of ``mean``)
    and the Student-t 95% interval ``ci95_low`` / ``ci95_high``.
    """
    s, t = np.asarray(samples, dtype=float), np.asarray(seconds, dtype=float)
    k = len(s)
    if k < 2 or not (t > 0).all():
        return {key: None for key in STAT_KEYS}
    rates = s / t
    mean = float(s.sum() / t.sum())
    std = float(rates.std(ddof=1))
    se = float(np.sqrt(np.sum((s - mean * t) ** 2) / (k * (k - 1))) / t.mean())
    half = t_975(k - 1) * se
    plain = float(rates.mean())
    return {"mean": mean, "median": float(np.median(rates)), "min": float(rates.min()), "max": float(rates.max()),
            "std": std, "cv": std / plain if plain > 0 else None, "se": se,
            "ci95_low": max(mean - half, 0.0), "ci95_high": mean + half}  # a rate is never below 0


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """``std / mean`` (sample std, ddof = 1) of ``values``; None for fewer than 2 values or a mean <= 0."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2 or not np.isfinite(v).all():
        return None
    mean = float(v.mean())
    return float(v.std(ddof=1)) / mean if mean > 0 else None


def is_stable(per_window_rates: Sequence[float], cv_threshold: float = 0.05, last_n: int = 5) -> bool:
    """Whether the rate has settled: the last ``last_n`` window rates vary by less than ``cv_threshold``.

    True when there are at least ``last_n`` rates (``last_n`` >= 2) and the
    coefficient of variation (sample std / mean) of the last ``last_n`` is
    strictly below ``cv_threshold`` (0.05: the windows agree within about
    5%). False with fewer rates, with a non-finite rate among the last
    ``last_n``, or a mean <= 0 — never "stable" on too little evidence.
    Meant for measurement loops that add one window at a time and stop at
    steady state; the rates are samples/s per window (``throughput_windows``'
    ``per_window_samples_per_s``, or the caller's own windows).
    """
    if last_n < 2:
        raise ValueError(f"last_n must be >= 2 to measure a variation, got {last_n}")
    rates = list(per_window_rates)
    if len(rates) < last_n:
        return False
    cv = coefficient_of_variation(rates[-last_n:])
    return cv is not None and cv < cv_threshold
