"""Whether the run itself varied: windows of its counted steps that would be judged differently.

Four identical runs on a loaded machine were called ``input:prep``,
``input:prep``, ``compute`` and ``input:prep`` at data waits of 17 %, 18 %,
4 % and 34 %: each verdict was confident, and each was one stretch of a
machine whose other load came and went. One run holds the same evidence
inside it. ``run_variation`` cuts the counted steps into the windows of
``analysis.windows`` (the throughput spread's: about a second of step time
each, at least 5 steps) and reads, per window, the share of step time spent
waiting for data and the machine's other load during it: the machine's CPU
use (``samples.csv`` ``cpu_util_pct``) less the profiled process tree's own
(``main_cpu_pct`` + ``workers_cpu_pct`` over the cores), a share of all
cores.

The run **varies** when two windows' waits fall in different degrees of the
verdict (under ``COMPUTE_BOUND_FRACTION``, up to ``INPUT_BOUND_FRACTION``,
above it) and differ by at least ``RUN_VARIATION_POINTS``: then
``with_variation`` marks the verdict uncertain, adds the class the other
windows lean to, and notes the two windows that differ most and what the
machine's other load was in each, rather than one confident class.

Pure functions over the steps and samples tables; no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.causes import input_cause, join_candidates
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import COMPUTE_BOUND_FRACTION, INPUT_BOUND_FRACTION, RUN_VARIATION_POINTS
from pipeprof.analysis.verdict import Verdict
from pipeprof.analysis.windows import MIN_STEPS_PER_WINDOW, TARGET_WINDOW_S, assign_windows, window_count


@dataclass(frozen=True)
class WindowWait:
    """One window of counted steps: its steps, its span (run seconds), its data-wait share of step time and
    the machine's other load during it (share of all cores; None where the sampler could not tell)."""

    first_step: int
    last_step: int
    t0_s: float
    t1_s: float
    data_wait_fraction: float
    other_load_fraction: float | None


@dataclass(frozen=True)
class RunVariation:
    """The windows, the two whose waits differ most (``low``, ``high``), and whether the run varies."""

    windows: tuple[WindowWait, ...]
    low: WindowWait
    high: WindowWait
    varies: bool


def degree(wait_fraction: float) -> int:
    """0 compute-bound, 1 partly input-bound, 2 input-bound: the verdict's degrees of a data-wait share."""
    return 0 if wait_fraction < COMPUTE_BOUND_FRACTION else 1 if wait_fraction < INPUT_BOUND_FRACTION else 2


def run_variation(steps: pd.DataFrame, samples: pd.DataFrame | None, cores: int | None) -> RunVariation | None:
    """The run's windows and whether it varies (module docstring); None under two windows of counted steps."""
    if steps is None or steps.empty:
        return None
    counted = steps.loc[~steps["warmup"].astype(bool)].sort_values("step")
    step_s = pd.to_numeric(counted["step_s"], errors="coerce").to_numpy(dtype=float)
    wait_s = pd.to_numeric(counted["data_wait_s"], errors="coerce").to_numpy(dtype=float)
    if not len(step_s) or not (np.isfinite(step_s).all() and np.isfinite(wait_s).all()) or step_s.sum() <= 0:
        return None
    k = window_count(len(step_s), float(step_s.sum()), target_window_s=TARGET_WINDOW_S,
                     min_steps=MIN_STEPS_PER_WINDOW)
    if k < 2:
        return None
    index, _ = assign_windows(step_s, k, min_steps=MIN_STEPS_PER_WINDOW)
    number = counted["step"].to_numpy(dtype=int)
    start = pd.to_numeric(counted["t_start_s"], errors="coerce").to_numpy(dtype=float)
    windows = []
    for w in range(k):
        mine = index == w
        if not mine.any() or step_s[mine].sum() <= 0:
            continue
        t0, t1 = float(start[mine].min()), float((start[mine] + step_s[mine]).max())
        windows.append(WindowWait(int(number[mine].min()), int(number[mine].max()), t0, t1,
                                  float(wait_s[mine].sum() / step_s[mine].sum()), _other_load(samples, cores, t0, t1)))
    if len(windows) < 2:
        return None
    low = min(windows, key=lambda w: w.data_wait_fraction)
    high = max(windows, key=lambda w: w.data_wait_fraction)
    varies = degree(low.data_wait_fraction) != degree(high.data_wait_fraction) and \
        high.data_wait_fraction - low.data_wait_fraction >= RUN_VARIATION_POINTS
    return RunVariation(tuple(windows), low, high, varies)


def _other_load(samples: pd.DataFrame | None, cores: int | None, t0_s: float, t1_s: float) -> float | None:
    """The machine's CPU use less the process tree's, as a share of all cores, over the ticks in [t0, t1]."""
    if samples is None or samples.empty or not cores or "cpu_util_pct" not in samples:
        return None
    t = pd.to_numeric(samples["t_s"], errors="coerce")
    during = samples.loc[(t >= t0_s) & (t <= t1_s)]
    machine = pd.to_numeric(during["cpu_util_pct"], errors="coerce")
    tree = sum((pd.to_numeric(during[c], errors="coerce").fillna(0.0) for c in ("main_cpu_pct", "workers_cpu_pct")
                if c in during), pd.Series(0.0, index=during.index))
    other = ((machine - tree / cores) / 100.0).dropna()
    return float(np.clip(other.mean(), 0.0, 1.0)) if len(other) else None


def with_variation(judged: Verdict, variation: RunVariation | None, attr: Attribution) -> Verdict:
    """``judged`` uncertain, with the class the other windows lean to among its candidates and a note naming
    the windows that differ most and the machine's other load in each, when the run varies; else as it is."""
    if variation is None or not variation.varies or judged.klass == "unknown":
        return judged
    low, high = variation.low, variation.high
    if judged.klass == "compute":
        other: tuple[str, ...] = (input_cause(attr).klass,)
    elif judged.klass.startswith("input:") or judged.klass == "balanced":
        other = ("compute",)
    else:
        other = ()
    evidence = {**judged.evidence, "window_data_wait_low_fraction": low.data_wait_fraction,
                "window_data_wait_high_fraction": high.data_wait_fraction}
    note = Reason("run_varied_windows", {
        "low_first_step": low.first_step, "low_last_step": low.last_step,
        "low_data_wait_fraction": low.data_wait_fraction, "low_other_load_fraction": low.other_load_fraction,
        "high_first_step": high.first_step, "high_last_step": high.last_step,
        "high_data_wait_fraction": high.data_wait_fraction, "high_other_load_fraction": high.other_load_fraction})
    return dataclasses.replace(judged, reason=Reason("run_varied", {}, (judged.reason,)), uncertain=True,
                               candidates=join_candidates(judged.candidates, other), evidence=evidence,
                               notes=(*judged.notes, note))
