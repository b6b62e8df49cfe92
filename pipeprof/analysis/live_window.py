"""The live view's input: the aggregate of the last window of a run (``LiveWindow``), pure.

``timed_window`` makes one from the steps and loading records a profiled
script has written so far (``pipeprof profile --live``); an attach makes its
own from sampled stacks (``attach.live``). ``render.live`` only formats it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import COMPUTE_BOUND_FRACTION, H2D_BOUND_FRACTION, INPUT_BOUND_FRACTION
from pipeprof.analysis.verdict import input_degree
from pipeprof.loader_rules import queue_capacity_batches


@dataclass(frozen=True)
class LiveWindow:
    """The aggregate of the last window; None where not measured (with ``absent`` saying why)."""

    t_end_s: float
    window_s: float
    sampled: bool  # shares of py-spy samples (attach), not of timed steps
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    data_wait_fraction: float | None = None
    h2d_fraction: float | None = None
    compute_fraction: float | None = None
    ready_batches_mean: float | None = None  # the prefetch queue
    queue_capacity_batches: int | None = None
    worker_busy_fraction: Mapping[str, float] = field(default_factory=dict)  # worker label -> busy share
    gpu_util_pct: float | None = None
    gpu_mem_bytes: float | None = None
    absent: Mapping[str, str] = field(default_factory=dict)  # "steps", "queue", "gpu" -> why not shown

    @property
    def verdict(self) -> Reason:
        """The verdict's thresholds (analysis.thresholds) on the window's shares: a ``live_verdict`` whose
        ``klass`` is ``unknown`` (no shares yet), ``h2d``, ``compute`` or the input degree, with the shares."""
        wait, h2d = self.data_wait_fraction, self.h2d_fraction
        if wait is None or math.isnan(wait):
            klass = "unknown"
        elif h2d is not None and h2d >= H2D_BOUND_FRACTION and h2d >= wait:
            klass = "h2d"
        elif wait < COMPUTE_BOUND_FRACTION:
            klass = "compute"
        else:
            klass = input_degree(wait)
        return Reason("live_verdict", {"klass": klass, "wait": wait, "h2d": h2d,
                                       "input_bound_from": INPUT_BOUND_FRACTION})


def timed_window(steps: pd.DataFrame, loading: pd.DataFrame, *, now_s: float, window_s: float,
                 num_workers: int | None = None, prefetch_factor: int | None = None,
                 gpu: Mapping[str, Any] | None = None, gpu_absent: str | None = None) -> LiveWindow:
    """The last ``window_s`` seconds before ``now_s`` of a timed run: its steps (``run_folder.STEP_COLUMNS``,
    warm-up included: the view is of now) and the batches its workers made (``LOADING_COLUMNS``); ``gpu``: the
    sampler's last row (``gpu_util_pct``, ``gpu_proc_mem_bytes``)."""
    start_s = now_s - window_s
    recent = steps[pd.to_numeric(steps["t_start_s"], errors="coerce") >= start_s] if not steps.empty else steps
    step_total = float(pd.to_numeric(recent["step_s"], errors="coerce").sum()) if len(recent) else 0.0

    def share(column: str) -> float | None:
        if not step_total:
            return None
        return float(pd.to_numeric(recent[column], errors="coerce").sum()) / step_total

    ready = pd.to_numeric(recent["ready_batches"], errors="coerce").dropna() if len(recent) else pd.Series(dtype=float)
    busy: dict[str, float] = {}
    if not loading.empty:
        made = loading[(pd.to_numeric(loading["t_end_s"], errors="coerce") >= start_s) & (loading["worker"] >= 0)]
        for worker, rows in made.groupby("worker"):
            work_s = float(rows[["fetch_s", "prep_s", "collate_s"]].apply(pd.to_numeric, errors="coerce").sum().sum())
            busy[str(int(worker))] = min(1.0, work_s / window_s)
    util = finite_or_none((gpu or {}).get("gpu_util_pct"))
    absent = {"gpu": gpu_absent or "no GPU reading yet"} if util is None else {}
    if not len(recent):
        absent["steps"] = "no step in the last window"
    if ready.empty:
        absent["queue"] = "not observable (num_workers = 0, or no step yet)"
    return LiveWindow(
        t_end_s=now_s, window_s=window_s, sampled=False,
        steps_per_s=len(recent) / window_s if len(recent) else None,
        samples_per_s=float(pd.to_numeric(recent["samples"], errors="coerce").sum()) / window_s if len(recent) else None,
        data_wait_fraction=share("data_wait_s"), h2d_fraction=share("h2d_s"), compute_fraction=share("compute_s"),
        ready_batches_mean=float(ready.mean()) if not ready.empty else None,
        queue_capacity_batches=queue_capacity_batches(num_workers, prefetch_factor) if num_workers else None,
        worker_busy_fraction=busy, gpu_util_pct=util, gpu_mem_bytes=finite_or_none((gpu or {}).get("gpu_proc_mem_bytes")),
        absent=absent)


def finite_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
